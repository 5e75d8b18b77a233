// Package e2ekit is the harness of Lockstep's end-to-end suite (e2e) and
// of the tests that need a real server process (runner). It is a normal
// package so test packages can import it, but it is used only by tests:
// nothing outside *_test.go files imports it.
//
// It builds the lockstep binary once per test binary ([Main]), runs
// `lockstep serve` as a child process on a free port with a temporary data
// directory and optional Postgres metadata ([StartServer]), and drives it
// the way clients do: raw HTTP API calls with status and error-envelope
// checks ([Server.Call], [Server.MustJSON], [WantError]), keys, repos and
// tar pushes, the lockstep CLI ([Server.CLI]) and the git CLI with an
// isolated HOME ([Git]).
//
// When the test binary is built with -race, the server binary is built
// with -race too (LOCKSTEP_E2E_RACE=0 turns that off), and a data race
// reported by a server process fails the test that started it.
// LOCKSTEP_E2E_BINARY runs a prebuilt binary instead of building one.
package e2ekit
