package forks

import (
	"context"
	"fmt"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/repo"
)

// Rollback makes a new commit on the branch whose tree is exactly the tree
// of revision to (same tree hash), with the current tip as parent: the
// damage is undone and the broken attempt stays in history. Same
// compare-and-swap rules as a push. Errors: not_found for an unknown
// revision or branch, ref_conflict, precondition_required.
func (s *Service) Rollback(ctx context.Context, actor *lockstep.Key, repoName, to string, opts WriteOptions) (*PushResult, error) {
	return s.rollback(ctx, actor, repoName, to, opts, "rollback", nil)
}

func (s *Service) rollback(ctx context.Context, actor *lockstep.Key, repoName, to string, opts WriteOptions, op string, details map[string]any) (*PushResult, error) {
	start := s.now()
	r, n, err := s.writeTarget(ctx, actor, repoName, &opts)
	if err != nil {
		return nil, err
	}
	if to == "" {
		return nil, lockstep.Errorf(lockstep.EINVALID, "missing \"to\": the revision whose tree to restore")
	}
	target, err := s.Resolve(ctx, r, to)
	if err != nil {
		return nil, err
	}
	c, err := n.Commit(target)
	if err != nil {
		return nil, err
	}
	if _, err := s.store.Ref(ctx, r.ID, branchRef(opts.Branch)); err != nil {
		return nil, lockstep.Errorf(lockstep.ENOTFOUND, "branch %s not found in %s: nothing to roll back", opts.Branch, r.Name)
	}
	if opts.Message == "" {
		opts.Message = fmt.Sprintf("Roll back %s to %s\n\nRestores the tree of %s (%s).", opts.Branch, target.String()[:12], target, firstLine(c.Message))
	}
	opts.AllowEmpty = true // a rollback to the current tree still records the decision
	return s.commitTreeWith(ctx, actor, r, op, c.Tree, repo.WriteStats{}, opts, start, details)
}

func firstLine(s string) string {
	for i, ch := range s {
		if ch == '\n' {
			return s[:i]
		}
	}
	return s
}
