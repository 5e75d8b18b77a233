package sqlstore_test

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	sqlite "modernc.org/sqlite"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/sqlstore"
)

// A read that fails half-way through its rows (a lost connection, an I/O
// error) ends rows.Next early; only rows.Err tells it from the end of the
// result. These tests make the failure real on SQLite: a column is turned
// into a generated column computed by lockstep_test_fail, a function that
// raises an error for values containing "FAIL", so stepping onto that row
// fails inside the driver. (On PostgreSQL an error mid-result also aborts
// the transaction, so the next statement fails anyway; SQLite carries on,
// which is where an unchecked rows.Err loses data.)

var registerFail sync.Once

func openFailing(t *testing.T) *sqlstore.DB {
	t.Helper()
	registerFail.Do(func() {
		err := sqlite.RegisterDeterministicScalarFunction("lockstep_test_fail", 1, func(_ *sqlite.FunctionContext, args []driver.Value) (driver.Value, error) {
			s := fmt.Sprint(args[0])
			if b, ok := args[0].([]byte); ok {
				s = string(b)
			}
			if strings.Contains(s, "FAIL") {
				return nil, errors.New("lockstep_test_fail: injected read error")
			}
			return args[0], nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
	return mustOpen(t, filepath.Join(t.TempDir(), "meta.db"))
}

// failColumn makes reading table.col fail on rows whose value contains FAIL.
func failColumn(t *testing.T, db *sqlstore.DB, table, col string) {
	t.Helper()
	ctx := context.Background()
	for _, q := range []string{
		fmt.Sprintf(`ALTER TABLE %s RENAME COLUMN %s TO %s_raw`, table, col, col),
		fmt.Sprintf(`ALTER TABLE %s ADD COLUMN %s TEXT GENERATED ALWAYS AS (lockstep_test_fail(%s_raw)) VIRTUAL`, table, col, col),
	} {
		if _, err := db.SQL().ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

func hookFixture(t *testing.T, db *sqlstore.DB, events ...[]string) *lockstep.Repo {
	t.Helper()
	ctx := context.Background()
	r := &lockstep.Repo{Name: "base", Network: "base", DefaultBranch: "main"}
	if err := db.CreateRepo(ctx, r, nil, entry("repo.create")); err != nil {
		t.Fatal(err)
	}
	for i, ev := range events {
		h := &lockstep.Hook{ID: fmt.Sprintf("hook_%d", i), RepoID: r.ID, URL: "http://127.0.0.1:1/", Secret: "s", Events: ev, Active: true,
			CreatedAt: time.Unix(int64(1000+i), 0)}
		if err := db.CreateHook(ctx, h, entry("hook.create")); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// The outbox rows are written in the ref's transaction: a failure while
// reading the hooks must fail the ref move, not commit it with some of the
// deliveries missing.
func TestUpdateRefsFailsWhenReadingHooksFails(t *testing.T) {
	ctx := context.Background()
	db := openFailing(t)
	r := hookFixture(t, db, []string{"*"}, []string{"FAIL"})
	failColumn(t, db, "hooks", "events")
	oid := fmt.Sprintf("%040x", 7)
	err := db.UpdateRefs(ctx, []lockstep.RefUpdate{{RepoID: r.ID, Repo: r.Name, Name: "refs/heads/main", Old: lockstep.ZeroOID, New: oid}}, nil,
		[]lockstep.HookEvent{{Repos: []string{"base"}, Event: "push"}}, entry("push"))
	if err == nil {
		t.Fatal("UpdateRefs committed although reading the hooks failed")
	}
	if _, err := db.Ref(ctx, r.ID, "refs/heads/main"); lockstep.ErrorCode(err) != lockstep.ENOTFOUND {
		t.Fatalf("the ref moved without its deliveries: %v", err)
	}
	if ops, _ := db.ListOps(ctx, lockstep.OpFilter{Op: "push"}); len(ops) != 0 {
		t.Fatalf("a push entry was appended: %v", ops)
	}
}

func TestClaimDeliveriesFailsWhenReadingFails(t *testing.T) {
	ctx := context.Background()
	db := openFailing(t)
	hookFixture(t, db, []string{"*"})
	for _, p := range []string{"ok", "FAIL"} {
		if err := db.EnqueueEvents(ctx, []lockstep.HookEvent{{Repos: []string{"base"}, Event: "push", Payload: map[string]any{"p": p}}}); err != nil {
			t.Fatal(err)
		}
	}
	failColumn(t, db, "deliveries", "payload")
	got, err := db.ClaimDeliveries(ctx, time.Now().Add(time.Hour), time.Minute, 10)
	if err == nil {
		t.Fatalf("ClaimDeliveries answered %d deliveries and no error although reading failed", len(got))
	}
}

// The attempts of each delivery are read in a second loop. (The list of
// deliveries itself is sorted, and SQLite's sorter reads every row before
// the first is returned, so a failing row fails the query up front there.)
func TestDeliveriesFailsWhenReadingAttemptsFails(t *testing.T) {
	t.Run("attempts", func(t *testing.T) {
		ctx := context.Background()
		db := openFailing(t)
		hookFixture(t, db, []string{"*"})
		if err := db.EnqueueEvents(ctx, []lockstep.HookEvent{{Repos: []string{"base"}, Event: "push"}}); err != nil {
			t.Fatal(err)
		}
		ds, err := db.ClaimDeliveries(ctx, time.Now().Add(time.Hour), time.Minute, 10)
		if err != nil || len(ds) != 1 {
			t.Fatalf("claim: %v %v", ds, err)
		}
		now := time.Now()
		for i, msg := range []string{"timeout", "FAIL"} {
			if err := db.RecordAttempt(ctx, ds[0].ID, lockstep.DeliveryAttempt{Attempt: i + 1, StatusCode: 500, Error: msg, At: now}, lockstep.DeliveryPending, now); err != nil {
				t.Fatal(err)
			}
		}
		failColumn(t, db, "delivery_attempts", "error")
		got, err := db.Deliveries(ctx, "hook_0", 10)
		if err == nil {
			t.Fatalf("Deliveries answered %+v and no error although reading the attempts failed", got)
		}
	})
}
