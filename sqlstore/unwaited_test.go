package sqlstore_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/lockstep-hq/lockstep"
)

// TestHotReadsUnwaited: on SQLite the hot single-row lookups (key by
// prefix, repository with a ref) and the statements of an append, which
// cannot wait, run without the request context's cancellation: with a
// cancellable context they allocate what they allocate without one (plus
// the context wrapper), not a watcher goroutine's channel and closures
// per statement. A context already done still fails them, and an append
// whose context is done writes nothing.
func TestHotReadsUnwaited(t *testing.T) {
	ctx := context.Background()
	db := mustOpen(t, filepath.Join(t.TempDir(), "meta.db"))
	oid := "0123456789abcdef0123456789abcdef01234567"
	if err := db.CreateRepo(ctx, &lockstep.Repo{Name: "app", Network: "net", DefaultBranch: "main"}, []lockstep.Ref{{Name: "refs/heads/main", OID: oid}}, entry("repo.create")); err != nil {
		t.Fatal(err)
	}
	if err := db.CreateKey(ctx, &lockstep.Key{ID: "k1", Name: "k1", Role: lockstep.RoleAdmin, Prefix: "lsk_abcdefgh", Hash: []byte("h")}, nil); err != nil {
		t.Fatal(err)
	}
	live, cancel := context.WithCancel(ctx)
	defer cancel()
	for _, c := range []struct {
		name  string
		slack float64
		run   func(ctx context.Context) error
	}{
		{"RepoRef", 1, func(ctx context.Context) error { _, _, err := db.RepoRef(ctx, "app", "refs/heads/main"); return err }},
		{"KeyByPrefix", 1, func(ctx context.Context) error { _, err := db.KeyByPrefix(ctx, "lsk_abcdefgh"); return err }},
		// The BEGIN and the COMMIT keep ctx (database/sql's watcher
		// of the transaction, the driver's of the two): 11-16 more
		// allocations here; a watcher per statement made it ~30.
		{"AppendOp", 22, func(ctx context.Context) error { return db.AppendOp(ctx, entry("merge.preflight")) }},
	} {
		if err := c.run(live); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		plain := testing.AllocsPerRun(50, func() { c.run(ctx) })
		cancellable := testing.AllocsPerRun(50, func() { c.run(live) })
		t.Logf("%s: %.0f allocations, %.0f with a cancellable context", c.name, plain, cancellable)
		if cancellable > plain+c.slack {
			t.Errorf("%s: %.0f allocations with a cancellable context, %.0f without: want at most %.0f more (no watcher per statement)", c.name, cancellable, plain, c.slack)
		}
	}

	done, stop := context.WithCancel(ctx)
	stop()
	if _, _, err := db.RepoRef(done, "app", "refs/heads/main"); !errors.Is(err, context.Canceled) {
		t.Fatalf("RepoRef with a done context: %v, want context.Canceled", err)
	}
	if _, err := db.KeyByPrefix(done, "lsk_abcdefgh"); !errors.Is(err, context.Canceled) {
		t.Fatalf("KeyByPrefix with a done context: %v, want context.Canceled", err)
	}
	before, err := db.ListOps(ctx, lockstep.OpFilter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.AppendOp(done, entry("merge.preflight")); err == nil {
		t.Fatal("AppendOp with a done context succeeded")
	}
	after, err := db.ListOps(ctx, lockstep.OpFilter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(before) {
		t.Fatalf("an append with a done context wrote %d entries", len(after)-len(before))
	}
	if res, err := db.VerifyOps(ctx); err != nil || !res.OK {
		t.Fatalf("verify: %+v %v", res, err)
	}
}
