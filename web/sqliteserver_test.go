package web_test

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
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

// sqliteServer is a web.Server wired by hand on a fresh SQLite database
// and local git stores in a temp dir (for tests that start or wrap it
// themselves), with an admin key.
type sqliteServer struct {
	db     *sqlstore.DB
	repos  *repositories.Service
	wss    *workspaces.Service
	admin  *lockstep.Key
	secret string
	s      *web.Server
}

// newSQLiteServer builds it; wrap (if not nil) wraps the store the
// server itself reads (the services use the database directly).
func newSQLiteServer(tb testing.TB, wrap func(*sqlstore.DB) lockstep.Store) *sqliteServer {
	tb.Helper()
	ctx := context.Background()
	dir := tb.TempDir()
	db, err := sqlstore.Open(ctx, filepath.Join(dir, "m.db"), sqlstore.Options{Migrate: true})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	keys := auth.New(db, nil)
	admin, secret, err := keys.Create(ctx, auth.System, "admin", lockstep.RoleAdmin)
	if err != nil {
		tb.Fatal(err)
	}
	m := telemetry.NewMetrics()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	repos := repositories.New(repositories.Config{Objects: gitstore.Local{}, DataDir: filepath.Join(dir, "data")}, db, logger, m, nil)
	tb.Cleanup(func() { repos.Close() })
	wss := workspaces.New(db, repos, nil, nil, m, nil)
	var store lockstep.Store = db
	if wrap != nil {
		store = wrap(db)
	}
	s := &web.Server{Store: store, Keys: keys, Metrics: m, Repos: repos, Workspaces: wss, Logger: logger, Gate: gate.New(gate.Config{}, db, repos, logger, m, nil)}
	return &sqliteServer{db: db, repos: repos, wss: wss, admin: admin, secret: secret, s: s}
}
