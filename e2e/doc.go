// Package e2e is Lockstep's end-to-end suite: it builds the lockstep
// binary once, runs `lockstep serve` as a real process per test (SQLite or
// Postgres metadata), and drives it the way agents, reviewers and CI do:
// over the HTTP API, the lockstep CLI and the real git CLI (smart HTTP).
// The harness (build, server processes, API, CLI and git helpers) is
// internal/e2ekit, shared with e2egate and e2erun. The package has no
// non-test code; run it with
//
//	go test -race -count=1 ./e2e/
//
// When the test binary is built with -race, the server binary is built
// with -race too (LOCKSTEP_E2E_RACE=0 turns that off), and a data race
// reported by a server process fails the test that started it.
package e2e
