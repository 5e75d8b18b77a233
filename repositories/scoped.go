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
//   - any object in the closure of the tree of a tip one of r's refs has
//     had: the current ones, and every earlier one the operations log's
//     entries of r name (reachSets: a cache, caught up from the log on a
//     miss, so every replica answers alike);
//   - a commit reachable from r's refs (scopedCommit's bounded walk);
//   - a tree or commit this scoped key uploaded to r in an earlier
//     request (grants: the objects upload then PUT ?tree= flow), whose
//     references were checked when it came: in this process (grantLog),
//     or on any replica, the outermost objects of one of r's newest
//     uploads as their operations-log entries name them (loggedGrant).
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
	tips map[gitobj.Hash]bool // what r's refs name
	set  *reachSet
	memo map[gitobj.Hash]bool // commits walked for, and the answer
	// walk: scopedCommit's walk of r's history, shared by every commit
	// asked about (nil until the first).
	walk *reachWalk
	// logged: the grants of r's newest uploads as the operations log
	// keeps them (loggedGrant; nil until a miss reads them).
	logged map[string]bool
	// caughtUp: the set has read the log's ref moves of r (on the first
	// miss).
	caughtUp bool
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
	p := &presence{s: s, ctx: ctx, n: n, r: r, tips: make(map[gitobj.Hash]bool, len(refs)), memo: map[gitobj.Hash]bool{}, set: s.reach.set(r.ID)}
	roots := make([]gitobj.Hash, 0, len(refs))
	for _, ref := range refs {
		h := gitobj.NewHash(ref.OID)
		p.tips[h] = true
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
		roots = append(roots, root)
	}
	if err := p.set.addTrees(n, roots); err != nil {
		return nil, err
	}
	return p, nil
}

// ScopedPresence returns, for a scoped caller (the key in ctx), the
// rule deciding which objects of repoName's network it may name (see
// above): present(oid) for a full lowercase hex id. It is nil for every
// other key (the whole network is present to it). The rule is not safe
// for concurrent use. Errors: not_found (repository).
func (s *Service) ScopedPresence(ctx context.Context, repoName string) (present func(oid string) bool, err error) {
	if k := auth.FromContext(ctx); k == nil || k.Scope == nil {
		return nil, nil
	}
	r, err := s.Repo(ctx, repoName)
	if err != nil {
		return nil, err
	}
	n, err := s.network(ctx, r.Network)
	if err != nil {
		return nil, err
	}
	p, err := s.presentFor(ctx, n, r)
	if err != nil || p == nil {
		return nil, err
	}
	return func(oid string) bool { return p.has(gitobj.NewHash(oid)) }, nil
}

// has reports whether h is present for the scoped key (nil p: any
// stored object is).
func (p *presence) has(h gitobj.Hash) bool {
	if p == nil {
		return true
	}
	if p.tips[h] || p.set.has(h) {
		return true
	}
	if p.s.grants.has(p.r.ID, h) {
		return true
	}
	if !p.caughtUp {
		// The set holds the tips this process saw; the rule is every tip
		// the repository's log names (the same on every replica).
		p.caughtUp = true
		if p.set.catchUp(p.ctx, p.s.store, p.n, p.r.Name) == nil && p.set.has(h) {
			return true
		}
	}
	if ok, done := p.memo[h]; done {
		return ok
	}
	ok := false
	if _, err := p.n.Commit(h); err == nil {
		ok = p.reaches(h)
	}
	if !ok {
		ok = p.loggedGrant(h)
	}
	p.memo[h] = ok
	return ok
}

// reaches is scopedCommit for p's repository, its walk shared by every
// commit p is asked about.
func (p *presence) reaches(h gitobj.Hash) bool {
	if c, ok := p.ctx.Value(restoreCommitKey{}).(gitobj.Hash); ok && c == h {
		return true
	}
	if p.walk == nil {
		tips := make([]gitobj.Hash, 0, len(p.tips))
		for t := range p.tips {
			tips = append(tips, t)
		}
		p.walk = newReachWalk(p.n, tips, p.s.scopedSkew())
	}
	ok, err := p.walk.reaches(p.ctx, h)
	return ok && err == nil
}

