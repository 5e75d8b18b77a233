package e2e

import (
	"testing"

	"github.com/lockstep-hq/lockstep/internal/e2ekit"
)

// server is one `lockstep serve` process (internal/e2ekit) with this
// suite's helpers as methods.
type server struct{ *e2ekit.Server }

type serverOpts = e2ekit.ServerOpts

// startServer runs `lockstep serve` on a free port, waits for /healthz,
// reads the admin key, and stops the process when the test ends.
func startServer(t testing.TB, opts serverOpts) *server {
	t.Helper()
	return &server{e2ekit.StartServer(t, opts)}
}

// restart starts a new process on the same data directory and database
// (the old one must have exited).
func (s *server) restart(t testing.TB) *server {
	t.Helper()
	return &server{s.Restart(t)}
}
