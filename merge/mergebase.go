package merge

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/gitobj"
)

func notFound(err error, what string, h gitobj.Hash) error {
	if errors.Is(err, gitobj.ErrObjectNotFound) {
		return lockstep.Errorf(lockstep.ENOTFOUND, "%s %s not found", what, h)
	}
	return fmt.Errorf("read %s %s: %w", what, h, err)
}

type commitInfo struct {
	tree    gitobj.Hash
	parents []gitobj.Hash
	when    time.Time
}

// walker reads commits once per operation.
type walker struct {
	s       Store
	commits map[gitobj.Hash]*commitInfo
	shared  *CommitCache // nil: none
}

// CommitCache keeps the commits a merge-base walk read from the store
// (tree, parents, committer time: immutable, by hash) for the next merges
// that use it, such as the preflights of one batch into one branch, or
// every preflight of one fork network, whose walks cover much the same
// history. Virtual merge bases are never kept. Safe for concurrent use;
// pass it to merges of one store (one fork network) only.
type CommitCache struct {
	mu  sync.RWMutex
	m   map[gitobj.Hash]*commitInfo
	max int // 0: unbounded
}

// NewCommitCache returns an empty, unbounded cache (for one batch).
func NewCommitCache() *CommitCache { return &CommitCache{m: map[gitobj.Hash]*commitInfo{}} }

// NewBoundedCommitCache returns an empty cache that holds at most max
// commits (about 150 bytes each): when full, it starts over empty.
func NewBoundedCommitCache(max int) *CommitCache {
	return &CommitCache{m: map[gitobj.Hash]*commitInfo{}, max: max}
}

// Len is the number of commits held.
func (c *CommitCache) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.m)
}

func (c *CommitCache) get(h gitobj.Hash) (*commitInfo, bool) {
	c.mu.RLock()
	ci, ok := c.m[h]
	c.mu.RUnlock()
	return ci, ok
}

func (c *CommitCache) put(h gitobj.Hash, ci *commitInfo) {
	c.mu.Lock()
	if c.max > 0 && len(c.m) >= c.max {
		c.m = make(map[gitobj.Hash]*commitInfo, c.max/4)
	}
	c.m[h] = ci
	c.mu.Unlock()
}

func newWalker(s Store) *walker {
	return &walker{s: s, commits: make(map[gitobj.Hash]*commitInfo)}
}

func (w *walker) commit(h gitobj.Hash) (*commitInfo, error) {
	if c, ok := w.commits[h]; ok {
		return c, nil
	}
	if w.shared != nil {
		if c, ok := w.shared.get(h); ok {
			w.commits[h] = c
			return c, nil
		}
	}
	obj, err := w.s.EncodedObject(gitobj.CommitObject, h)
	if err != nil {
		return nil, notFound(err, "commit", h)
	}
	ci, ok := commitHeader(obj)
	if !ok {
		// Not the plain layout commitHeader reads: go-git's full decoder.
		c, err := decodeCommit(obj)
		if err != nil {
			return nil, err
		}
		ci = &commitInfo{tree: c.Tree, parents: c.Parents, when: c.Committer.When}
	}
	w.commits[h] = ci
	if w.shared != nil {
		w.shared.put(h, ci)
	}
	return ci, nil
}

// commitHeader reads only what the merge-base walk needs (tree, parents,
// committer time) from a commit's header lines, without decoding the
// message, signatures or author as gitobj.DecodeCommit does (most of a
// deep preflight's time on long histories). ok is false for anything but
// the plain layout: "tree", "parent"*, then "committer <…> <unix> <tz>"
// somewhere before the blank line.
func commitHeader(obj gitobj.EncodedObject) (*commitInfo, bool) {
	r, err := obj.Reader()
	if err != nil {
		return nil, false
	}
	defer r.Close()
	buf := make([]byte, 0, 512)
	var chunk [512]byte
	for {
		// Read until the end of the header (a blank line) or the object.
		if i := bytes.Index(buf, []byte("\n\n")); i >= 0 {
			buf = buf[:i+1]
			break
		}
		n, err := r.Read(chunk[:])
		buf = append(buf, chunk[:n]...)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, false
		}
	}
	ci := &commitInfo{}
	sawTree, sawCommitter := false, false
	for len(buf) > 0 {
		i := bytes.IndexByte(buf, '\n')
		if i < 0 {
			i = len(buf)
		}
		line := buf[:i]
		buf = buf[min(i+1, len(buf)):]
		switch {
		case bytes.HasPrefix(line, []byte("tree ")):
			h, ok := parseHex(line[5:])
			if !ok || sawTree {
				return nil, false
			}
			ci.tree, sawTree = h, true
		case bytes.HasPrefix(line, []byte("parent ")):
			h, ok := parseHex(line[7:])
			if !ok {
				return nil, false
			}
			ci.parents = append(ci.parents, h)
		case bytes.HasPrefix(line, []byte("committer ")):
			// "committer Name <email> 1700000000 +0100": the time is the
			// second field from the end.
			f := bytes.Fields(line[bytes.LastIndexByte(line, '>')+1:])
			if len(f) != 2 || sawCommitter {
				return nil, false
			}
			sec, err := strconv.ParseInt(string(f[0]), 10, 64)
			if err != nil {
				return nil, false
			}
			ci.when, sawCommitter = time.Unix(sec, 0), true
		}
	}
	return ci, sawTree && sawCommitter
}

