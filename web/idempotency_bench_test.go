package web_test

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/auth"
	"github.com/lockstep-hq/lockstep/gate"
	"github.com/lockstep-hq/lockstep/gitstore"
	"github.com/lockstep-hq/lockstep/internal/testenv"
	"github.com/lockstep-hq/lockstep/repositories"
	"github.com/lockstep-hq/lockstep/sqlstore"
	"github.com/lockstep-hq/lockstep/telemetry"
	"github.com/lockstep-hq/lockstep/web"
	"github.com/lockstep-hq/lockstep/workspaces"
)

// BenchmarkIdempotentWrite compares one write (the incremental push's
// final PUT worktree?tree=, a new commit each time) without and with an
// Idempotency-Key, on SQLite in tmpfs, alternating the two so both see
// the same machine load: it reports the median of each and the
// difference (the cost of the key: body hash, claim, the record in the
// commit's transaction; the answer is stored after it is sent).
func BenchmarkIdempotentWrite(b *testing.B) {
	for _, dialect := range []string{"sqlite", "postgres"} {
		b.Run(dialect, func(b *testing.B) {
			base := ""
			if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
				base = "/dev/shm"
			}
			dir, err := os.MkdirTemp(base, "lockstep-bench-")
			if err != nil {
				b.Fatal(err)
			}
			defer os.RemoveAll(dir)
			ctx := context.Background()
			dbURL := dir + "/m.db"
			if dialect == "postgres" {
				dbURL = testenv.MustPostgresDB(b)
			}
			db, err := sqlstore.Open(ctx, dbURL, sqlstore.Options{Migrate: true})
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			keys := auth.New(db, nil)
			_, admin, _ := keys.Create(ctx, auth.System, "admin", lockstep.RoleAdmin)
			m := telemetry.NewMetrics()
			repos := repositories.New(repositories.Config{Objects: gitstore.Local{}, DataDir: dir}, db, nil, m, nil)
			defer repos.Close()
			s := &web.Server{Store: db, Keys: keys, Metrics: m, Repos: repos, Workspaces: workspaces.New(db, repos, nil, nil, m, nil), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
				Gate: gate.New(gate.Config{}, db, repos, nil, m, nil)}
			srv := httptest.NewServer(s.Handler())
			defer srv.Close()
			call := func(method, path, body, idem string) int {
				req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+admin)
				if body != "" {
					req.Header.Set("Content-Type", "application/json")
				}
				if idem != "" {
					req.Header.Set("Idempotency-Key", idem)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				return resp.StatusCode
			}
			if st := call("POST", "/api/v1/repos", `{"name":"r"}`, ""); st != 201 {
				b.Fatalf("create repo: %d", st)
			}
			var tb bytes.Buffer
			tw := tar.NewWriter(&tb)
			tw.WriteHeader(&tar.Header{Name: "README", Mode: 0o644, Size: 3, Typeflag: tar.TypeReg})
			tw.Write([]byte("hi\n"))
			tw.Close()
			req, _ := http.NewRequest("PUT", srv.URL+"/api/v1/repos/r/worktree?expect_oid="+lockstep.ZeroOID, &tb)
			req.Header.Set("Authorization", "Bearer "+admin)
			req.Header.Set("Content-Type", "application/x-tar")
			resp, err := http.DefaultClient.Do(req)
			if err != nil || resp.StatusCode != 201 {
				b.Fatalf("first push: %v %v", err, resp)
			}
			var first struct {
				Tree string `json:"tree"`
			}
			json.NewDecoder(resp.Body).Decode(&first)
			resp.Body.Close()
			path := "/api/v1/repos/r/worktree?force=true&allow_empty=true&tree=" + first.Tree
			var plain, keyed []time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				if st := call("PUT", path, "", ""); st != 201 {
					b.Fatalf("push %d: %d", i, st)
				}
				t1 := time.Now()
				if st := call("PUT", path, "", fmt.Sprintf("bench-%d", i)); st != 201 {
					b.Fatalf("keyed push %d: %d", i, st)
				}
				plain, keyed = append(plain, t1.Sub(t0)), append(keyed, time.Since(t1))
			}
			b.StopTimer()
			med := func(d []time.Duration) float64 {
				sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
				return float64(d[len(d)/2].Microseconds()) / 1000
			}
			p, k := med(plain), med(keyed)
			b.ReportMetric(p, "plain-ms")
			b.ReportMetric(k, "keyed-ms")
			b.ReportMetric(k-p, "overhead-ms")
		})
	}
}
