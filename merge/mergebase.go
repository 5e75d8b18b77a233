package merge

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/lockstep-hq/lockstep"
)

func notFound(err error, what string, h plumbing.Hash) error {
	if errors.Is(err, plumbing.ErrObjectNotFound) {
		return lockstep.Errorf(lockstep.ENOTFOUND, "%s %s not found", what, h)
	}
	return fmt.Errorf("read %s %s: %w", what, h, err)
}

type commitInfo struct {
	tree    plumbing.Hash
	parents []plumbing.Hash
	when    time.Time
}

// walker reads commits once per operation.
type walker struct {
	s       Store
	commits map[plumbing.Hash]*commitInfo
}

func newWalker(s Store) *walker {
	return &walker{s: s, commits: make(map[plumbing.Hash]*commitInfo)}
}

func (w *walker) commit(h plumbing.Hash) (*commitInfo, error) {
	if c, ok := w.commits[h]; ok {
		return c, nil
	}
	c, err := readCommit(w.s, h)
	if err != nil {
		return nil, err
	}
	ci := &commitInfo{tree: c.TreeHash, parents: c.ParentHashes, when: c.Committer.When}
	w.commits[h] = ci
	return ci, nil
}

// ancestors returns every commit reachable from h, h included.
func (w *walker) ancestors(ctx context.Context, h plumbing.Hash) (map[plumbing.Hash]bool, error) {
	seen := map[plumbing.Hash]bool{h: true}
	stack := []plumbing.Hash{h}
	for len(stack) > 0 {
		if len(seen)%256 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		c := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		ci, err := w.commit(c)
		if err != nil {
			return nil, err
		}
		for _, p := range ci.parents {
			if !seen[p] {
				seen[p] = true
				stack = append(stack, p)
			}
		}
	}
	return seen, nil
}

// bestCommon returns the best common ancestors of a and b: common
// ancestors that are not ancestors of another common ancestor, sorted by
// committer time, oldest first, then by oid.
func (w *walker) bestCommon(ctx context.Context, a, b plumbing.Hash) ([]plumbing.Hash, error) {
	inA, err := w.ancestors(ctx, a)
	if err != nil {
		return nil, err
	}
	// Walk from b; stop at the first common commit on each path.
	var cands []plumbing.Hash
	seen := map[plumbing.Hash]bool{b: true}
	stack := []plumbing.Hash{b}
	for len(stack) > 0 {
		c := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if inA[c] {
			cands = append(cands, c)
			continue
		}
		ci, err := w.commit(c)
		if err != nil {
			return nil, err
		}
		for _, p := range ci.parents {
			if !seen[p] {
				seen[p] = true
				stack = append(stack, p)
			}
		}
	}
	if len(cands) > 1 {
		// Drop candidates reachable from another candidate.
		redundant := map[plumbing.Hash]bool{}
		for _, c := range cands {
			if redundant[c] {
				continue
			}
			anc, err := w.ancestors(ctx, c)
			if err != nil {
				return nil, err
			}
			for _, d := range cands {
				if d != c && anc[d] {
					redundant[d] = true
				}
			}
		}
		kept := cands[:0]
		for _, c := range cands {
			if !redundant[c] {
				kept = append(kept, c)
			}
		}
		cands = kept
	}
	sort.Slice(cands, func(i, j int) bool {
		ci, cj := w.commits[cands[i]], w.commits[cands[j]]
		if ci != nil && cj != nil && !ci.when.Equal(cj.when) {
			return ci.when.Before(cj.when)
		}
		return cands[i].String() < cands[j].String()
	})
	return cands, nil
}

// virtualBase reduces several merge bases to one commit the way git's
// recursive strategy does: merge them pairwise (oldest first), each pair
// against its own merge base, keeping conflict markers in the result, and
// record the result as a commit whose parents are the pair. The virtual
// commits are written to w.s.
func (w *walker) virtualBase(ctx context.Context, bases []plumbing.Hash, depth int) (plumbing.Hash, error) {
	switch len(bases) {
	case 0:
		return plumbing.ZeroHash, nil
	case 1:
		return bases[0], nil
	}
	if depth > 32 {
		return bases[0], nil // pathological history; document: first base
	}
	acc := bases[0]
	for _, next := range bases[1:] {
		sub, err := w.bestCommon(ctx, acc, next)
		if err != nil {
			return plumbing.ZeroHash, err
		}
		vb, err := w.virtualBase(ctx, sub, depth+1)
		if err != nil {
			return plumbing.ZeroHash, err
		}
		baseTree := emptyTree
		if !vb.IsZero() {
			c, err := w.commit(vb)
			if err != nil {
				return plumbing.ZeroHash, err
			}
			baseTree = c.tree
		}
		ca, err := w.commit(acc)
		if err != nil {
			return plumbing.ZeroHash, err
		}
		cn, err := w.commit(next)
		if err != nil {
			return plumbing.ZeroHash, err
		}
		res, err := mergeTrees(ctx, w.s, baseTree, ca.tree, cn.tree, Options{
			Deep: true, Markers: true,
			OursLabel: "Temporary merge branch 1", TheirsLabel: "Temporary merge branch 2",
		})
		if err != nil {
			return plumbing.ZeroHash, err
		}
		when := ca.when
		if cn.when.After(when) {
			when = cn.when
		}
		sig := object.Signature{Name: "lockstep", Email: "merge@lockstep.invalid", When: when.UTC()}
		vc := &object.Commit{
			Author: sig, Committer: sig,
			Message:      "virtual merge base\n",
			TreeHash:     res.Tree,
			ParentHashes: []plumbing.Hash{acc, next},
		}
		obj := w.s.NewEncodedObject()
		if err := vc.Encode(obj); err != nil {
			return plumbing.ZeroHash, fmt.Errorf("encode virtual base: %w", err)
		}
		h, err := w.s.SetEncodedObject(obj)
		if err != nil {
			return plumbing.ZeroHash, fmt.Errorf("write virtual base: %w", err)
		}
		w.commits[h] = &commitInfo{tree: res.Tree, parents: vc.ParentHashes, when: when}
		acc = h
	}
	return acc, nil
}

// MergeBases returns the best common ancestors of commits a and b (none
// when they share no history), oldest first. Errors: not_found for a
// missing commit.
func MergeBases(ctx context.Context, s Store, a, b plumbing.Hash) ([]plumbing.Hash, error) {
	return newWalker(s).bestCommon(ctx, a, b)
}

// MergeBase returns the commit to use as base when merging commits a and
// b: the best common ancestor, or, for criss-cross histories with several,
// a virtual commit built like git's recursive strategy does (see
// virtual-base notes in the package comment). The virtual commit and its
// trees are written to s: pass an Overlay to keep them out of a real store.
// It returns the zero hash when a and b share no history (merge against the
// empty tree). Errors: not_found for a missing commit.
func MergeBase(ctx context.Context, s Store, a, b plumbing.Hash) (plumbing.Hash, error) {
	w := newWalker(s)
	bases, err := w.bestCommon(ctx, a, b)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	return w.virtualBase(ctx, bases, 0)
}
