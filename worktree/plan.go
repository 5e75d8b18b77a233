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
	// objects takes several calls. 0 means 4096 (80 KiB of hex).
	BatchSize int
	// OnRoundTrip, if set, is called after each MissingFunc call with the
	// number of oids asked and found missing (for tracing and tests).
	OnRoundTrip func(asked, missing int)
}

// Plan finds which objects of snap the server lacks, top-down: it asks
// about the root tree, then, one level at a time and in one batch per level,
// about the children of the trees found missing, never descending into a
// tree the server has (the server must only have trees whose whole closure
// it has, the invariant git keeps). The result lists every missing object
// once, parents before children, ready for WritePack; it is empty when the
// server already has the root tree.
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
			for _, h := range got {
				if !inBatch[h] {
					return nil, lockstep.Errorf(lockstep.EINTERNAL, "server reported %s missing, which was not asked about", h)
				}
				delete(inBatch, h) // a duplicate answer counts once
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

// Objects returns the number of distinct trees and blobs in the snapshot.
func (snap *Snapshot) Objects() (trees, blobs int) { return len(snap.trees), len(snap.blobs) }

// Has reports whether oid is one of the snapshot's objects.
func (snap *Snapshot) Has(oid plumbing.Hash) bool {
	_, t := snap.trees[oid]
	_, b := snap.blobs[oid]
	return t || b
}

// All returns every object of the snapshot, trees first: what a push to an
// empty server sends.
func (snap *Snapshot) All() []plumbing.Hash {
	out := make([]plumbing.Hash, 0, len(snap.trees)+len(snap.blobs))
	for h := range snap.trees {
		out = append(out, h)
	}
	for h := range snap.blobs {
		out = append(out, h)
	}
	return out
}

func (snap *Snapshot) String() string {
	return fmt.Sprintf("snapshot %s of %s (%d files)", snap.Tree, snap.dir, snap.Files)
}
