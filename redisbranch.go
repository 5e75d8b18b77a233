package lockstep

import "context"

// RedisBranch is a workspace's own Redis instance, seeded from its base
// repository's template dataset.
type RedisBranch struct {
	Workspace string
	Repo      string // the base repository whose template seeded it
	Template  bool   // seeded from a template RDB (false: started empty)
	URL       string // redis://default:password@127.0.0.1:port/0
}

// RedisBrancher is the Redis-branching seam, the Redis twin of Brancher:
// every workspace can own a Redis instance, snapshotted in its checkpoints
// and restored with its code and database. redisbranch (one redis-server
// per workspace, RDB snapshots) is the implementation.
//
// Error contract: not_found when the branch or snapshot does not exist;
// invalid_argument for a bad name; unavailable when the instance cannot be
// started or reached; anything else is internal.
type RedisBrancher interface {
	// CreateBranch creates workspace's instance from repo's template, or
	// returns the existing one.
	CreateBranch(ctx context.Context, repo, workspace string) (*RedisBranch, error)
	// Branch returns workspace's instance (restarting it if it stopped).
	Branch(ctx context.Context, workspace string) (*RedisBranch, error)
	// DropBranch stops workspace's instance and removes its data and
	// snapshots.
	DropBranch(ctx context.Context, workspace string) error
	// Snapshot saves workspace's dataset as the snapshot id.
	Snapshot(ctx context.Context, workspace, id string) error
	// DropSnapshot removes the snapshot id of workspace.
	DropSnapshot(ctx context.Context, workspace, id string) error
	// Restore replaces workspace's dataset by the snapshot id, on the same
	// address and password (the workspace's REDIS_URL stays valid).
	Restore(ctx context.Context, workspace, id string) error
}
