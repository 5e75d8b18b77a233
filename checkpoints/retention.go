package checkpoints

import (
	"context"
	"fmt"
	"time"

	"github.com/lockstep-hq/lockstep"
)

// DefaultSnapshotRetention is how long a checkpoint's database and Redis
// snapshots are kept when --checkpoint-retention is not given.
const DefaultSnapshotRetention = 7 * 24 * time.Hour

// PruneResult is what one pass of the checkpoint snapshot retention did.
type PruneResult struct {
	Database int      // database snapshots dropped (or found gone)
	Redis    int      // Redis snapshots dropped (or found gone)
	Errors   []string // per-checkpoint failures; those are tried again next time
}

// PruneSnapshots applies the checkpoint snapshot retention once: the
// database and Redis snapshots of checkpoints older than window (0: no
// age limit), and of every checkpoint of an abandoned or promoted
// workspace (whose branches were dropped with their snapshots), are
// dropped and the checkpoint forgets them, so that a restore skips that
// part and the storage accounting no longer counts them. The checkpoint
// itself (its commit, its filesystem snapshot id) stays. A snapshot
// already gone (not_found) counts as dropped; a part whose branching is
// off on this server, or whose drop failed, is left for a later pass.
// Active and failed workspaces keep snapshots younger than window
// (dbbranch and redisbranch also keep at most --branch-max-snapshots per
// workspace).
func (s *Service) PruneSnapshots(ctx context.Context, window time.Duration) (*PruneResult, error) {
	before := time.Time{}
	if window > 0 {
		before = s.now().Add(-window)
	}
	res := &PruneResult{}
	seen := map[string]bool{}
	for {
		cs, err := s.store.SnapshotCheckpoints(ctx, before, 200)
		if err != nil {
			return res, err
		}
		progress := false
		for _, c := range cs {
			if seen[c.ID] {
				continue // left from an earlier batch (its drop failed or is off)
			}
			seen[c.ID] = true
			progress = true
			db := c.DBSnapshot != "" && s.br.DatabaseEnabled() && s.drop(ctx, res, c, "database", c.DBSnapshot, s.br.DropDatabaseSnapshot)
			rd := c.RedisSnapshot != "" && s.br.RedisEnabled() && s.drop(ctx, res, c, "redis", c.RedisSnapshot, s.br.DropRedisSnapshot)
			if !db && !rd {
				continue
			}
			if err := s.store.ClearCheckpointSnapshots(ctx, c.RepoID, c.ID, db, rd); err != nil && lockstep.ErrorCode(err) != lockstep.ENOTFOUND {
				return res, err
			}
			if db {
				res.Database++
			}
			if rd {
				res.Redis++
			}
		}
		if !progress || len(cs) < 200 {
			return res, nil
		}
	}
}

// drop drops one snapshot of c; true when it is gone (dropped now, or
// not found).
func (s *Service) drop(ctx context.Context, res *PruneResult, c lockstep.Checkpoint, part, id string,
	dropFn func(ctx context.Context, workspace, id string) error) bool {
	err := dropFn(ctx, c.Repo, id)
	if err == nil || lockstep.ErrorCode(err) == lockstep.ENOTFOUND {
		return true
	}
	s.log.WarnContext(ctx, "checkpoint retention: drop "+part+" snapshot", "workspace", c.Repo, "checkpoint", c.ID, "error", err)
	res.Errors = append(res.Errors, fmt.Sprintf("%s %s: %s snapshot: %v", c.Repo, c.ID, part, err))
	return false
}
