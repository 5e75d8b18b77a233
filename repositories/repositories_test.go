package repositories_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/internal/servicetest"
	"github.com/lockstep-hq/lockstep/internal/testenv"
	"github.com/lockstep-hq/lockstep/repositories"
)

// TestPushCASConflict: a push with a stale expect_oid is refused with
// ref_conflict, writes no ref and leaves the branch where it was.
func TestPushCASConflict(t *testing.T) {
	ctx := context.Background()
	w := servicetest.MustWorld(t, servicetest.Options{})
	first := w.MustRepo(t, "app", map[string]string{"a.txt": "one\n"})
	second, err := w.Repos.PushTar(ctx, w.Admin, "app", servicetest.Tar(t, map[string]string{"a.txt": "two\n"}),
		repositories.WriteOptions{Branch: "main", ExpectOID: first.Commit})
	if err != nil {
		t.Fatal(err)
	}
	_, err = w.Repos.PushTar(ctx, w.Admin, "app", servicetest.Tar(t, map[string]string{"a.txt": "three\n"}),
		repositories.WriteOptions{Branch: "main", ExpectOID: first.Commit})
	if code := lockstep.ErrorCode(err); code != lockstep.EREFCONFLICT {
		t.Fatalf("stale expect_oid: got %v (%s), want ref_conflict", err, code)
	}
	r, _ := w.Repos.Repo(ctx, "app")
	commit, _, err := w.Repos.BranchTip(ctx, r, "main")
	if err != nil || commit != second.Commit {
		t.Fatalf("main at %s (%v), want %s", commit, err, second.Commit)
	}
	// Without any expectation an existing branch is not overwritten.
	_, err = w.Repos.PushTar(ctx, w.Admin, "app", servicetest.Tar(t, map[string]string{"a.txt": "four\n"}), repositories.WriteOptions{Branch: "main"})
	if code := lockstep.ErrorCode(err); code != lockstep.EPRECONDITION {
		t.Fatalf("push without expect_oid: got %v (%s), want %s", err, code, lockstep.EPRECONDITION)
	}
}

// TestRollbackTreeEquality: a rollback commits exactly the old tree on
// top of the current tip (history kept).
func TestRollbackTreeEquality(t *testing.T) {
	ctx := context.Background()
	w := servicetest.MustWorld(t, servicetest.Options{})
	good := w.MustRepo(t, "app", map[string]string{"a.txt": "good\n", "dir/b.txt": "b\n"})
	bad, err := w.Repos.PushTar(ctx, w.Admin, "app", servicetest.Tar(t, map[string]string{"a.txt": "broken\n"}),
		repositories.WriteOptions{Branch: "main", ExpectOID: good.Commit})
	if err != nil {
		t.Fatal(err)
	}
	rb, err := w.Repos.Rollback(ctx, w.Admin, "app", good.Commit, repositories.WriteOptions{Branch: "main", ExpectOID: bad.Commit})
	if err != nil {
		t.Fatal(err)
	}
	if rb.Tree != good.Tree || rb.Parent != bad.Commit || rb.Commit == good.Commit {
		t.Fatalf("rollback %+v: want tree %s with parent %s (a new commit)", rb, good.Tree, bad.Commit)
	}
	ci, err := w.Repos.Commit(ctx, "app", "main")
	if err != nil || ci.Tree.String() != good.Tree {
		t.Fatalf("main's tree %v (%v), want %s", ci, err, good.Tree)
	}
}

// steppingClock answers t0 to the first call after arm, and t0+1h to
// every later one.
type steppingClock struct {
	mu    sync.Mutex
	t0    time.Time
	armed bool
	later bool
}

func (c *steppingClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.armed && !c.later {
		c.later = true
		return c.t0
	}
	if c.later {
		return c.t0.Add(time.Hour)
	}
	return c.t0
}

// TestPushTarDurationIncludesIngest: a tar push's duration_ms (and its
// log entry's) counts from the start of the request, tar ingest and
// object write included (commitTreeWith used to restart the clock).
func TestPushTarDurationIncludesIngest(t *testing.T) {
	ctx := context.Background()
	clock := &steppingClock{t0: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	w := servicetest.MustWorld(t, servicetest.Options{Now: clock.now})
	if _, err := w.Repos.CreateRepo(ctx, w.Admin, "app", "main"); err != nil {
		t.Fatal(err)
	}
	clock.mu.Lock()
	clock.armed = true // PushTar's start is the next reading: t0; every later one t0+1h
	clock.mu.Unlock()
	res, err := w.Repos.PushTar(ctx, w.Admin, "app", servicetest.Tar(t, map[string]string{"a.txt": "x\n"}),
		repositories.WriteOptions{Branch: "main", ExpectOID: lockstep.ZeroOID})
	if err != nil {
		t.Fatal(err)
	}
	if want := float64(time.Hour.Milliseconds()); res.DurationMS != want {
		t.Fatalf("duration_ms %v, want %v (from the request's start)", res.DurationMS, want)
	}
	ops, err := w.Store.ListOps(ctx, lockstep.OpFilter{Repo: "app", Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range ops {
		if e.Op == "push" {
			found = true
			if e.DurationUS != time.Hour.Microseconds() {
				t.Fatalf("push entry duration_us %d, want %d", e.DurationUS, time.Hour.Microseconds())
			}
		}
	}
	if !found {
		t.Fatalf("no push entry in %+v", ops)
	}
}

// TestForcedEditsUnderContention: 24 forced edit batches to different
// files of one branch, all at once, all land (each retries its own
// compare-and-swap on the new tip) and the final tree has every file, on
// SQLite and on Postgres.
func TestForcedEditsUnderContention(t *testing.T) {
	for _, db := range []string{"sqlite", "postgres"} {
		t.Run(db, func(t *testing.T) {
			ctx := context.Background()
			o := servicetest.Options{}
			if db == "postgres" {
				o.DB = testenv.MustPostgresDB(t)
			}
			w := servicetest.MustWorld(t, o)
			w.MustRepo(t, "app", map[string]string{"a.txt": "a\n"})
			const agents = 24
			errs := make([]error, agents)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range agents {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					_, errs[i] = w.Repos.EditFiles(ctx, w.Admin, "app",
						[]repositories.Edit{{Path: fmt.Sprintf("f/%02d.txt", i), Content: []byte(fmt.Sprintf("%d\n", i))}},
						repositories.WriteOptions{Branch: "main", Force: true})
				}()
			}
			close(start)
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					t.Errorf("forced edit %d: %v (%s)", i, err, lockstep.ErrorCode(err))
				}
			}
			entries, err := w.Repos.Tree(ctx, "app", "main", "f")
			if err != nil {
				t.Fatal(err)
			}
			if len(entries) != agents {
				t.Fatalf("main's f/ has %d files, want %d: %+v", len(entries), agents, entries)
			}
			log, err := w.Repos.Log(ctx, "app", "main", 0, "")
			if err != nil {
				t.Fatal(err)
			}
			if len(log) != agents+1 {
				t.Fatalf("main has %d commits, want %d (the push and one per edit)", len(log), agents+1)
			}
		})
	}
}
