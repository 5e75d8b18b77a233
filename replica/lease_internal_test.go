package replica

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/lockstep-hq/lockstep/internal/testenv"
	"github.com/lockstep-hq/lockstep/sqlstore"
)

// TestLeaseExclusiveWithinReplica: a lease one replica holds is not
// granted again to the same replica (the database lease alone is the
// holder's, so a claim by it succeeds): a GC and a compaction of one
// network on one replica ran at once, the compaction removing from the
// cache a pack the GC was reading (found by e2e/gcrace_test.go). Once
// released it can be taken again; another replica cannot take it meanwhile.
func TestLeaseExclusiveWithinReplica(t *testing.T) {
	ctx := context.Background()
	db, err := sqlstore.Open(ctx, testenv.MustPostgresDB(t), sqlstore.Options{Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	m := New(Config{Packs: db, Holder: "replica-a", Log: quiet})
	t.Cleanup(m.Close)
	other := New(Config{Packs: db, Holder: "replica-b", Log: quiet})
	t.Cleanup(other.Close)

	stop, ok, err := m.holdLease(ctx, "compact:net")
	if err != nil || !ok {
		t.Fatalf("first claim: ok %v, %v", ok, err)
	}
	if _, ok, err := m.holdLease(ctx, "compact:net"); err != nil || ok {
		t.Fatalf("second claim on the same replica while held: ok %v, %v; want refused", ok, err)
	}
	if _, ok, err := other.holdLease(ctx, "compact:net"); err != nil || ok {
		t.Fatalf("claim on another replica while held: ok %v, %v; want refused", ok, err)
	}
	// Another lease of the same replica is independent.
	stopGC, ok, err := m.holdLease(ctx, "gc")
	if err != nil || !ok {
		t.Fatalf("claim of another lease: ok %v, %v", ok, err)
	}
	stopGC()
	stop()
	stop2, ok, err := m.holdLease(ctx, "compact:net")
	if err != nil || !ok {
		t.Fatalf("claim after release: ok %v, %v", ok, err)
	}
	stop2()
}
