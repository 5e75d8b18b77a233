package e2e

import (
	"testing"

	"github.com/lockstep-hq/lockstep/internal/e2ekit"
)

// startGateServer runs `lockstep serve` (see e2ekit.StartServer) with the
// gate tests' default flags first (--hook-backoff 100ms --hook-max-backoff
// 1s), so opts.Args win.
func startGateServer(t testing.TB, opts serverOpts) *server {
	t.Helper()
	opts.Args = append([]string{"--hook-backoff", "100ms", "--hook-max-backoff", "1s"}, opts.Args...)
	return &server{e2ekit.StartServer(t, opts)}
}

// onBothBackends runs fn in parallel subtests on SQLite and on Postgres
// metadata.
func onBothBackends(t *testing.T, fn func(t *testing.T, postgres bool)) {
	for _, pg := range []bool{false, true} {
		name := "sqlite"
		if pg {
			name = "postgres"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fn(t, pg)
		})
	}
}