func parseHex(b []byte) (gitobj.Hash, bool) {
	var h gitobj.Hash
	if len(b) != 2*len(h) {
		return h, false
	}
	if _, err := hex.Decode(h[:], b); err != nil {
		return h, false
	}
	return h, true
}

// ancestors returns every commit reachable from h, h included.
func (w *walker) ancestors(ctx context.Context, h gitobj.Hash) (map[gitobj.Hash]bool, error) {
	seen := map[gitobj.Hash]bool{h: true}
	stack := []gitobj.Hash{h}
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

// Flags of the paint-down walk.
const (
	parent1 = 1 << iota
	parent2
	stale
	result
)

// bestCommon returns the best common ancestors of a and b: common
// ancestors that are not ancestors of another common ancestor, sorted by
// committer time, oldest first, then by oid.
//
// It is git's paint_down_to_common: walk both histories newest first
// (committer time), painting each commit with the sides it is reachable
// from; a commit painted by both is a candidate and its ancestors are
// stale; stop when only stale commits are queued. Like git without a
// commit-graph, it trusts commit times (badly skewed clocks can make it
// stop early); candidates reachable from another candidate are then
// dropped.
func (w *walker) bestCommon(ctx context.Context, a, b gitobj.Hash) ([]gitobj.Hash, error) {
	if a == b {
		return []gitobj.Hash{a}, nil
	}
	flags := map[gitobj.Hash]int{}
	q := &commitQueue{w: w}
	for _, x := range []struct {
		h gitobj.Hash
		f int
	}{{a, parent1}, {b, parent2}} {
		if _, err := w.commit(x.h); err != nil {
			return nil, err
		}
		flags[x.h] |= x.f
		q.push(x.h)
	}
	var cands []gitobj.Hash
	for steps := 0; q.nonStale(flags); steps++ {
		if steps%256 == 255 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		c := q.pop()
		f := flags[c] & (parent1 | parent2 | stale)
		if f == parent1|parent2 {
			if flags[c]&result == 0 {
				flags[c] |= result
				cands = append(cands, c)
			}
			f |= stale
		}
		ci, err := w.commit(c)
		if err != nil {
			return nil, err
		}
		for _, p := range ci.parents {
			if flags[p]&f == f {
				continue
			}
			if _, err := w.commit(p); err != nil {
				return nil, err
			}
			flags[p] |= f
			q.push(p)
		}
	}
	// Like git: a candidate later painted stale is below another one.
	kept := cands[:0]
	for _, c := range cands {
		if flags[c]&stale == 0 {
			kept = append(kept, c)
		}
	}
	cands = kept
	// Drop candidates reachable from another candidate (criss-cross
	// histories only; this walk is not bounded).
	if len(cands) > 1 {
		redundant := map[gitobj.Hash]bool{}
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
		if !ci.when.Equal(cj.when) {
			return ci.when.Before(cj.when)
		}
		return bytes.Compare(cands[i][:], cands[j][:]) < 0 // the order of their hex names
	})
	return cands, nil
}

// commitQueue is a max-heap of commits by committer time (ties: oid), as
// git's commit queue.
type commitQueue struct {
	w  *walker
	hs []gitobj.Hash
}

func (q *commitQueue) less(i, j int) bool {
	ci, cj := q.w.commits[q.hs[i]], q.w.commits[q.hs[j]]
	if !ci.when.Equal(cj.when) {
		return ci.when.After(cj.when)
	}
	return bytes.Compare(q.hs[i][:], q.hs[j][:]) < 0 // the order of their hex names, without formatting them
}

