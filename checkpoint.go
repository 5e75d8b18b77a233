package lockstep

import (
	"context"
	"time"
)

// Checkpoint ties together, for one workspace, a commit, a database
// snapshot (when the workspace has a database branch) and the id of a
// filesystem snapshot taken by the client, so that all three roll back
// together.
type Checkpoint struct {
	ID         string    `json:"id"`
	Repo       string    `json:"repo"`
	RepoID     int64     `json:"-"`
	Branch     string    `json:"branch"`
	Commit     string    `json:"commit"`
	Tree       string    `json:"tree"`
	DBSnapshot string    `json:"db_snapshot"`
	FSSnapshot string    `json:"fs_snapshot"`
	Label      string    `json:"label"`
	KeyName    string    `json:"key"`
	OpID       string    `json:"op_id"`
	DurationMS float64   `json:"duration_ms"`
	CreatedAt  time.Time `json:"created_at"`

	// RedisSnapshot is the id of the workspace's Redis snapshot (when it
	// has a Redis branch; see RedisBrancher).
	RedisSnapshot string `json:"redis_snapshot"`
}

// CheckpointStore keeps checkpoints.
type CheckpointStore interface {
	// CreateCheckpoint stores c, enqueues events and appends entry (whose
	// id becomes c.OpID) in one transaction.
	CreateCheckpoint(ctx context.Context, c *Checkpoint, events []HookEvent, entry *OpEntry) error
	// Checkpoint returns not_found for an unknown id of that repository.
	Checkpoint(ctx context.Context, repoID int64, id string) (*Checkpoint, error)
	// Checkpoints lists a repository's checkpoints, newest first.
	Checkpoints(ctx context.Context, repoID int64, limit int) ([]Checkpoint, error)
	// SnapshotCheckpoints lists, oldest first and at most limit, the
	// checkpoints that still name a database or Redis snapshot and were
	// created before before, or belong to a workspace that is abandoned
	// or promoted (its branches, snapshots included, are dropped): what
	// the checkpoint snapshot retention drops.
	SnapshotCheckpoints(ctx context.Context, before time.Time, limit int) ([]Checkpoint, error)
	// ClearCheckpointSnapshots forgets the database (db) and/or Redis
	// (redis) snapshot of checkpoint id of repoID once it was dropped:
	// a restore then skips that part. not_found for an unknown one.
	ClearCheckpointSnapshots(ctx context.Context, repoID int64, id string, db, redis bool) error
}