// grantedDetail is the detail of an objects.upload entry of a scoped key
// naming the pack's outermost objects (WriteStats.Tops): the grants of
// the upload as every replica can read them. The push that names the
// uploaded tree may reach another replica than the upload did (a load
// balancer spreading one push's requests), whose grantLog never saw it.
const grantedDetail = "granted"

// grantsLogged is how many of a repository's newest objects.upload
// entries a presence miss reads for grants; maxLoggedGrants bounds one
// entry's list (a pack of more outermost objects grants the first ones
// on other replicas; this one's grantLog has them all).
const (
	grantsLogged    = 64
	maxLoggedGrants = 64
)

// logGrant is the granted detail of a scoped key's upload of tops (nil:
// not a scoped key, or nothing to grant).
func (p *presence) logGrant(tops []gitobj.Hash) []string {
	if p == nil || len(tops) == 0 {
		return nil
	}
	out := make([]string, 0, min(len(tops), maxLoggedGrants))
	for _, h := range tops[:min(len(tops), maxLoggedGrants)] {
		out = append(out, h.String())
	}
	return out
}

// loggedGrant reports whether one of r's newest objects.upload entries
// grants h (read once per presence).
func (p *presence) loggedGrant(h gitobj.Hash) bool {
	if p.logged == nil {
		p.logged = map[string]bool{}
		ops, err := p.s.store.ListOps(p.ctx, lockstep.OpFilter{Repo: p.r.Name, Op: "objects.upload", Limit: grantsLogged, Newest: true})
		if err != nil {
			return false // refused as missing: the client uploads again
		}
		for _, e := range ops {
			list, _ := e.Details[grantedDetail].([]any)
			for _, v := range list {
				if s, ok := v.(string); ok {
					p.logged[s] = true
				}
			}
		}
	}
	return p.logged[h.String()]
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

// reachSets holds, per repository, the objects in the trees its ref
// tips have named (presentFor adds each new tip's tree): grow-only, so a
// push walks only the trees it changed (a subtree already in the set has
// its whole closure there), not the 20,000 files of the worktree again.
// A tree that was once a tip's stays present after the branch moved on:
// it is the repository's own content (its history), never another
// workspace's. Bounded: reachSetMax ids per repository (a fuller one
// starts over from its current tips), reachSetRepos repositories (the
// least recently used goes).
type reachSets struct {
	mu     sync.Mutex
	tick   uint64
	byRepo map[int64]*reachSet
}

type reachSet struct {
	mu   sync.RWMutex
	ids  map[gitobj.Hash]struct{}
	used uint64 // under reachSets.mu
	// logSeq: the operations-log entries of the repository up to it are
	// in ids (catchUp).
	logSeq int64
	catch  sync.Mutex // one catchUp at a time
}

// reachLogPage is how many log entries catchUp reads per query.
const reachLogPage = 500

// catchUp adds the trees of the tips the operations log's entries of the
// repository named repo moved its refs to since the last catchUp.
func (e *reachSet) catchUp(ctx context.Context, store lockstep.Store, n gitobj.Reader, repo string) error {
	e.catch.Lock()
	defer e.catch.Unlock()
	for {
		e.mu.RLock()
		after := e.logSeq
		e.mu.RUnlock()
		ops, err := store.ListOps(ctx, lockstep.OpFilter{Repo: repo, After: after, Limit: reachLogPage})
		if err != nil {
			return err
		}
		var roots []gitobj.Hash
		for _, op := range ops {
			for _, m := range op.Refs {
				if m.Repo != repo || m.New == "" || m.New == lockstep.ZeroOID {
					continue
				}
				if ci, err := n.Commit(gitobj.NewHash(m.New)); err == nil {
					roots = append(roots, ci.Tree)
				}
			}
		}
		if err := e.addTrees(n, roots); err != nil {
			return err
		}
		if len(ops) > 0 {
			e.mu.Lock()
			if last := ops[len(ops)-1].Seq; last > e.logSeq && len(e.ids) > 0 {
				e.logSeq = last
			}
			e.mu.Unlock()
		}
		if len(ops) < reachLogPage {
			return nil
		}
	}
}

const (
	reachSetMax   = 1_000_000 // ~50 MB at most, for a repository of that many files
	reachSetRepos = 64
)

// set returns repository repo's set, created empty when missing.
func (c *reachSets) set(repo int64) *reachSet {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tick++
	if e, ok := c.byRepo[repo]; ok {
		e.used = c.tick
		return e
	}
	if c.byRepo == nil {
		c.byRepo = map[int64]*reachSet{}
	}
	if len(c.byRepo) >= reachSetRepos {
		var oldest int64
		at := ^uint64(0)
		for id, e := range c.byRepo {
			if e.used < at {
				oldest, at = id, e.used
			}
		}
		delete(c.byRepo, oldest)
	}
	e := &reachSet{ids: map[gitobj.Hash]struct{}{}, used: c.tick}
	c.byRepo[repo] = e
	return e
}

// has reports whether h is in the set.
func (e *reachSet) has(h gitobj.Hash) bool {
	e.mu.RLock()
	defer e.mu.RUnlock()
	_, ok := e.ids[h]
	return ok
}

// addTrees adds the closures of roots (trees, or a ref's blob) that are
// not in the set yet, walking only below trees not in it. A tree missing
// from the store is left out (what is not stored is not present).
func (e *reachSet) addTrees(n gitobj.Reader, roots []gitobj.Hash) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.ids) > reachSetMax {
		e.ids, e.logSeq = map[gitobj.Hash]struct{}{}, 0
	}
	objs := n.Objects()
	// A tree enters the set once its entries did (so a walk cut short by
	// an error leaves no tree whose closure is incomplete): post-order.
	type frame struct {
		t    gitobj.Hash
		done bool
	}
	var work []frame
	for _, r := range roots {
		if _, ok := e.ids[r]; !ok {
			work = append(work, frame{t: r})
		}
	}
	for len(work) > 0 {
		f := work[len(work)-1]
		work = work[:len(work)-1]
		if _, ok := e.ids[f.t]; ok {
			continue
		}
		if f.done {
			e.ids[f.t] = struct{}{}
			continue
		}
		obj, err := objs.EncodedObject(gitobj.TreeObject, f.t)
		if err != nil {
			continue // a ref naming a blob, or a tree not stored
		}
		files, dirs, err := gitobj.TreeChildren(obj)
		if err != nil {
			return err
		}
		for _, h := range files {
			e.ids[h] = struct{}{}
		}
		work = append(work, frame{t: f.t, done: true})
		for _, d := range dirs {
			if _, ok := e.ids[d]; !ok {
				work = append(work, frame{t: d})
			}
		}
	}
	return nil
}

// treeClosure returns root and every tree and blob under it (uncached:
// the benchmark's measure of a cold closure).
func treeClosure(n gitobj.Reader, root gitobj.Hash) (map[gitobj.Hash]struct{}, error) {
	e := &reachSet{ids: map[gitobj.Hash]struct{}{}}
	if err := e.addTrees(n, []gitobj.Hash{root}); err != nil {
		return nil, err
	}
	return e.ids, nil
}

// grantLog remembers, per repository, the trees and commits its scoped
// keys uploaded (presence.grant), for the push that names them in a
// later request. Bounded (grantsMax ids per repository, grantRepos
// repositories; a full one starts over: the client uploads again).
// In this process; other replicas read an upload's outermost objects from
// its operations-log entry (loggedGrant).
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
