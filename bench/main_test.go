package bench

import (
	"os"
	"testing"

	"github.com/lockstep-hq/lockstep/internal/e2ekit"
)

// TestMain builds ./cmd/lockstep: the load generator is tested against a
// real `lockstep serve` process.
func TestMain(m *testing.M) {
	os.Exit(e2ekit.Main(m, e2ekit.Suite{Name: "bench", Tools: []string{"git"}}))
}
