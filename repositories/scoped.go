package repositories

import (
	"context"
	"sync"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/auth"
	"github.com/lockstep-hq/lockstep/gitobj"
)

// A fork network stores the objects of all its repositories together, so
// "is object X stored?" answered to a scoped key would tell it about
// the content of workspaces outside its scope: it hashes a guess of a
// file (".env" with API_KEY=<guess>) and asks (objects/missing), or
// names the blob in a tree it uploads without sending it (accepted =
// stored, and then readable through its own repository). For a scoped
// key an object therefore counts as present for repository r only when
// r's refs reach it, approximated soundly (never a foreign object, but
// not every object of r's history):
//
//   - any object in the closure of the tree of one of r's ref tips (the
//     current trees; cached by tree id, closureCache);
//   - a commit reachable from r's refs (scopedCommit's bounded walk);
//   - a tree or commit this scoped key uploaded to r in an earlier
//     request of this process (grants: the objects upload then
//     PUT ?tree= flow), whose references were checked when it came.
//
// Everything else is answered as missing (the client uploads it; an
// upload of an object already stored is accepted and stored once), and a
// write naming it without sending it is refused as if it were not stored.
// Keys that are not scoped see the whole network, as before.

// presence is what one write or query of a scoped key may name without
// sending it (see above). The zero value is not used: presentFor
// returns nil for keys that are not scoped.
type presence struct {
	s    *Service
	ctx  context.Context
	n    gitobj.Reader
	r    *lockstep.Repo
	tips []gitobj.Hash
	sets []map[gitobj.Hash]struct{}
	memo map[gitobj.Hash]bool // commits walked for, and the answer
}

// presentFor returns the presence rule of a scoped caller for r, or nil
// (every stored object is present) for any other key.
func (s *Service) presentFor(ctx context.Context, n gitobj.Reader, r *lockstep.Repo) (*presence, error) {
	if k := auth.FromContext(ctx); k == nil || k.Scope == nil {
		return nil, nil
	}
	refs, err := s.store.Refs(ctx, r.ID)
	if err != nil {
		return nil, err
	}
	p := &presence{s: s, ctx: ctx, n: n, r: r, memo: map[gitobj.Hash]bool{}}
	seen := map[gitobj.Hash]bool{}
	for _, ref := range refs {
		h := gitobj.NewHash(ref.OID)
		p.tips = append(p.tips, h)
		root := h
		if ci, err := n.Commit(h); err == nil {
			root = ci.Tree
		} else if t, err := gitobj.TagTarget(n.Objects(), h); err == nil {
			if ci, err := n.Commit(t); err == nil {
				root = ci.Tree
			} else {
				root = t
			}
		}
		if seen[root] {
			continue
		}
		seen[root] = true
		set, err := s.closures.closure(n, root)
		if err != nil {
			return nil, err
		}
		p.sets = append(p.sets, set)
	}
	return p, nil
}

// has reports whether h is present for the scoped key (nil p: any
// stored object is).
func (p *presence) has(h gitobj.Hash) bool {
	if p == nil {
		return true
	}
	for _, t := range p.tips {
		if t == h {
			return true
		}
	}
	for _, set := range p.sets {
		if _, ok := set[h]; ok {
			return true
		}
	}
	if p.s.grants.has(p.r.ID, h) {
		return true
	}
	if ok, done := p.memo[h]; done {
		return ok
	}
	ok := false
	if _, err := p.n.Commit(h); err == nil {
		ok = p.s.scopedCommit(p.ctx, p.n, p.r, h) == nil
	}
	p.memo[h] = ok
	return ok
}

// present is p.has as a gitobj.ReceiveOptions.Present (nil for nil p).
func (p *presence) present() func(gitobj.Hash) bool {
	if p == nil {
		return nil
	}
	return p.has
}

// grant records the trees and commits a scoped key uploaded to r (nil
// p: no scoped key, nothing to record), so that the push naming the
// uploaded tree in its next request may name it.
func (p *presence) grant(h gitobj.Hash, t gitobj.ObjectType) {
	if p == nil || (t != gitobj.TreeObject && t != gitobj.CommitObject) {
		return
	}
	p.s.grants.add(p.r.ID, h)
}

