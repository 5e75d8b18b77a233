package runner

import (
	"os"
	"testing"

	"github.com/lockstep-hq/lockstep/internal/e2ekit"
)

// TestMain builds ./cmd/lockstep: the runner is tested against a real
// `lockstep serve` process that signs and delivers its gate hooks.
func TestMain(m *testing.M) {
	os.Exit(e2ekit.Main(m, e2ekit.Suite{Name: "runner", Tools: []string{"sh"}}))
}
