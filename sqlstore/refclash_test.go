package sqlstore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/sqlstore"
)

// TestRefsDirectoryFileClash: a ref cannot be created when it would be a
// file where another ref needs a directory, or the other way round (issue
// 9: "ab" then "ab/cd" made the on-disk mirror, and every restart, fail).
func TestRefsDirectoryFileClash(t *testing.T) {
	backends(t, func(t *testing.T, open func() *sqlstore.DB) {
		ctx := context.Background()
		db := open()
		r := &lockstep.Repo{Name: "base", Network: "base", DefaultBranch: "main"}
		if err := db.CreateRepo(ctx, r, nil, entry("repo.create")); err != nil {
			t.Fatal(err)
		}
		a := fmt.Sprintf("%040x", 1)
		up := func(ups ...lockstep.RefUpdate) error {
			for i := range ups {
				ups[i].RepoID, ups[i].Repo = r.ID, r.Name
			}
			return db.UpdateRefs(ctx, ups, nil, nil, entry("push"))
		}
		create := func(name string) lockstep.RefUpdate {
			return lockstep.RefUpdate{Name: "refs/heads/" + name, Old: lockstep.ZeroOID, New: a}
		}
		wantClash := func(err error, ref, other string) {
			t.Helper()
			d := lockstep.ErrorDetails(err)
			if lockstep.ErrorCode(err) != lockstep.EREFCONFLICT || d["ref"] != ref || d["conflicting_ref"] != other {
				t.Fatalf("want ref_conflict %s vs %s, got %v %v", ref, other, err, d)
			}
		}
		for _, n := range []string{"ab", "a", "abc/d", "a_c", "x%", "é"} {
			if err := up(create(n)); err != nil {
				t.Fatalf("create %s: %v", n, err)
			}
		}
		wantClash(up(create("ab/cd")), "refs/heads/ab/cd", "refs/heads/ab")
		wantClash(up(create("ab/cd/ef")), "refs/heads/ab/cd/ef", "refs/heads/ab")
		wantClash(up(create("abc")), "refs/heads/abc", "refs/heads/abc/d")
		wantClash(up(create("é/x")), "refs/heads/é/x", "refs/heads/é")
		// LIKE wildcards in names are plain characters.
		for _, n := range []string{"a_b/x", "x%y/z", "x/y"} {
			if err := up(create(n)); err != nil {
				t.Fatalf("create %s: %v", n, err)
			}
		}
		// One batch that would create both sides is refused as a whole.
		wantClash(up(create("p"), create("p/q")), "refs/heads/p/q", "refs/heads/p")
		if _, err := db.Ref(ctx, r.ID, "refs/heads/p"); lockstep.ErrorCode(err) != lockstep.ENOTFOUND {
			t.Fatalf("refused batch leaked refs/heads/p: %v", err)
		}
		// Deleting "ab" and creating "ab/cd" in one batch is fine, in either order.
		if err := up(create("ab/cd"), lockstep.RefUpdate{Name: "refs/heads/ab", Old: a, New: lockstep.ZeroOID}); err != nil {
			t.Fatalf("replace ab by ab/cd: %v", err)
		}
		// A failed clash appended no log entry.
		ops, _ := db.ListOps(ctx, lockstep.OpFilter{Op: "push"})
		if len(ops) != 10 {
			t.Fatalf("push entries = %d, want 10", len(ops))
		}
	})
}

// TestRefsDirectoryFileClashConcurrent: creating "c" and "c/d" at the same
// time never leaves both.
func TestRefsDirectoryFileClashConcurrent(t *testing.T) {
	backends(t, func(t *testing.T, open func() *sqlstore.DB) {
		ctx := context.Background()
		db := open()
		r := &lockstep.Repo{Name: "base", Network: "base", DefaultBranch: "main"}
		if err := db.CreateRepo(ctx, r, nil, entry("repo.create")); err != nil {
			t.Fatal(err)
		}
		a := fmt.Sprintf("%040x", 1)
		for round := 0; round < 10; round++ {
			names := []string{fmt.Sprintf("refs/heads/c%d", round), fmt.Sprintf("refs/heads/c%d/d", round)}
			var wg sync.WaitGroup
			errs := make([]error, 8)
			for i := range errs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs[i] = db.UpdateRefs(ctx, []lockstep.RefUpdate{{RepoID: r.ID, Repo: r.Name, Name: names[i%2], Old: lockstep.ZeroOID, New: a}}, nil, nil, entry("push"))
				}()
			}
			wg.Wait()
			won := 0
			for _, err := range errs {
				switch lockstep.ErrorCode(err) {
				case "":
					won++
				case lockstep.EREFCONFLICT:
				default:
					t.Fatalf("round %d: %v", round, err)
				}
			}
			_, e0 := db.Ref(ctx, r.ID, names[0])
			_, e1 := db.Ref(ctx, r.ID, names[1])
			if won != 1 || (e0 == nil) == (e1 == nil) {
				t.Fatalf("round %d: %d winners, %s exists=%v, %s exists=%v", round, won, names[0], e0 == nil, names[1], e1 == nil)
			}
		}
	})
}