// closureCache holds the closures (every tree and blob under it, and
// itself) of ref tips' trees, by tree id: immutable, so never stale.
// Bounded by the ids it holds (closureCacheMax, ~50 bytes each); when
// full, the least recently used closure goes first.
type closureCache struct {
	mu    sync.Mutex
	tick  uint64
	size  int
	byID  map[gitobj.Hash]*closureEntry
	limit int // 0: closureCacheMax
}

type closureEntry struct {
	set  map[gitobj.Hash]struct{}
	used uint64
}

// closureCacheMax bounds the object ids the closure cache holds (about
// 25 MB): twenty-five trees of 20,000 files.
const closureCacheMax = 500_000

func (c *closureCache) closure(n gitobj.Reader, root gitobj.Hash) (map[gitobj.Hash]struct{}, error) {
	c.mu.Lock()
	c.tick++
	if e, ok := c.byID[root]; ok {
		e.used = c.tick
		c.mu.Unlock()
		return e.set, nil
	}
	c.mu.Unlock()
	set, err := treeClosure(n, root)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	limit := c.limit
	if limit <= 0 {
		limit = closureCacheMax
	}
	if len(set) > limit {
		return set, nil // used once, not kept
	}
	if c.byID == nil {
		c.byID = map[gitobj.Hash]*closureEntry{}
	}
	if _, ok := c.byID[root]; !ok {
		for c.size+len(set) > limit {
			var oldest gitobj.Hash
			at := ^uint64(0)
			for h, e := range c.byID {
				if e.used < at {
					oldest, at = h, e.used
				}
			}
			c.size -= len(c.byID[oldest].set)
			delete(c.byID, oldest)
		}
		c.byID[root] = &closureEntry{set: set, used: c.tick}
		c.size += len(set)
	}
	return set, nil
}

// treeClosure returns root and every tree and blob under it. A root that
// is not a tree (a ref naming a blob) is its own closure; a tree missing
// below it is left out (what is not stored is not present).
func treeClosure(n gitobj.Reader, root gitobj.Hash) (map[gitobj.Hash]struct{}, error) {
	set := map[gitobj.Hash]struct{}{root: {}}
	objs := n.Objects()
	stack := []gitobj.Hash{root}
	for len(stack) > 0 {
		t := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		obj, err := objs.EncodedObject(gitobj.TreeObject, t)
		if err != nil {
			continue
		}
		files, dirs, err := gitobj.TreeChildren(obj)
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			set[f] = struct{}{}
		}
		for _, d := range dirs {
			if _, ok := set[d]; !ok {
				set[d] = struct{}{}
				stack = append(stack, d)
			}
		}
	}
	return set, nil
}

// grantLog remembers, per repository, the trees and commits its scoped
// keys uploaded (presence.grant), for the push that names them in a
// later request. Bounded (grantsMax ids per repository, grantRepos
// repositories; a full one starts over: the client uploads again).
// In this process only: behind a load balancer that spreads one push's
// requests over replicas, the push is refused as missing and retried.
type grantLog struct {
	mu     sync.Mutex
	byRepo map[int64]map[gitobj.Hash]struct{}
}

const (
	grantsMax  = 100_000
	grantRepos = 1_000
)

func (g *grantLog) add(repo int64, h gitobj.Hash) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.byRepo == nil || len(g.byRepo) >= grantRepos && g.byRepo[repo] == nil {
		g.byRepo = map[int64]map[gitobj.Hash]struct{}{}
	}
	m := g.byRepo[repo]
	if m == nil || len(m) >= grantsMax {
		m = map[gitobj.Hash]struct{}{}
		g.byRepo[repo] = m
	}
	m[h] = struct{}{}
}

func (g *grantLog) has(repo int64, h gitobj.Hash) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	_, ok := g.byRepo[repo][h]
	return ok
}
