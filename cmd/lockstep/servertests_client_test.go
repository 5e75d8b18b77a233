//go:build !lockstep_server

package main

import "testing"

// TestServerBuildTests: without the tag this package is the client build,
// and the tests of the server commands (serve, bench, the data directory,
// the bootstrap key) are not compiled; scripts/test runs them.
func TestServerBuildTests(t *testing.T) {
	t.Skip("the server commands' tests are in the server build: go test -tags lockstep_server ./cmd/lockstep")
}
