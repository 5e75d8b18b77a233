package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/lockstep-hq/lockstep"
)

// CreateCheckpoint stores a checkpoint with its log entry and events.
func (s *DB) CreateCheckpoint(ctx context.Context, c *lockstep.Checkpoint, events []lockstep.HookEvent, entry *lockstep.OpEntry) (err error) {
	ctx, span := s.start(ctx, "CreateCheckpoint")
	defer func() { err = end(span, err) }()
	if c.CreatedAt.IsZero() {
		c.CreatedAt = lockstep.TruncateTime(s.now())
	}
	if entry != nil && entry.ID == "" {
		entry.ID = NewOpID()
	}
	if entry != nil {
		c.OpID = entry.ID
	}
	return s.inTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO checkpoints (id, repo_id, branch, commit_oid, tree_oid, db_snapshot, fs_snapshot, label, key_name, op_id, duration_us, created_at, redis_snapshot)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)`,
			c.ID, c.RepoID, c.Branch, c.Commit, c.Tree, c.DBSnapshot, c.FSSnapshot, c.Label, c.KeyName, c.OpID, int64(c.DurationMS*1000), micros(c.CreatedAt), c.RedisSnapshot)
		if isUnique(err) {
			return because(err, lockstep.ECONFLICT, "checkpoint %s already exists", c.ID)
		}
		if err != nil {
			return fmt.Errorf("insert checkpoint: %w", err)
		}
		if err := s.enqueue(ctx, tx, events); err != nil {
			return err
		}
		return s.appendOp(ctx, tx, entry)
	})
}

const checkpointCols = `c.id, r.name, c.repo_id, c.branch, c.commit_oid, c.tree_oid, c.db_snapshot, c.fs_snapshot, c.label, c.key_name, c.op_id, c.duration_us, c.created_at, c.redis_snapshot`

func scanCheckpoint(row interface{ Scan(...any) error }) (*lockstep.Checkpoint, error) {
	var c lockstep.Checkpoint
	var d, t int64
	if err := row.Scan(&c.ID, &c.Repo, &c.RepoID, &c.Branch, &c.Commit, &c.Tree, &c.DBSnapshot, &c.FSSnapshot, &c.Label, &c.KeyName, &c.OpID, &d, &t, &c.RedisSnapshot); err != nil {
		return nil, err
	}
	c.DurationMS = float64(d) / 1000
	c.CreatedAt = fromMicros(t)
	return &c, nil
}

// Checkpoint returns one checkpoint of a repository.
func (s *DB) Checkpoint(ctx context.Context, repoID int64, id string) (c *lockstep.Checkpoint, err error) {
	ctx, span := s.start(ctx, "Checkpoint")
	defer func() { err = end(span, err) }()
	c, err = scanCheckpoint(s.db.QueryRowContext(ctx, `SELECT `+checkpointCols+` FROM checkpoints c JOIN repos r ON r.id = c.repo_id WHERE c.repo_id = $1 AND c.id = $2`, repoID, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, because(err, lockstep.ENOTFOUND, "checkpoint %s not found", id)
	}
	return c, err
}

// Checkpoints lists a repository's checkpoints, newest first.
func (s *DB) Checkpoints(ctx context.Context, repoID int64, limit int) (out []lockstep.Checkpoint, err error) {
	ctx, span := s.start(ctx, "Checkpoints")
	defer func() { err = end(span, err) }()
	if limit <= 0 || limit > 1000 {
		limit = 100
	}
	rows, err := s.db.QueryContext(ctx, `SELECT `+checkpointCols+` FROM checkpoints c JOIN repos r ON r.id = c.repo_id WHERE c.repo_id = $1 ORDER BY c.created_at DESC, c.id LIMIT $2`, repoID, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		c, err := scanCheckpoint(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, *c)
	}
	return out, rows.Err()
}

// SnapshotCheckpoints lists the checkpoints whose snapshots the
// retention drops (see lockstep.CheckpointStore), oldest first.
func (s *DB) SnapshotCheckpoints(ctx context.Context, before time.Time, limit int) (out []lockstep.Checkpoint, err error) {
	ctx, span := s.start(ctx, "SnapshotCheckpoints")
	defer func() { err = end(span, err) }()
	if limit <= 0 || limit > 1000 {
		limit = 100
	}
	rows, err := s.db.QueryContext(ctx, `SELECT `+checkpointCols+` FROM checkpoints c JOIN repos r ON r.id = c.repo_id
		WHERE (c.db_snapshot <> '' OR c.redis_snapshot <> '') AND (c.created_at < $1 OR r.status IN ($2, $3))
		ORDER BY c.created_at, c.id LIMIT $4`, micros(before), string(lockstep.StatusAbandoned), string(lockstep.StatusPromoted), limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		c, err := scanCheckpoint(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, *c)
	}
	return out, rows.Err()
}

// ClearCheckpointSnapshots forgets a checkpoint's dropped snapshots.
func (s *DB) ClearCheckpointSnapshots(ctx context.Context, repoID int64, id string, db, redis bool) (err error) {
	ctx, span := s.start(ctx, "ClearCheckpointSnapshots")
	defer func() { err = end(span, err) }()
	res, err := s.db.ExecContext(ctx, `UPDATE checkpoints SET
		db_snapshot = CASE WHEN $1 THEN '' ELSE db_snapshot END,
		redis_snapshot = CASE WHEN $2 THEN '' ELSE redis_snapshot END
		WHERE repo_id = $3 AND id = $4`, db, redis, repoID, id)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 0 {
		return lockstep.Errorf(lockstep.ENOTFOUND, "checkpoint %s not found", id)
	}
	return nil
}
