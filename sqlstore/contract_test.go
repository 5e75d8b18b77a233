package sqlstore_test

import (
	"path/filepath"
	"testing"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/internal/storetest"
	"github.com/lockstep-hq/lockstep/internal/testenv"
)

// TestContract runs the store contract suite (internal/storetest) on both
// implementations, each method on a fresh store: a SQLite file in a
// temporary directory, a throwaway Postgres database dropped afterwards.
func TestContract(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) lockstep.Store {
			return mustOpen(t, filepath.Join(t.TempDir(), "meta.db"))
		})
	})
	t.Run("postgres", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) lockstep.Store {
			return mustOpen(t, testenv.MustPostgresDB(t))
		})
	})
}
