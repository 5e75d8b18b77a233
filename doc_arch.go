package lockstep

// Architecture (see README.md for the whole picture):
//
//	cmd/lockstep   flags, wiring, the CLI
//	web            HTTP API, git smart HTTP; errors → statuses in one place
//	forks          repositories, workspaces, push/rollback (CAS), merge, sync
//	gate           policies, checks, hook outbox, promote + landing queue
//	checkpoints    code + database + filesystem checkpoints
//	merge          merge base, tree merge, diff3
//	repo           git objects of a fork network, the ref mirror
//	dbbranch       Postgres template branching
//	fssnap         filesystem snapshots, process containment, tool runs
//	sqlstore       metadata on SQLite or PostgreSQL (the source of truth for refs)
//	auth, client, telemetry, migrations
