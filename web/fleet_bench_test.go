package web_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/auth"
	"github.com/lockstep-hq/lockstep/gate"
	"github.com/lockstep-hq/lockstep/gitstore"
	"github.com/lockstep-hq/lockstep/repositories"
	"github.com/lockstep-hq/lockstep/sqlstore"
	"github.com/lockstep-hq/lockstep/telemetry"
	"github.com/lockstep-hq/lockstep/web"
	"github.com/lockstep-hq/lockstep/workspaces"
)

// BenchmarkFleet measures the routes an agent fleet leans on with 0, 1,000
// and 10,000 workspaces forked from one repository: a page of the
// workspace listing, a workspace's refs, its git ref advertisement, a
// merge preflight of base into it, and a fork. A page must cost the
// same however many workspaces exist.
//
//	go test -run XXX -bench Fleet ./web/
func BenchmarkFleet(b *testing.B) {
	for _, size := range []int{0, 1000, 10000} {
		b.Run(fmt.Sprintf("workspaces=%d", size), func(b *testing.B) {
			ctx := context.Background()
			dir := b.TempDir()
			db, err := sqlstore.Open(ctx, filepath.Join(dir, "m.db"), sqlstore.Options{Migrate: true})
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
			repos := repositories.New(repositories.Config{Objects: gitstore.Local{}, DataDir: dir}, db, logger, m, nil)
			defer repos.Close()
			s := &web.Server{Store: db, Keys: keys, Metrics: m, Repos: repos, Workspaces: workspaces.New(db, repos, nil, nil, m, nil), Logger: logger, Gate: gate.New(gate.Config{}, db, repos, logger, m, nil)}
			srv := httptest.NewServer(s.Handler())
			defer srv.Close()
			if _, err := repos.CreateRepo(ctx, admin, "app", "main"); err != nil {
				b.Fatal(err)
			}
			// A tip on main, so that every fork holds a ref (a loose ref
			// file per workspace in the network's repository).
			if _, err := repos.EditFiles(ctx, admin, "app", []repositories.Edit{{Path: "README.md", Content: []byte("app\n")}}, repositories.WriteOptions{Branch: "main", Force: true}); err != nil {
				b.Fatal(err)
			}
			for i := range size {
				if _, err := s.Workspaces.Fork(ctx, admin, "app", fmt.Sprintf("ws-%05d", i), ""); err != nil {
					b.Fatal(err)
				}
			}
			get := func(b *testing.B, path string) {
				req, _ := http.NewRequest("GET", srv.URL+path, nil)
				req.Header.Set("Authorization", "Bearer "+secret)
				resp, err := http.DefaultClient.Do(req)
				if err != nil || resp.StatusCode != 200 {
					b.Fatalf("GET %s: %v %v", path, err, resp)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			post := func(b *testing.B, path, body string) {
				req, _ := http.NewRequest("POST", srv.URL+path, strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+secret)
				req.Header.Set("Content-Type", "application/json")
				resp, err := http.DefaultClient.Do(req)
				if err != nil || resp.StatusCode != 200 {
					b.Fatalf("POST %s: %v %v", path, err, resp)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			b.Run("list-page-100", func(b *testing.B) {
				for b.Loop() {
					get(b, "/api/v1/repos/app/workspaces?limit=100")
				}
			})
			b.Run("refs", func(b *testing.B) {
				for b.Loop() {
					get(b, "/api/v1/repos/app/refs")
				}
			})
			// One workspace's ref advertisement, as `git fetch` asks for it.
			target := "app"
			if size > 0 {
				target = "ws-00000"
			}
			b.Run("git-advertise", func(b *testing.B) {
				for b.Loop() {
					get(b, "/git/"+target+".git/info/refs?service=git-upload-pack")
				}
			})
			b.Run("preflight", func(b *testing.B) {
				for b.Loop() {
					post(b, "/api/v1/repos/"+target+"/merges", `{"ours":"main","theirs":"app:main","preflight":true}`)
				}
			})
			b.Run("fork", func(b *testing.B) {
				i := 0
				for b.Loop() {
					if _, err := s.Workspaces.Fork(ctx, admin, "app", fmt.Sprintf("bench-%07d", i), ""); err != nil {
						b.Fatal(err)
					}
					i++
				}
			})
		})
	}
}
