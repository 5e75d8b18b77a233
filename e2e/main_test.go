package e2e

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/lockstep-hq/lockstep/internal/e2ekit"
)

// goCache is the GOCACHE shared by every `go test` the runner starts, so
// only the first one compiles the standard library.
var goCache string

// TestMain builds ./cmd/lockstep once for every test of the package.
func TestMain(m *testing.M) {
	os.Exit(e2ekit.Main(m, e2ekit.Suite{
		Name:  "e2e",
		Tools: []string{"git", "go"},
		Setup: func() { goCache = filepath.Join(e2ekit.TmpRoot, "gocache") },
	}))
}
