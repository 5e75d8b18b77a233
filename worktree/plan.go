package worktree

import (
	"context"
	"fmt"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"

	"github.com/lockstep-hq/lockstep"
)

// MissingFunc asks the server which of oids it does not have and returns
// those (in any order). It is one round trip; the CLI implements it over
// HTTP. Its errors are returned by Plan unchanged.
type MissingFunc func(ctx context.Context, oids []plumbing.Hash) ([]plumbing.Hash, error)

// PlanOptions configures Plan. The zero value (or nil) is usable.
type PlanOptions struct {
	// BatchSize caps the oids per MissingFunc call; a level with more
	// objects takes several calls. 0 means 4096 (160 KiB as hex).
	BatchSize int
	// OnRoundTrip, if set, is called after each MissingFunc call with the
	// number of oids asked and found missing (for tracing and tests).
	OnRoundTrip func(asked, missing int)
	// Known, if set, is the tree the server is believed to hold from the
	// last push (StatCache.Known): Plan then asks once, about that root and
	// every object of the new snapshot not under one of its trees, instead
	// of level by level. If the server no longer has the known root, Plan
	// falls back to the level-by-level negotiation.
	Known *Known
}

// Known is a root tree and every tree under it: what a client remembers of
// its last accepted push so that the next Plan can take one round trip.
// It is only a hint; Plan checks the root with the server in the same
// round trip, and relies on the server holding the closure of every tree
// it has.
type Known struct {
	Root  plumbing.Hash // the root tree of the last accepted push
	trees map[plumbing.Hash]struct{}
}

// Len returns the number of trees in k.
func (k *Known) Len() int { return len(k.trees) }

func (k *Known) has(h plumbing.Hash) bool {
	_, ok := k.trees[h]
	return ok
}

// Known returns the snapshot's trees as a hint for the next push: record it
// with StatCache.SetKnown once the server has committed snap.Tree.
func (snap *Snapshot) Known() *Known {
	if snap.allTrees != nil { // a watched Scan's
		k := &Known{Root: snap.Tree, trees: make(map[plumbing.Hash]struct{}, len(snap.allTrees))}
		for _, h := range snap.allTrees {
			k.trees[h] = struct{}{}
		}
		return k
	}
	k := &Known{Root: snap.Tree, trees: make(map[plumbing.Hash]struct{}, len(snap.trees))}
	for h := range snap.trees {
		k.trees[h] = struct{}{}
	}
	return k
}

// Plan finds which objects of snap the server lacks, top-down: it asks
// about the root tree, then, one level at a time and in one batch per level,
// about the children of the trees found missing, never descending into a
// tree the server has (the server must only have trees whose whole closure
// it has, the invariant git keeps). The result lists every missing object
// once, parents before children, ready for WritePack; it is empty when the
// server already has the root tree.
//
// With opts.Known, Plan first tries one round trip (see PlanOptions.Known).
//
// It returns internal if missing answers with an oid it was not asked
// about (a server bug that would otherwise make the push incomplete), and
// the context's error if ctx ends between round trips.
func Plan(ctx context.Context, snap *Snapshot, missing MissingFunc, opts *PlanOptions) ([]plumbing.Hash, error) {
	var o PlanOptions
	if opts != nil {
		o = *opts
	}
	if o.BatchSize <= 0 {
		o.BatchSize = 4096
	}
	if k := o.Known; k != nil && !k.Root.IsZero() {
		out, ok, err := planKnown(ctx, snap, missing, &o)
		if err != nil || ok {
			return out, err
		}
	}
	if err := snap.full(); err != nil { // a watched Scan's partial snapshot
		return nil, err
	}
	asked := map[plumbing.Hash]bool{snap.Tree: true}
	level := []plumbing.Hash{snap.Tree}
	var out []plumbing.Hash
	for len(level) > 0 {
		var next []plumbing.Hash
		for start := 0; start < len(level); start += o.BatchSize {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			batch := level[start:min(start+o.BatchSize, len(level))]
			got, err := ask(ctx, missing, batch, &o)
			if err != nil {
				return nil, err
			}
			for _, h := range got {
				out = append(out, h)
				t, ok := snap.trees[h]
				if !ok {
					continue
				}
				for _, e := range t.entries {
					if e.Mode == filemode.Submodule || asked[e.Hash] {
						continue
					}
					asked[e.Hash] = true
					next = append(next, e.Hash)
				}
			}
		}
		level = next
	}
	return out, nil
}

