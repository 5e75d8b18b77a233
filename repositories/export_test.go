package repositories

import "github.com/lockstep-hq/lockstep/gitobj"

// BaseCacheLen is the number of (ours, theirs) pairs the merge-base cache
// of network holds (tests only).
func (s *Service) BaseCacheLen(network string) int { return s.netCaches(network).bases.Len() }

// TreeClosureLen computes the closure of tree in network (uncached) and
// returns its size (benchmarks only).
func (s *Service) TreeClosureLen(network, tree string) (int, error) {
	n, err := s.Network(network)
	if err != nil {
		return 0, err
	}
	set, err := treeClosure(n, gitobj.NewHash(tree))
	return len(set), err
}
