// Package lockstep holds the types shared by every Lockstep package: the one
// application error type and its codes, name rules, small value types, and
// the seams at the storage edges: the Store interfaces, Brancher (database
// branches) and Locker (distributed locks). Domain packages (repositories,
// workspaces, gate, checkpoints, merge) depend on this package and on small
// interfaces only; adapters (sqlstore, repo, dbbranch, redislock) implement
// them and web serves them. See docs/architecture.md.
package lockstep
