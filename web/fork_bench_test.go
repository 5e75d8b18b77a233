package web_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/auth"
	"github.com/lockstep-hq/lockstep/client"
	"github.com/lockstep-hq/lockstep/gate"
	"github.com/lockstep-hq/lockstep/gitstore"
	"github.com/lockstep-hq/lockstep/internal/testenv"
	"github.com/lockstep-hq/lockstep/repositories"
	"github.com/lockstep-hq/lockstep/sqlstore"
	"github.com/lockstep-hq/lockstep/telemetry"
	"github.com/lockstep-hq/lockstep/web"
	"github.com/lockstep-hq/lockstep/workspaces"
)

// BenchmarkForkKeptAlive: POST /repos/app/forks over one kept-alive
// connection, on SQLite and on Postgres metadata (the test server of
// internal/testenv), interleaved fork by fork with `git update-ref` of a
// new branch in a bare repository (process start included, as git pays
// it). Metrics: median ms per fork and per update-ref; on Postgres also
// the floor, a one-row `BEGIN; INSERT; COMMIT` sent in one round trip on
// the same server (its COMMIT waits for the WAL flush as the fork's
// does), interleaved with each fork.
//
//	go test -run XXX -bench ForkKeptAlive -benchtime 200x ./web/
func BenchmarkForkKeptAlive(b *testing.B) {
	for _, dialect := range []string{"sqlite", "postgres"} {
		b.Run(dialect, func(b *testing.B) {
			ctx := context.Background()
			dir := b.TempDir()
			dbURL := filepath.Join(dir, "m.db")
			if dialect == "postgres" {
				dbURL = testenv.MustPostgresDB(b)
			}
			db, err := sqlstore.Open(ctx, dbURL, sqlstore.Options{Migrate: true})
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			keys := auth.New(db, nil)
			admin, secret, err := keys.Create(ctx, auth.System, "admin", lockstep.RoleAdmin)
			if err != nil {
				b.Fatal(err)
			}
			m := telemetry.NewMetrics()
			logger := slog.New(slog.NewTextHandler(io.Discard, nil))
			repos := repositories.New(repositories.Config{Objects: gitstore.Local{}, DataDir: filepath.Join(dir, "data")}, db, logger, m, nil)
			defer repos.Close()
			s := &web.Server{Store: db, Keys: keys, Metrics: m, Repos: repos, Workspaces: workspaces.New(db, repos, nil, nil, m, nil), Logger: logger, Gate: gate.New(gate.Config{}, db, repos, logger, m, nil)}
			srv := httptest.NewServer(s.Handler())
			defer srv.Close()
			if _, err := repos.CreateRepo(ctx, admin, "app", "main"); err != nil {
				b.Fatal(err)
			}
			if _, err := repos.EditFiles(ctx, admin, "app", []repositories.Edit{{Path: "README.md", Content: []byte("app\n")}}, repositories.WriteOptions{Branch: "main", Force: true}); err != nil {
				b.Fatal(err)
			}
			bare := filepath.Join(dir, "bare.git")
			gitOut(b, dir, nil, "init", "-q", "--bare", bare)
			gitOut(b, dir, nil, "--git-dir", bare, "-c", "user.name=b", "-c", "user.email=b@x", "commit-tree", "-m", "x", "4b825dc642cb6eb9a060e54bf8d69288fbee4904")
			tip := gitOut(b, dir, nil, "--git-dir", bare, "-c", "user.name=b", "-c", "user.email=b@x", "commit-tree", "-m", "x", "4b825dc642cb6eb9a060e54bf8d69288fbee4904")
			tip = tip[:40]
			gitOut(b, dir, nil, "--git-dir", bare, "update-ref", "refs/heads/main", tip)
			c := client.New(srv.URL, secret)
			for i := range 5 { // warm: connection, prepared statements
				if _, err := c.Fork(ctx, "app", fmt.Sprintf("warm-%d", i)); err != nil {
					b.Fatal(err)
				}
			}
			floor := func() {}
			if dialect == "postgres" {
				if _, err := db.SQL().ExecContext(ctx, `CREATE TABLE bench_floor (id BIGSERIAL PRIMARY KEY, v INT NOT NULL)`); err != nil {
					b.Fatal(err)
				}
				floor = func() {
					// No arguments: one simple-protocol message, one round trip.
					if _, err := db.SQL().ExecContext(ctx, `BEGIN; INSERT INTO bench_floor (v) VALUES (1); COMMIT`); err != nil {
						b.Fatal(err)
					}
				}
			}
			var forks, refs, floors []time.Duration
			i := 0
			for b.Loop() {
				t0 := time.Now()
				if _, err := c.Fork(ctx, "app", fmt.Sprintf("ws-%07d", i)); err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				cmd := exec.Command("git", "--git-dir", bare, "update-ref", fmt.Sprintf("refs/heads/ws-%07d", i), "main")
				if out, err := cmd.CombinedOutput(); err != nil {
					b.Fatalf("update-ref: %v %s", err, out)
				}
				t2 := time.Now()
				floor()
				forks = append(forks, t1.Sub(t0))
				refs = append(refs, t2.Sub(t1))
				floors = append(floors, time.Since(t2))
				i++
			}
			med := func(d []time.Duration) float64 {
				sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
				return float64(d[len(d)/2].Microseconds()) / 1000
			}
			b.ReportMetric(med(forks), "ms/fork")
			b.ReportMetric(med(refs), "ms/update-ref")
			if dialect == "postgres" {
				b.ReportMetric(med(floors), "ms/floor-commit")
			}
			b.ReportMetric(0, "ns/op")
		})
	}
}
