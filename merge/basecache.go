package merge

import (
	"context"
	"sync"

	"github.com/lockstep-hq/lockstep/gitobj"
)

// BaseCache keeps the best common ancestors of (ours, theirs) commit
// pairs: the merge-base walk's answer depends only on the two commits and
// their history, which their hashes fix, so a repeated preflight of the
// same pair (an agent polling its workspace against an unmoved base, a
// retried request) skips the walk. Only real commits are kept (never the
// walks between virtual merge bases). A moved branch names another commit,
// hence another key: the cache never answers for a ref, only for commits.
// Bounded: when it holds max pairs it starts over empty. Safe for
// concurrent use; pass it to merges of one store (one fork network) only.
type BaseCache struct {
	mu  sync.RWMutex
	m   map[[2]gitobj.Hash][]gitobj.Hash
	max int
}

// NewBaseCache returns an empty cache of at most n pairs (n < 1: 1).
func NewBaseCache(n int) *BaseCache {
	return &BaseCache{m: map[[2]gitobj.Hash][]gitobj.Hash{}, max: max(n, 1)}
}

// Len is the number of pairs held.
func (c *BaseCache) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.m)
}

func (c *BaseCache) get(ours, theirs gitobj.Hash) ([]gitobj.Hash, bool) {
	c.mu.RLock()
	b, ok := c.m[[2]gitobj.Hash{ours, theirs}]
	c.mu.RUnlock()
	return b, ok
}

func (c *BaseCache) put(ours, theirs gitobj.Hash, bases []gitobj.Hash) {
	kept := append([]gitobj.Hash(nil), bases...) // the caller's slice is its own
	c.mu.Lock()
	if len(c.m) >= c.max {
		c.m = make(map[[2]gitobj.Hash][]gitobj.Hash, min(c.max, 1024))
	}
	c.m[[2]gitobj.Hash{ours, theirs}] = kept
	c.mu.Unlock()
}

// mergeBases is bestCommon(ours, theirs) through c (nil: no cache). The
// slice returned is the caller's.
func (w *walker) mergeBases(ctx context.Context, c *BaseCache, ours, theirs gitobj.Hash) ([]gitobj.Hash, error) {
	if c != nil {
		if b, ok := c.get(ours, theirs); ok {
			return append([]gitobj.Hash(nil), b...), nil
		}
	}
	bases, err := w.bestCommon(ctx, ours, theirs)
	if err != nil {
		return nil, err
	}
	if c != nil {
		c.put(ours, theirs, bases)
	}
	return bases, nil
}
