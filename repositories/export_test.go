package repositories

// BaseCacheLen is the number of (ours, theirs) pairs the merge-base cache
// of network holds (tests only).
func (s *Service) BaseCacheLen(network string) int { return s.netCaches(network).bases.Len() }
