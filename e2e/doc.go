// Package e2e is Lockstep's end-to-end suite: it builds the lockstep
// binary once (TestMain), runs `lockstep serve` as a real process per test
// (SQLite or Postgres metadata), and drives it the way agents, reviewers
// and CI do: over the HTTP API, the lockstep CLI, the MCP endpoint, a real
// `lockstep runner` process running `go test`, and the real git CLI
// (smart HTTP). The harness (build, server processes, API, CLI and git
// helpers) is internal/e2ekit. The package has no non-test code; run it
// with
//
//	go test -race -count=1 ./e2e/
//
// Files are named after what they test:
//
//   - repositories, pushes, reads, refs, merges, workspaces, git: repo_,
//     read_, refname_, merge_, workspace_, git*_, compact_, outage_ …;
//   - the gate (policies, checks, signed hooks and their delivery worker,
//     the landing queue, promote, the runner, MCP): gate_*, hooks*_,
//     policy_, promote_, queue_, runner_, mcp_, product_ …;
//   - idempotent writes (every mutating route twice with one
//     Idempotency-Key, concurrent duplicates, a server SIGKILLed between
//     commit and answer, a proxy that drops answers): idem_, crash_,
//     fault_;
//   - checkpoints and `lockstep run` (a workspace with a Postgres branch,
//     a transactional tool run that fails, code, data and files restored
//     together) and the CLI tour: run_*, tour_, cli_oplog_run_checkout;
//   - CLI scenarios as testscript files: testdata/script/*.txtar
//     (script_test.go).
//
// When the test binary is built with -race, the server binary is built
// with -race too (LOCKSTEP_E2E_RACE=0 turns that off), and a data race
// reported by a server process fails the test that started it.
package e2e
