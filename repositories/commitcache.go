package repositories

import (
	"sync"

	"github.com/lockstep-hq/lockstep/merge"
)

// The preflights and merges of a network share the commits they read
// (their two tips and the merge-base walks': tree, parents, committer
// time, immutable, by hash), so a single preflight into a long history
// does not re-read and re-parse it on every request. Bounded: at most commitCacheNetworks networks (the
// ones merged most recently), each at most commitCacheMax commits (~150
// bytes each: ≤ 15 MB per network); a full cache starts over empty.
//
// Beside it, the merge bases of the (ours, theirs) commit pairs merged
// (merge.BaseCache): a preflight repeated with neither tip moved skips the
// walk. Keyed by commits, never by refs, so a moved branch is a new pair.
// At most baseCacheMax pairs per network (~120 bytes each: ≤ 2.5 MB).
const (
	commitCacheMax      = 100_000
	commitCacheNetworks = 8
	baseCacheMax        = 20_000
)

type commitCaches struct {
	mu    sync.Mutex
	tick  uint64
	byNet map[string]*netCommits
}

type netCommits struct {
	c     *merge.CommitCache
	bases *merge.BaseCache
	used  uint64
}

// commitCache returns the shared commit cache of a fork network.
func (s *Service) commitCache(network string) *merge.CommitCache { return s.netCaches(network).c }

// withCaches sets opts' shared caches to those of network.
func (s *Service) withCaches(opts merge.Options, network string) merge.Options {
	e := s.netCaches(network)
	opts.Commits, opts.Bases = e.c, e.bases
	return opts
}

// netCaches returns the shared merge caches of a fork network.
func (s *Service) netCaches(network string) *netCommits {
	cc := &s.commits
	cc.mu.Lock()
	defer cc.mu.Unlock()
	cc.tick++
	if e, ok := cc.byNet[network]; ok {
		e.used = cc.tick
		return e
	}
	if cc.byNet == nil {
		cc.byNet = map[string]*netCommits{}
	}
	if len(cc.byNet) >= commitCacheNetworks {
		oldest, at := "", uint64(0)
		for n, e := range cc.byNet {
			if oldest == "" || e.used < at {
				oldest, at = n, e.used
			}
		}
		delete(cc.byNet, oldest)
	}
	e := &netCommits{c: merge.NewBoundedCommitCache(commitCacheMax), bases: merge.NewBaseCache(baseCacheMax), used: cc.tick}
	cc.byNet[network] = e
	return e
}
