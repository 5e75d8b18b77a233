package merge

import (
	"context"
	"fmt"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/lockstep-hq/lockstep"
)

// commitReads counts the commits read from the store.
type commitReads struct {
	Store
	n int
}

func (c *commitReads) EncodedObject(t plumbing.ObjectType, h plumbing.Hash) (plumbing.EncodedObject, error) {
	if t == plumbing.CommitObject {
		c.n++
	}
	return c.Store.EncodedObject(t, h)
}

// TestBaseCache: a merge of a pair the cache holds skips the walk and
// answers what the merge alone answers (also with two merge bases, whose
// virtual base is rebuilt every time); a moved tip is another pair; the
// cache never holds more than its bound, and a pair dropped when it
// starts over is walked again, with the same answer.
func TestBaseCache(t *testing.T) {
	ctx := context.Background()
	s := memory.NewStorage()
	file := func(v string) plumbing.Hash { return mustTree(t, s, map[string]f{"f": txt(ten), "g": txt(v)}) }
	base := mustCommit(t, s, file("base\n"))
	ours, theirs := base, base
	for i := range 10 { // ten commits on each side: a walk of 20
		ours = mustCommit(t, s, mustTree(t, s, map[string]f{"f": txt("o" + ten), "g": txt(fmt.Sprint(i, "\n"))}), ours)
		theirs = mustCommit(t, s, file(fmt.Sprint("base\n", i, "\n")), theirs)
	}
	// Criss-cross: x and y each merge both of a1 and b1.
	a1 := mustCommit(t, s, file("a\n"), base)
	b1 := mustCommit(t, s, file("b\n"), base)
	x := mustCommit(t, s, file("a\nb\nx\n"), a1, b1)
	y := mustCommit(t, s, file("a\nb\ny\n"), b1, a1)

	alone := func(o, th plumbing.Hash) *Result {
		r, err := Merge(ctx, NewOverlay(s), o, th, Options{Deep: true})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	same := func(what string, got, want *Result) {
		t.Helper()
		if got.Clean != want.Clean || got.Tree != want.Tree || got.MergeBase != want.MergeBase || got.UpToDate != want.UpToDate ||
			got.FastForward != want.FastForward || len(got.Conflicts) != len(want.Conflicts) {
			t.Fatalf("%s: clean=%v tree=%s base=%s up=%v ff=%v %d conflicts; alone: clean=%v tree=%s base=%s up=%v ff=%v %d conflicts", what,
				got.Clean, got.Tree, got.MergeBase, got.UpToDate, got.FastForward, len(got.Conflicts),
				want.Clean, want.Tree, want.MergeBase, want.UpToDate, want.FastForward, len(want.Conflicts))
		}
	}
	bc := NewBaseCache(2)
	cached := func(o, th plumbing.Hash) (*Result, int) {
		cs := &commitReads{Store: s}
		r, err := Merge(ctx, NewOverlay(cs), o, th, Options{Deep: true, Bases: bc})
		if err != nil {
			t.Fatal(err)
		}
		if bc.Len() > 2 {
			t.Fatalf("cache holds %d pairs, bound 2", bc.Len())
		}
		return r, cs.n
	}

	r, walked := cached(ours, theirs)
	same("first merge", r, alone(ours, theirs))
	if r.MergeBase != base {
		t.Fatalf("merge base %s, want %s", r.MergeBase, base)
	}
	r, hit := cached(ours, theirs)
	same("second merge", r, alone(ours, theirs))
	if hit != 3 || walked <= hit { // ours, theirs and the base's tree
		t.Fatalf("commit reads: %d walking, %d from the cache (want 3)", walked, hit)
	}
	// Theirs moved: another pair, walked, with its own base.
	moved := mustCommit(t, s, file("moved\n"), ours)
	r, _ = cached(ours, moved)
	same("moved theirs", r, alone(ours, moved))
	if !r.FastForward || r.MergeBase != ours || bc.Len() != 2 { // walked: a second pair held
		t.Fatalf("moved theirs: ff=%v base=%s (want %s), %d pairs held (want 2)", r.FastForward, r.MergeBase, ours, bc.Len())
	}
	// Two bases (criss-cross): the third pair makes the cache start over.
	for range 2 {
		r, _ = cached(x, y)
		same("criss-cross", r, alone(x, y))
	}
	if bc.Len() != 1 {
		t.Fatalf("cache holds %d pairs after starting over, want 1", bc.Len())
	}
	// (ours, theirs) was dropped: walked again, same answer.
	r, n := cached(ours, theirs)
	same("after eviction", r, alone(ours, theirs))
	if n != walked {
		t.Fatalf("evicted pair: %d commit reads, want the walk's %d", n, walked)
	}
	// The slice handed out is a copy: changing it changes no later answer.
	w := newWalker(s)
	got, err := w.mergeBases(ctx, bc, x, y)
	if err != nil || len(got) != 2 {
		t.Fatalf("bases %v %v", got, err)
	}
	got[0], got[1] = plumbing.ZeroHash, plumbing.ZeroHash
	r, _ = cached(x, y)
	same("after changing a handed-out slice", r, alone(x, y))
}

// TestRepeatedMergeReadsNoCommit: with a network's shared commit cache
// and base cache (what a repeated preflight of unmoved tips has), a merge
// reads no commit object from the store: both tips' trees and the base's
// come from the cache, and the answer is the merge's alone. On the base
// both tips were read and fully decoded on every merge (2 reads). A
// missing tip is still not_found.
func TestRepeatedMergeReadsNoCommit(t *testing.T) {
	ctx := context.Background()
	s := memory.NewStorage()
	file := func(v string) plumbing.Hash { return mustTree(t, s, map[string]f{"f": txt(ten), "g": txt(v)}) }
	base := mustCommit(t, s, file("base\n"))
	ours := mustCommit(t, s, mustTree(t, s, map[string]f{"f": txt("o" + ten), "g": txt("base\n")}), base)
	theirs := mustCommit(t, s, file("base\nt\n"), base)
	alone, err := Merge(ctx, NewOverlay(s), ours, theirs, Options{Deep: true})
	if err != nil {
		t.Fatal(err)
	}
	if !alone.Clean || alone.MergeBase != base {
		t.Fatalf("alone: clean=%v base=%s", alone.Clean, alone.MergeBase)
	}
	opts := Options{Deep: true, Commits: NewCommitCache(), Bases: NewBaseCache(10)}
	for i, want := range []int{3, 0, 0} { // first: ours, theirs, the base
		cs := &commitReads{Store: s}
		r, err := Merge(ctx, NewOverlay(cs), ours, theirs, opts)
		if err != nil {
			t.Fatal(err)
		}
		if r.Clean != alone.Clean || r.Tree != alone.Tree || r.MergeBase != alone.MergeBase || r.FastForward || r.UpToDate {
			t.Fatalf("merge %d: clean=%v tree=%s base=%s; alone: clean=%v tree=%s base=%s", i, r.Clean, r.Tree, r.MergeBase, alone.Clean, alone.Tree, alone.MergeBase)
		}
		if cs.n != want {
			t.Fatalf("merge %d: %d commit reads, want %d", i, cs.n, want)
		}
	}
	missing := plumbing.NewHash("0123456789012345678901234567890123456789")
	if _, err := Merge(ctx, NewOverlay(s), ours, missing, opts); lockstep.ErrorCode(err) != lockstep.ENOTFOUND {
		t.Fatalf("missing theirs: %v, want not_found", err)
	}
	if _, err := Merge(ctx, NewOverlay(s), missing, theirs, opts); lockstep.ErrorCode(err) != lockstep.ENOTFOUND {
		t.Fatalf("missing ours: %v, want not_found", err)
	}
}
