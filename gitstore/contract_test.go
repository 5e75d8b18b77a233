package gitstore_test

import (
	"path/filepath"
	"testing"

	"github.com/lockstep-hq/lockstep/gitobj"
	"github.com/lockstep-hq/lockstep/gitobj/gitobjtest"
	"github.com/lockstep-hq/lockstep/gitstore"
)

// TestContract runs the object-store contract on the local bare
// repository (gitstore.Local, the default opener).
func TestContract(t *testing.T) {
	gitobjtest.Run(t, func(t *testing.T) gitobj.Store {
		n, err := gitstore.Local{}.Open(filepath.Join(t.TempDir(), "net.git"), gitobj.OpenOptions{Fsync: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		return n
	})
}