func (q *commitQueue) push(h gitobj.Hash) {
	q.hs = append(q.hs, h)
	for i := len(q.hs) - 1; i > 0; {
		p := (i - 1) / 2
		if !q.less(i, p) {
			break
		}
		q.hs[i], q.hs[p] = q.hs[p], q.hs[i]
		i = p
	}
}

func (q *commitQueue) pop() gitobj.Hash {
	top := q.hs[0]
	n := len(q.hs) - 1
	q.hs[0] = q.hs[n]
	q.hs = q.hs[:n]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && q.less(l, m) {
			m = l
		}
		if r < n && q.less(r, m) {
			m = r
		}
		if m == i {
			break
		}
		q.hs[i], q.hs[m] = q.hs[m], q.hs[i]
		i = m
	}
	return top
}

func (q *commitQueue) nonStale(flags map[gitobj.Hash]int) bool {
	for _, h := range q.hs {
		if flags[h]&stale == 0 {
			return true
		}
	}
	return false
}

// virtualBase reduces several merge bases to one commit the way git's
// recursive strategy does: merge them pairwise (oldest first), each pair
// against its own merge base, keeping conflict markers in the result, and
// record the result as a commit whose parents are the pair. The virtual
// commits are written to w.s.
func (w *walker) virtualBase(ctx context.Context, bases []gitobj.Hash, depth int) (gitobj.Hash, error) {
	switch len(bases) {
	case 0:
		return gitobj.ZeroHash, nil
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
			return gitobj.ZeroHash, err
		}
		vb, err := w.virtualBase(ctx, sub, depth+1)
		if err != nil {
			return gitobj.ZeroHash, err
		}
		baseTree := emptyTree
		if !vb.IsZero() {
			c, err := w.commit(vb)
			if err != nil {
				return gitobj.ZeroHash, err
			}
			baseTree = c.tree
		}
		ca, err := w.commit(acc)
		if err != nil {
			return gitobj.ZeroHash, err
		}
		cn, err := w.commit(next)
		if err != nil {
			return gitobj.ZeroHash, err
		}
		res, err := mergeTrees(ctx, w.s, baseTree, ca.tree, cn.tree, Options{
			Deep: true, Markers: true, virtual: true,
			OursLabel: "Temporary merge branch 1", TheirsLabel: "Temporary merge branch 2",
		})
		if err != nil {
			return gitobj.ZeroHash, err
		}
		when := ca.when
		if cn.when.After(when) {
			when = cn.when
		}
		sig := gitobj.Signature{Name: "lockstep", Email: "merge@lockstep.invalid", When: when.UTC()}
		parents := []gitobj.Hash{acc, next}
		obj := gitobj.EncodeCommit(gitobj.CommitSpec{
			Author: sig, Committer: sig,
			Message: "virtual merge base\n",
			Tree:    res.Tree,
			Parents: parents,
		})
		h, err := w.s.SetEncodedObject(obj)
		if err != nil {
			return gitobj.ZeroHash, fmt.Errorf("write virtual base: %w", err)
		}
		w.commits[h] = &commitInfo{tree: res.Tree, parents: parents, when: when}
		acc = h
	}
	return acc, nil
}

// MergeBases returns the best common ancestors of commits a and b (none
// when they share no history), oldest first. Errors: not_found for a
// missing commit.
func MergeBases(ctx context.Context, s Store, a, b gitobj.Hash) ([]gitobj.Hash, error) {
	return newWalker(s).bestCommon(ctx, a, b)
}

// MergeBase returns the commit to use as base when merging commits a and
// b: the best common ancestor, or, for criss-cross histories with several,
// a virtual commit built like git's recursive strategy does (see
// virtual-base notes in the package comment). The virtual commit and its
// trees are written to s: pass an Overlay to keep them out of a real store.
// It returns the zero hash when a and b share no history (merge against the
// empty tree). Errors: not_found for a missing commit.
func MergeBase(ctx context.Context, s Store, a, b gitobj.Hash) (gitobj.Hash, error) {
	w := newWalker(s)
	bases, err := w.bestCommon(ctx, a, b)
	if err != nil {
		return gitobj.ZeroHash, err
	}
	return w.virtualBase(ctx, bases, 0)
}
