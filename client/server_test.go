package client_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/auth"
	"github.com/lockstep-hq/lockstep/checkpoints"
	"github.com/lockstep-hq/lockstep/client"
	"github.com/lockstep-hq/lockstep/delivery"
	"github.com/lockstep-hq/lockstep/gate"
	"github.com/lockstep-hq/lockstep/gitstore"
	"github.com/lockstep-hq/lockstep/repositories"
	"github.com/lockstep-hq/lockstep/sqlstore"
	"github.com/lockstep-hq/lockstep/telemetry"
	"github.com/lockstep-hq/lockstep/web"
	"github.com/lockstep-hq/lockstep/workspaces"
)

// testServer is a real Lockstep server in-process: SQLite and the
// repositories in a temp dir, no database branching.
type testServer struct {
	URL              string
	Handler          http.Handler
	Admin, Agent, CI string
	close            func()
}

func (s *testServer) Close() { s.close() }

// startServer starts a server whose data lives in dir.
func startServer(dir string) (*testServer, error) { return startServerWith(dir, nil) }

// startServerWith starts a server with database branching through
// brancher (nil: off).
func startServerWith(dir string, brancher lockstep.Brancher) (*testServer, error) {
	ctx := context.Background()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	db, err := sqlstore.Open(ctx, filepath.Join(dir, "m.db"), sqlstore.Options{Migrate: true})
	if err != nil {
		return nil, err
	}
	keys := auth.New(db, nil)
	_, admin, err := keys.Create(ctx, auth.System, "admin", lockstep.RoleAdmin)
	if err != nil {
		db.Close()
		return nil, err
	}
	_, agent, _ := keys.Create(ctx, auth.System, "agent", lockstep.RoleAgent)
	_, ci, _ := keys.Create(ctx, auth.System, "ci", lockstep.RoleCI)
	m := telemetry.NewMetrics()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	repos := repositories.New(repositories.Config{Objects: gitstore.Local{}, DataDir: dir}, db, logger, m, nil)
	allow, err := delivery.ParseAllowList("127.0.0.1")
	if err != nil {
		return nil, err
	}
	g := gate.New(gate.Config{HookAllowHosts: allow}, db, repos, logger, m, nil)
	wss := workspaces.New(db, repos, brancher, logger, m, nil)
	cps := checkpoints.New(db, repos, brancher, logger, m, nil)
	s := &web.Server{Store: db, Keys: keys, Metrics: m, Repos: repos, Workspaces: wss, Logger: logger, Gate: g, Checkpoints: cps, Jobs: db}
	h := s.Handler()
	srv := httptest.NewServer(h)
	return &testServer{URL: srv.URL, Handler: h, Admin: admin, Agent: agent, CI: ci, close: func() {
		srv.Close()
		wss.Close()
		cps.Close()
		repos.Close()
		db.Close()
	}}, nil
}

func mustServer(t *testing.T) *testServer {
	t.Helper()
	s, err := startServer(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func mustClient(t *testing.T, s *testServer, key string) *client.Client {
	t.Helper()
	c := client.New(s.URL, key)
	c.Retry = client.RetryPolicy{MaxAttempts: 1}
	return c
}
