package e2eidem

import (
	"os"
	"testing"

	"github.com/lockstep-hq/lockstep/internal/e2ekit"
)

func TestMain(m *testing.M) {
	os.Exit(e2ekit.Main(m, e2ekit.Suite{Name: "e2eidem", Tools: []string{"git"}}))
}
