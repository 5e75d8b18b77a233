package e2egate

import (
	"testing"

	"github.com/lockstep-hq/lockstep/internal/e2ekit"
)

// server is one `lockstep serve` process (internal/e2ekit) with the gate
// suite's helpers as methods.
type server struct{ *e2ekit.Server }

type serverOpts = e2ekit.ServerOpts

// startServer runs `lockstep serve` (see e2ekit.StartServer) with the
// suite's default flags first (--hook-backoff 100ms --hook-max-backoff
// 1s), so opts.Args win.
func startServer(t testing.TB, opts serverOpts) *server {
	t.Helper()
	opts.Args = append([]string{"--hook-backoff", "100ms", "--hook-max-backoff", "1s"}, opts.Args...)
	return &server{e2ekit.StartServer(t, opts)}
}

// restart starts a new process on the same data directory, database and
// flags; the old one must have exited.
func (s *server) restart(t testing.TB) *server {
	t.Helper()
	return &server{s.Restart(t)}
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
