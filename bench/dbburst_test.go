package bench

import (
	"context"
	"testing"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/dbbranch"
)

// TestBenchBranchPrefixValid: the bench servers' branch prefix passes
// dbbranch's check (it fails on the prefix before it needs a server).
func TestBenchBranchPrefixValid(t *testing.T) {
	_, err := dbbranch.New(context.Background(), dbbranch.Config{Prefix: benchBranchPrefix, Secret: []byte("x")})
	if code := lockstep.ErrorCode(err); code != lockstep.EUNAVAILABLE {
		t.Fatalf("dbbranch.New with prefix %q and no URL: %v (%s), want unavailable (prefix accepted)", benchBranchPrefix, err, code)
	}
}
