package lockstep

// Architecture (docs/architecture.md has the layers, one request's path
// and where each rule lives):
//
//	cmd/lockstep   flags, wiring, the CLI
//	web            HTTP API, git smart HTTP; errors → statuses in one place
//	repositories   create, refs, reads, push/rollback (CAS), merge, git receive, the ref mirror
//	workspaces     fork, status, attempts, sync, the workspace's database branch
//	gate           policies, checks, hook outbox, promote: landing queue + landing
//	checkpoints    code + database + filesystem checkpoints
//	effects        the effects outbox: outward requests staged, released by promote
//	merge          merge base, tree merge, diff3
//	repo           git objects of a fork network, the ref mirror
//	dbbranch       Postgres template branching (lockstep.Brancher)
//	redisbranch    a redis-server per workspace (lockstep.RedisBrancher)
//	redislock      Redis locks (lockstep.Locker)
//	fssnap         filesystem snapshots, process containment, tool runs
//	egress         lockstep run's egress proxy: reads pass, writes staged as effects
//	sqlstore       metadata on SQLite or PostgreSQL (the source of truth for refs)
//	auth, client, telemetry, migrations