// ask makes one round trip and returns the oids of batch reported missing,
// each once.
func ask(ctx context.Context, missing MissingFunc, batch []plumbing.Hash, o *PlanOptions) ([]plumbing.Hash, error) {
	got, err := missing(ctx, batch)
	if err != nil {
		return nil, err
	}
	if o.OnRoundTrip != nil {
		o.OnRoundTrip(len(batch), len(got))
	}
	inBatch := make(map[plumbing.Hash]bool, len(batch))
	for _, h := range batch {
		inBatch[h] = true
	}
	out := got[:0:0]
	for _, h := range got {
		if _, asked := inBatch[h]; !asked {
			return nil, lockstep.Errorf(lockstep.EINTERNAL, "server reported %s missing, which was not asked about", h)
		}
		if inBatch[h] { // a duplicate answer counts once
			inBatch[h] = false
			out = append(out, h)
		}
	}
	return out, nil
}

// planKnown asks, in one batch, about the known root and every object of
// snap not under a known tree. ok is false if the server lacks the known
// root, and the hint is useless.
func planKnown(ctx context.Context, snap *Snapshot, missing MissingFunc, o *PlanOptions) (out []plumbing.Hash, ok bool, err error) {
	k := o.Known
	cand := []plumbing.Hash{k.Root}
	seen := map[plumbing.Hash]bool{k.Root: true}
	var visit func(h plumbing.Hash)
	visit = func(h plumbing.Hash) {
		if seen[h] || k.has(h) {
			return
		}
		seen[h] = true
		cand = append(cand, h)
		t, isTree := snap.trees[h]
		if !isTree {
			return
		}
		for _, e := range t.entries {
			if e.Mode != filemode.Submodule {
				visit(e.Hash)
			}
		}
	}
	visit(snap.Tree)
	miss := map[plumbing.Hash]bool{}
	for start := 0; start < len(cand); start += o.BatchSize {
		if err := ctx.Err(); err != nil {
			return nil, false, err
		}
		got, err := ask(ctx, missing, cand[start:min(start+o.BatchSize, len(cand))], o)
		if err != nil {
			return nil, false, err
		}
		for _, h := range got {
			miss[h] = true
		}
		if start == 0 && miss[k.Root] {
			return nil, false, nil
		}
	}
	for _, h := range cand[1:] {
		if miss[h] {
			out = append(out, h)
		}
	}
	return out, true, nil
}

// Objects returns the number of distinct trees and blobs in the snapshot.
// A watched Scan's snapshot is completed first.
func (snap *Snapshot) Objects() (trees, blobs int) {
	snap.full()
	return len(snap.trees), len(snap.blobs)
}

// Has reports whether oid is one of the snapshot's objects.
func (snap *Snapshot) Has(oid plumbing.Hash) bool {
	_, t := snap.trees[oid]
	_, b := snap.blobs[oid]
	return t || b
}

// All returns every object of the snapshot, trees first: what a push to an
// empty server sends.
func (snap *Snapshot) All() []plumbing.Hash {
	snap.full()
	out := make([]plumbing.Hash, 0, len(snap.trees)+len(snap.blobs))
	for h := range snap.trees {
		out = append(out, h)
	}
	for h := range snap.blobs {
		out = append(out, h)
	}
	return out
}

// String describes the snapshot for logs.
func (snap *Snapshot) String() string {
	return fmt.Sprintf("snapshot %s of %s (%d files)", snap.Tree, snap.dir, snap.Files)
}
