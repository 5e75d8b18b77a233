// Package lockstep holds the types shared by every Lockstep package: the one
// application error type and its codes, name rules and small value types.
// Domain packages (forks, merge, gate, dbbranch) depend on this package and
// on small interfaces; adapters (sqlstore, repo, web) implement them.
package lockstep
