package repositories

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/gitobj"
)

// Edit is one file change of an edit batch: write Content at Path, or
// delete Path (a file or a whole directory).
type Edit = gitobj.TreeEdit

// MaxEditPaths bounds how many paths an edit's operations-log entry lists.
const MaxEditPaths = 50

// EditFiles applies a batch of file edits to a branch as one commit, under
// the same compare-and-swap rules as a push (opts.ExpectOID, or
// opts.Force): an agent without a checkout can work through the API
// alone. The edits apply to the branch's current tree (or, for a branch
// that does not exist yet, to the tree it would start from). A forced
// batch is re-applied when the branch moves under it, never committed on
// a stale tree, until it lands (ForcedEditAttempts, ForcedEditTime).
//
// Errors: those of PushTar, plus invalid_argument for a bad path or a
// write through a file, not_found for a delete of a missing path.
func (s *Service) EditFiles(ctx context.Context, actor *lockstep.Key, repoName string, edits []Edit, opts WriteOptions) (*PushResult, error) {
	start := s.now()
	if len(edits) == 0 {
		return nil, lockstep.Errorf(lockstep.EINVALID, "edits: at least one edit")
	}
	r, n, err := s.writeTarget(ctx, actor, repoName, &opts)
	if err != nil {
		return nil, err
	}
	paths := make([]string, 0, min(len(edits), MaxEditPaths))
	for _, e := range edits[:min(len(edits), MaxEditPaths)] {
		paths = append(paths, e.Path)
	}
	details := map[string]any{"edits": len(edits), "paths": paths}
	policy := noRetry
	if opts.Force && opts.ExpectOID == "" {
		// Another write landing first is expected: wait a little (more
		// the more often it happened, jittered so the losers do not
		// collide again in step) and re-apply the batch on the new tip.
		policy = retryPolicy{attempts: ForcedEditAttempts, until: start.Add(ForcedEditTime), backoff: forcedEditBackoff}
	}
	var res *PushResult
	err = s.retryMoves(ctx, policy, func(int) error {
		cur, err := s.checkExpect(ctx, r, opts)
		if err != nil {
			return s.logFailure(ctx, actor, r, "edit", opts.Branch, start, err)
		}
		base, err := s.editBase(ctx, r, n, cur, opts)
		if err != nil {
			return err
		}
		tree, objs, err := n.EditTree(base, edits, s.cfg.Limits)
		if err != nil {
			return err
		}
		stats, err := n.WriteObjects(objs)
		if err != nil {
			return fmt.Errorf("write objects: %w", err)
		}
		s.afterWrite(r.Network, n)
		pinned := opts
		pinned.ExpectOID = cur // the tree was built on cur: never commit it on another tip
		res, err = s.commitTree(ctx, actor, r, tree, stats, pinned, Reason{Op: "edit", Start: start, Details: details})
		return err
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// A forced edit batch (force true, no expect_oid) retries its own
// compare-and-swap until it lands, re-applied on the new tip each time,
// for at most ForcedEditAttempts attempts and ForcedEditTime: only then
// does it answer ref_conflict. 24 agents editing one branch at once all
// land.
const (
	ForcedEditAttempts = 100
	ForcedEditTime     = 30 * time.Second
)

// forcedEditBackoff is the pause before retry attempt+1: up to 1 ms per
// attempt so far (at most 50 ms), jittered.
func forcedEditBackoff(attempt int) time.Duration {
	limit := time.Duration(min(attempt+1, 50)) * time.Millisecond
	return time.Duration(rand.Int64N(int64(limit)) + 1)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// editBase is the tree an edit batch applies to: the branch tip's, or for
// a new branch the tree of the commit it will start from (empty if none).
func (s *Service) editBase(ctx context.Context, r *lockstep.Repo, n gitobj.Reader, cur string, opts WriteOptions) (gitobj.Hash, error) {
	from := cur
	if cur == lockstep.ZeroOID {
		from = opts.From
		if from == "" && opts.Branch != r.DefaultBranch {
			if tip, err := s.branchTip(ctx, r, r.DefaultBranch); err == nil {
				from = tip.String()
			}
		}
		if from == "" {
			return gitobj.ZeroHash, nil
		}
		h, err := s.Resolve(ctx, r, from)
		if err != nil {
			return gitobj.ZeroHash, err
		}
		from = h.String()
	}
	c, err := n.Commit(gitobj.NewHash(from))
	if err != nil {
		return gitobj.ZeroHash, err
	}
	return c.Tree, nil
}
