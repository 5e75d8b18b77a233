package gitstore

import (
	"math/rand"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// TestAheadBehindSameSecond: commits made by a program share their
// committer second, so a parent is often as new as its child. The walk
// must not stop before the side that reaches such a parent through a
// later-walked child has marked it (it did: AheadBehind(mid, tip) of
// root ← mid ← tip in one second answered 1 ahead, the root, and a
// scoped key's reachability check built on it refused an ancestor).
// Random histories with many ties are checked against a full walk.
func TestAheadBehindSameSecond(t *testing.T) {
	n := MustOpen(t)
	empty := &plumbing.MemoryObject{}
	empty.SetType(plumbing.TreeObject)
	if _, err := n.WriteObjects([]plumbing.EncodedObject{empty}); err != nil {
		t.Fatal(err)
	}
	parents := map[plumbing.Hash][]plumbing.Hash{}
	k := 0
	commit := func(at int64, ps ...plumbing.Hash) plumbing.Hash {
		k++
		sig := object.Signature{Name: "a", Email: "a@example.com", When: time.Unix(at, 0).UTC()}
		h, _, err := n.WriteCommit(CommitSpec{Tree: empty.Hash(), Parents: ps, Author: sig, Committer: sig, Message: string(rune('a'+k%26)) + "\n"})
		if err != nil {
			t.Fatal(err)
		}
		parents[h] = ps
		return h
	}
	reach := func(h plumbing.Hash) map[plumbing.Hash]bool {
		seen := map[plumbing.Hash]bool{h: true}
		for todo := []plumbing.Hash{h}; len(todo) > 0; {
			c := todo[len(todo)-1]
			todo = todo[:len(todo)-1]
			for _, p := range parents[c] {
				if !seen[p] {
					seen[p] = true
					todo = append(todo, p)
				}
			}
		}
		return seen
	}
	want := func(a, b plumbing.Hash) (ahead, behind int) {
		ra, rb := reach(a), reach(b)
		for h := range ra {
			if !rb[h] {
				ahead++
			}
		}
		for h := range rb {
			if !ra[h] {
				behind++
			}
		}
		return ahead, behind
	}
	check := func(a, b plumbing.Hash, what string) {
		t.Helper()
		ahead, behind, err := n.AheadBehind(a, b)
		if err != nil {
			t.Fatal(err)
		}
		if wa, wb := want(a, b); ahead != wa || behind != wb {
			t.Fatalf("%s: AheadBehind = %d, %d; want %d, %d", what, ahead, behind, wa, wb)
		}
	}

	root := commit(100)
	mid := commit(100, root)
	tip := commit(100, mid)
	check(mid, tip, "root ← mid ← tip, one second")
	if ok, err := n.IsAncestor(mid, tip); err != nil || !ok {
		t.Fatalf("IsAncestor(mid, tip) = %v, %v; want true", ok, err)
	}
	check(root, tip, "root of tip")

	// Random histories: each commit has 1–2 parents among the earlier
	// ones, its time its newest parent's or up to 2 s later (ties are
	// most of them); pairs of commits compared with a full walk.
	rng := rand.New(rand.NewSource(1))
	for round := 0; round < 20; round++ {
		at := map[plumbing.Hash]int64{}
		first := commit(1000)
		at[first] = 1000
		all := []plumbing.Hash{first}
		for i := 0; i < 40; i++ {
			ps := []plumbing.Hash{all[rng.Intn(len(all))]}
			if rng.Intn(3) == 0 {
				if q := all[rng.Intn(len(all))]; q != ps[0] {
					ps = append(ps, q)
				}
			}
			t0 := int64(0)
			for _, p := range ps {
				t0 = max(t0, at[p])
			}
			ts := t0 + int64(rng.Intn(4)/3)
			h := commit(ts, ps...)
			at[h] = ts
			all = append(all, h)
		}
		for j := 0; j < 30; j++ {
			check(all[rng.Intn(len(all))], all[rng.Intn(len(all))], "random history")
		}
	}
}
