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

// TestRefsManyUpdatesOneBatch: a batch of many updates (whose statements
// SQLite prepares once per transaction) checks each one as a batch of one
// does: a name clash or a lost compare-and-swap anywhere refuses the
// whole batch, with the ref that failed and its actual value.
func TestRefsManyUpdatesOneBatch(t *testing.T) {
	backends(t, func(t *testing.T, open func() *sqlstore.DB) {
		ctx := context.Background()
		db := open()
		r := &lockstep.Repo{Name: "base", Network: "base", DefaultBranch: "main"}
		if err := db.CreateRepo(ctx, r, nil, entry("repo.create")); err != nil {
			t.Fatal(err)
		}
		a, b := fmt.Sprintf("%040x", 1), fmt.Sprintf("%040x", 2)
		up := func(ups ...lockstep.RefUpdate) error {
			for i := range ups {
				ups[i].RepoID, ups[i].Repo = r.ID, r.Name
			}
			return db.UpdateRefs(ctx, ups, nil, nil, entry("push"))
		}
		create := func(name, oid string) lockstep.RefUpdate {
			return lockstep.RefUpdate{Name: name, Old: lockstep.ZeroOID, New: oid}
		}
		var first []lockstep.RefUpdate
		for i := range 12 {
			first = append(first, create(fmt.Sprintf("refs/heads/b%d", i), a), create(fmt.Sprintf("refs/tags/v%d/x/y", i), a))
		}
		if err := up(first...); err != nil {
			t.Fatal(err)
		}
		// A clash at the end of a batch: nothing of it lands.
		batch := []lockstep.RefUpdate{create("refs/heads/c1", a), create("refs/heads/c2", a), create("refs/heads/c3/d", a), create("refs/tags/v3/x", a)}
		err := up(batch...)
		if d := lockstep.ErrorDetails(err); lockstep.ErrorCode(err) != lockstep.EREFCONFLICT || d["ref"] != "refs/tags/v3/x" || d["conflicting_ref"] != "refs/tags/v3/x/y" {
			t.Fatalf("want a clash of refs/tags/v3/x, got %v %v", err, d)
		}
		if _, err := db.Ref(ctx, r.ID, "refs/heads/c1"); lockstep.ErrorCode(err) != lockstep.ENOTFOUND {
			t.Fatalf("refused batch leaked refs/heads/c1: %v", err)
		}
		// A lost compare-and-swap in the middle: the actual value is told.
		batch = []lockstep.RefUpdate{
			{Name: "refs/heads/b0", Old: a, New: b}, {Name: "refs/heads/b1", Old: a, New: b},
			{Name: "refs/heads/b2", Old: b, New: a}, {Name: "refs/heads/b3", Old: a, New: b},
		}
		err = up(batch...)
		if m, ok := lockstep.AsRefMismatch(err); !ok || m.Ref != "refs/heads/b2" {
			t.Fatalf("want a mismatch on refs/heads/b2, got %v", err)
		}
		if ref, _ := db.Ref(ctx, r.ID, "refs/heads/b0"); ref.OID != a {
			t.Fatalf("refused batch moved refs/heads/b0 to %s", ref.OID)
		}
		// Updates, deletes and creates at once.
		batch = []lockstep.RefUpdate{
			{Name: "refs/heads/b0", Old: a, New: b}, {Name: "refs/heads/b1", Old: a, New: lockstep.ZeroOID},
			create("refs/heads/b1/new", b), {Name: "refs/heads/b2", Old: a, New: b}, create("refs/heads/z", b),
		}
		if err := up(batch...); err != nil {
			t.Fatal(err)
		}
		refs, err := db.Refs(ctx, r.ID)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, ref := range refs {
			got[ref.Name] = ref.OID
		}
		if len(got) != 25 || got["refs/heads/b0"] != b || got["refs/heads/b1/new"] != b || got["refs/heads/b2"] != b || got["refs/heads/z"] != b || got["refs/heads/b3"] != a {
			t.Fatalf("refs after the batches: %v", got)
		}
		if _, ok := got["refs/heads/b1"]; ok {
			t.Fatal("refs/heads/b1 not deleted")
		}
	})
}
