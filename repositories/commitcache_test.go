package repositories

import (
	"fmt"
	"testing"
)

// TestCommitCachePerNetwork: one cache per fork network, the same one on
// every call, and at most commitCacheNetworks of them: the network merged
// least recently is dropped first.
func TestCommitCachePerNetwork(t *testing.T) {
	s := &Service{}
	first := s.commitCache("net-0")
	if s.commitCache("net-0") != first {
		t.Fatal("a network's second call got another cache")
	}

	for i := 1; i < commitCacheNetworks; i++ {
		s.commitCache(fmt.Sprintf("net-%d", i))
	}
	s.commitCache("net-0") // net-1 is now the least recently used
	s.commitCache("net-new")
	if n := len(s.commits.byNet); n != commitCacheNetworks {
		t.Fatalf("%d network caches, want %d", n, commitCacheNetworks)
	}
	if _, ok := s.commits.byNet["net-1"]; ok {
		t.Fatal("net-1 (least recently used) was kept")
	}
	if s.commitCache("net-0") != first {
		t.Fatal("net-0 (recently used) was dropped")
	}
	bases := s.netCaches("net-0").bases
	if bases == nil || s.netCaches("net-0").bases != bases || s.netCaches("net-new").bases == bases {
		t.Fatal("the merge-base cache is not one per network")
	}
}
