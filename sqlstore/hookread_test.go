package sqlstore_test

import (
	"context"
	"database/sql/driver"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	sqlite "modernc.org/sqlite"

	"github.com/lockstep-hq/lockstep"
)

var (
	registerCount sync.Once
	hookReads     atomic.Int64
)

// TestUpdateRefsReadsHooksOnce: the events of one ref transaction (a push
// of many branches: one event each) read the repository's hooks once,
// not once per event, and each hook still gets a delivery for every event
// it subscribes to. Reads are counted on SQLite with hooks.events turned
// into a generated column computed by a counting function.
func TestUpdateRefsReadsHooksOnce(t *testing.T) {
	ctx := context.Background()
	registerCount.Do(func() {
		err := sqlite.RegisterDeterministicScalarFunction("lockstep_test_count", 1, func(_ *sqlite.FunctionContext, args []driver.Value) (driver.Value, error) {
			hookReads.Add(1)
			return args[0], nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
	db := mustOpen(t, filepath.Join(t.TempDir(), "meta.db"))
	r := hookFixture(t, db, []string{"*"}, []string{"push"})
	for _, q := range []string{
		`ALTER TABLE hooks RENAME COLUMN events TO events_raw`,
		`ALTER TABLE hooks ADD COLUMN events TEXT GENERATED ALWAYS AS (lockstep_test_count(events_raw)) VIRTUAL`,
	} {
		if _, err := db.SQL().ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	var ups []lockstep.RefUpdate
	var events []lockstep.HookEvent
	for i := range 10 {
		ups = append(ups, lockstep.RefUpdate{RepoID: r.ID, Repo: r.Name, Name: fmt.Sprintf("refs/heads/b%d", i), Old: lockstep.ZeroOID, New: fmt.Sprintf("%040x", i+1)})
		ev := "push"
		if i%2 == 1 {
			ev = "other"
		}
		events = append(events, lockstep.HookEvent{Repos: []string{"base"}, Event: ev, Payload: map[string]any{"i": i}})
	}
	hookReads.Store(0)
	if err := db.UpdateRefs(ctx, ups, nil, events, entry("push")); err != nil {
		t.Fatal(err)
	}
	if n := hookReads.Load(); n != 2 {
		t.Fatalf("10 events of one transaction read hooks.events %d times, want 2 (one read of each of the 2 hooks)", n)
	}
	got := map[string]int{}
	rows, err := db.SQL().QueryContext(ctx, `SELECT hook_id, count(*) FROM deliveries GROUP BY hook_id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			t.Fatal(err)
		}
		got[id] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if got["hook_0"] != 10 || got["hook_1"] != 5 || len(got) != 2 {
		t.Fatalf("deliveries per hook %v, want hook_0 (every event) 10 and hook_1 (push) 5", got)
	}
}
