package e2egate

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/lockstep-hq/lockstep/internal/e2ekit"
)

// goCache is the GOCACHE shared by every `go test` the runner starts, so
// only the first one compiles the standard library.
var goCache string

func TestMain(m *testing.M) {
	os.Exit(e2ekit.Main(m, e2ekit.Suite{
		Name:  "e2egate",
		Tools: []string{"git", "go"},
		Setup: func() { goCache = filepath.Join(e2ekit.TmpRoot, "gocache") },
	}))
}
