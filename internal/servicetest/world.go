// Package servicetest builds the application services on real
// dependencies for fast tests without HTTP: a SQLite metadata store in a
// temp dir, fork networks on disk, real keys. Database branching uses a
// real Postgres when one is configured (internal/testenv).
package servicetest

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/auth"
	"github.com/lockstep-hq/lockstep/checkpoints"
	"github.com/lockstep-hq/lockstep/gate"
	"github.com/lockstep-hq/lockstep/gitstore"
	"github.com/lockstep-hq/lockstep/repositories"
	"github.com/lockstep-hq/lockstep/sqlstore"
	"github.com/lockstep-hq/lockstep/telemetry"
	"github.com/lockstep-hq/lockstep/workspaces"
)

// World is a set of wired services.
type World struct {
	Dir         string
	Store       *sqlstore.DB
	Repos       *repositories.Service
	Workspaces  *workspaces.Service
	Gate        *gate.Service
	Checkpoints *checkpoints.Service
	Admin       *lockstep.Key
	Agent       *lockstep.Key
	CI          *lockstep.Key
}

// Options tunes MustWorld.
type Options struct {
	Now func() time.Time // nil: time.Now
	// StoreNow is the metadata store's clock (timestamps of refs and
	// status changes); nil: time.Now.
	StoreNow func() time.Time
	Brancher lockstep.Brancher   // nil: database branching off
	Repos    repositories.Config // Objects nil: gitstore.Local{}
	// DB is the metadata store's URL (sqlstore.Open): "" for SQLite in
	// the temp dir; a Postgres URL (testenv.MustPostgresDB) for Postgres.
	DB string
}

// MustWorld wires the services on a fresh SQLite store in t.TempDir()
// (or the store at o.DB).
func MustWorld(tb testing.TB, o Options) *World {
	tb.Helper()
	ctx := context.Background()
	dir := tb.TempDir()
	dbURL := o.DB
	if dbURL == "" {
		dbURL = filepath.Join(dir, "m.db")
	}
	db, err := sqlstore.Open(ctx, dbURL, sqlstore.Options{Migrate: true, Now: o.StoreNow})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	keys := auth.New(db, nil)
	w := &World{Dir: dir, Store: db}
	for _, k := range []struct {
		dst  **lockstep.Key
		name string
		role string
	}{{&w.Admin, "admin", lockstep.RoleAdmin}, {&w.Agent, "agent", lockstep.RoleAgent}, {&w.CI, "ci", lockstep.RoleCI}} {
		key, _, err := keys.Create(ctx, auth.System, k.name, k.role)
		if err != nil {
			tb.Fatal(err)
		}
		*k.dst = key
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	m := telemetry.NewMetrics()
	cfg := o.Repos
	cfg.DataDir = dir
	if cfg.Objects == nil {
		cfg.Objects = gitstore.Local{}
	}
	w.Repos = repositories.New(cfg, db, log, m, o.Now)
	tb.Cleanup(func() { w.Repos.Close() })
	w.Workspaces = workspaces.New(db, w.Repos, o.Brancher, log, m, o.Now)
	tb.Cleanup(func() { w.Workspaces.Close() })
	w.Gate = gate.New(gate.Config{}, db, w.Repos, log, m, o.Now)
	w.Checkpoints = checkpoints.New(db, w.Repos, o.Brancher, log, m, o.Now)
	tb.Cleanup(func() { w.Checkpoints.Close() })
	return w
}

// Tar returns an uncompressed tar of files (path → content).
func Tar(tb testing.TB, files map[string]string) *bytes.Buffer {
	tb.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := tw.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Size: int64(len(files[n])), Typeflag: tar.TypeReg}); err != nil {
			tb.Fatal(err)
		}
		io.WriteString(tw, files[n])
	}
	if err := tw.Close(); err != nil {
		tb.Fatal(err)
	}
	return &buf
}

// MustRepo creates repository name (branch main) with files pushed as
// its first commit, and returns the push.
func (w *World) MustRepo(tb testing.TB, name string, files map[string]string) *repositories.PushResult {
	tb.Helper()
	ctx := context.Background()
	if _, err := w.Repos.CreateRepo(ctx, w.Admin, name, "main"); err != nil {
		tb.Fatal(err)
	}
	res, err := w.Repos.PushTar(ctx, w.Admin, name, Tar(tb, files), repositories.WriteOptions{Branch: "main", ExpectOID: lockstep.ZeroOID})
	if err != nil {
		tb.Fatal(err)
	}
	return res
}
