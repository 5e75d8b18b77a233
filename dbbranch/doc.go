// Package dbbranch gives every Lockstep workspace its own Postgres database
// (a "branch"), copied from its repository's template, with snapshots
// (checkpoints) and restore under the same name, so the agent's DSN stays
// valid across rollbacks.
//
// # State lives in the Postgres catalog
//
// There is no metadata table. Every database and role Lockstep makes has a
// deterministic name, and each database carries a small JSON document in
// COMMENT ON DATABASE (kind, repository, workspace, snapshot id, creation
// time, template generation). The comment is written last (or in the same
// transaction as the rename that publishes the database): a database with
// a Lockstep name and no comment is a half-made copy and is dropped by the
// next repair. Restarting the service loses nothing.
//
// # Names
//
//	<prefix>_<kind>_<hash12>_<short>
//
// prefix is Config.Prefix ([a-z][a-z0-9]{0,5}, default "ls"); hash12 is 48
// bits of SHA-256(prefix, "repo"|"ws", name) in hex; short is the name with
// '.' and '-' turned into '_', cut so the identifier fits in 63 bytes. Names
// of 100 bytes therefore still map to distinct identifiers (the hash
// decides; short is for people reading \l). Snapshot databases end with the
// snapshot id verbatim (6+3+12+1+40 ≤ 63), trash with the time in hex.
// Kinds:
//
//	t  template copy of a repository (IS_TEMPLATE, ALLOW_CONNECTIONS false)
//	u  template copy being built (BindTemplate / RefreshTemplate)
//	s  warm spares of the template copy (the short name starts with a
//	   random 6-hex tag: a burst keeps several)
//	o  NOLOGIN role owning the objects in every copy of the template
//	b  a workspace's branch (the only database agents connect to)
//	n  a snapshot of a branch (ALLOW_CONNECTIONS false)
//	x  warm spare of the workspace's latest snapshot
//	d  on its way out: an old branch a Restore renamed aside, or debris
//	   (a snapshot beyond MaxSnapshots, a stale spare), dropped in the
//	   background
//	r  a workspace's LOGIN role
//
// The role's password is HMAC-SHA256(Secret, workspace) (32 hex
// characters): nothing is stored, and the DSN can be recomputed at any time.
// Lockstep sends the server a SCRAM-SHA-256 verifier computed here, never
// the password.
//
// # Who may do what
//
// BindTemplate copies the user's database (it must have no sessions; its
// sessions are never killed) and, inside the copy, hands every schema,
// table, view, sequence, routine and type to the repository's owner role.
// A workspace role is a member (INHERIT) of that owner role, so it can
// ALTER and DROP the copied tables and CREATE new tables and schemas, as
// migrations do; what it creates it owns. PUBLIC's CONNECT and TEMPORARY
// are revoked on every Lockstep database; only the workspace role is
// granted CONNECT (and CREATE, TEMPORARY) on its own branch. The owner role
// cannot log in and has CONNECT nowhere, so membership opens no way into
// another workspace's branch.
//
// # Snapshots and connected sessions
//
// A snapshot is a checkpoint boundary: Snapshot sets ALLOW_CONNECTIONS false
// on the branch, terminates the agent's sessions (waiting for them to end;
// open transactions are lost), copies the branch, and allows connections
// again. Agents reconnect with the same DSN. Restore terminates them too.
//
// # Warm pool
//
// With Config.Warm, background workers keep spare copies of each
// template copy — as many as recent demand, up to Config.MaxSpares (see
// spares.go) — and one spare of each workspace's latest snapshot, already
// restricted and granted to the workspace role. CreateBranch then renames
// a template spare into the branch (concurrent calls each claim their
// own), and Restore of the latest snapshot
// renames the branch aside and the spare into its place, each in one
// transaction with the grants and the comment. Measured side by side
// (BenchmarkSideBySide, medians, 10-table template, a shared 2-vCPU
// machine): warm CreateBranch 2.7-4 ms and warm Restore 2.4-4.3 ms, against
// 19-54 ms for a bare CREATE DATABASE … TEMPLATE, 25-70 ms for a cold
// CreateBranch and 23-51 ms for a cold Restore. Restore of an older
// snapshot, or when the spare is not ready, falls back to CREATE …
// TEMPLATE. Stats counts which path ran.
//
// DROP DATABASE forces a checkpoint (0.05-2 s on a busy cluster), so the
// frequent calls (CreateBranch, Snapshot, Restore) do not drop databases
// in the normal case: the old branch after a Restore and the snapshots
// beyond MaxSnapshots are renamed and marked as debris under the workspace
// lock and dropped by the background outside it (also without Warm). A
// DROP is never cancelled half-way (PostgreSQL would leave an "invalid"
// database); invalid databases found later are dropped as debris.
//
// The cost is disk: each spare is a full copy. The pool holds one copy of
// the template per repository plus one copy of the latest snapshot per
// workspace that has snapshots; for the 10-table test template that is
// ~8 MB each (almost all of it the system catalog every database carries).
// Spares reports the live total (pg_database_size).
//
// # Concurrency and crashes
//
// Every operation on a workspace holds an in-process lock and a
// pg_advisory_lock keyed by the workspace (repository operations likewise;
// CreateBranch and the template spare builder hold the repository lock
// shared), so background refills never race a foreground operation, also
// across service replicas. A foreground call may therefore wait for one
// in-flight refill of its workspace. Each step leaves a state the next call
// recognizes (repairRepo, repairWorkspace): half-made copies are dropped, a
// branch left refusing connections is re-opened, a branch renamed aside by
// an interrupted Restore is put back, a completed staging template is moved
// into place. New repairs everything not locked by another process.
//
// # Strategy
//
// CREATE DATABASE uses STRATEGY WAL_LOG for sources smaller than
// Config.StrategyThresholdBytes (default 256 MiB, see
// DefaultStrategyThreshold) and FILE_COPY above: WAL_LOG copies only the
// blocks in use and needs no checkpoint, so it wins for small databases;
// FILE_COPY avoids writing every block to WAL (which also matters for
// replicas) but forces checkpoints, and wins for large ones.
package dbbranch
