// Package e2egate is the end-to-end suite of the gate: policies, checks,
// signed gate hooks and their delivery worker, the landing queue and
// promote. It builds ./cmd/lockstep once, runs `lockstep serve` as a child
// process on a temporary data directory (SQLite metadata, or Postgres from
// internal/testenv), and drives it the way agents, CI and admins do: the
// HTTP API, the `lockstep` CLI, a real `lockstep runner` process running
// `go test`, and the real git CLI. The harness is internal/e2ekit, shared
// with e2e and e2erun.
package e2egate
