package repositories

import (
	"context"
	"fmt"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/gitobj"
	"github.com/lockstep-hq/lockstep/merge"
)

// Rollback makes a new commit on the branch whose tree is exactly the tree
// of revision to (same tree hash), with the current tip as parent: the
// damage is undone and the broken attempt stays in history. Same
// compare-and-swap rules as a push. Errors: not_found for an unknown
// revision or branch, ref_conflict, precondition_required.
func (s *Service) Rollback(ctx context.Context, actor *lockstep.Key, repoName, to string, opts WriteOptions) (*PushResult, error) {
	return s.rollback(ctx, actor, repoName, to, opts, Reason{Op: "rollback"})
}

func (s *Service) rollback(ctx context.Context, actor *lockstep.Key, repoName, to string, opts WriteOptions, why Reason) (*PushResult, error) {
	why.Start = s.now()
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
	var offers []lockstep.CompensationOffer
	if why.Op == "rollback" && r.ForkOf == "" {
		offers = s.compensationOffers(ctx, r, n, opts, target)
		outer := why.Wrap
		why.Wrap = func(inner any) any {
			if pr, ok := inner.(*PushResult); ok {
				pr.Compensations = offers
			}
			if outer != nil {
				return outer(inner)
			}
			return inner
		}
	}
	res, err := s.commitTree(ctx, actor, r, c.Tree, gitobj.WriteStats{}, opts, why)
	if res != nil {
		res.Compensations = offers
	}
	return res, err
}

// maxUndoneWalk bounds the first-parent walk of compensationOffers.
const maxUndoneWalk = lockstep.MaxCompensableCommits

// compensationOffers lists the released effects with a compensation of the
// commits a rollback of base's branch to target undoes: the first-parent
// chain from the tip down to the merge base with target (where promotes
// land), newest first. Best effort: a failure to read offers nothing.
//
// At most two metadata queries whatever the history's length: one cheap
// look for any compensable effect released into the base (none, the usual
// case: no walk at all), then, after the walk in git, one for those the
// walked commits released, matched in memory.
func (s *Service) compensationOffers(ctx context.Context, r *lockstep.Repo, n gitobj.Reader, opts WriteOptions, target gitobj.Hash) []lockstep.CompensationOffer {
	tip, err := s.branchTip(ctx, r, opts.Branch)
	if err != nil || tip == target {
		return nil
	}
	if some, err := s.store.CompensableEffects(ctx, r.ID, nil, 1); err != nil || len(some) == 0 {
		return nil
	}
	mb, err := merge.MergeBase(ctx, n.Objects(), tip, target)
	if err != nil {
		return nil
	}
	var walked []string
	h := tip
	for i := 0; i < maxUndoneWalk && h != mb && !h.IsZero(); i++ {
		walked = append(walked, h.String())
		ci, err := n.Commit(h)
		if err != nil || len(ci.Parents) == 0 {
			break
		}
		h = ci.Parents[0]
	}
	list, err := s.store.CompensableEffects(ctx, r.ID, walked, 0)
	if err != nil {
		return nil
	}
	byCommit := map[string][]lockstep.Effect{}
	for _, e := range list {
		byCommit[e.ReleasedCommit] = append(byCommit[e.ReleasedCommit], e)
	}
	var out []lockstep.CompensationOffer
	for _, c := range walked {
		list := byCommit[c]
		for j := len(list) - 1; j >= 0; j-- {
			e := list[j]
			if e.Compensation == nil || e.Status != lockstep.EffectReleased || e.CompensationStatus != "" {
				continue
			}
			// Shown to the caller (and kept in a stored idempotent
			// answer): the URLs redacted, as every view shows them.
			out = append(out, lockstep.CompensationOffer{Effect: e.ID, Workspace: e.Repo, Commit: c, Request: e.Request.Method + " " + lockstep.RedactURL(e.Request.URL),
				Compensation: e.Compensation.Method + " " + lockstep.RedactURL(e.Compensation.URL), Label: e.Label, Consuming: e.Consuming})
		}
	}
	return out
}

func firstLine(s string) string {
	for i, ch := range s {
		if ch == '\n' {
			return s[:i]
		}
	}
	return s
}

// BranchTip returns a branch's commit and tree.
func (s *Service) BranchTip(ctx context.Context, r *lockstep.Repo, branch string) (commit, tree string, err error) {
	h, err := s.branchTip(ctx, r, branch)
	if err != nil {
		return "", "", err
	}
	n, err := s.network(ctx, r.Network)
	if err != nil {
		return "", "", err
	}
	ci, err := n.Commit(h)
	if err != nil {
		return "", "", err
	}
	return h.String(), ci.Tree.String(), nil
}

// RestoreTree is the code part of a checkpoint restore: a rollback commit
// to commit's tree on branch, linked in the operations log to the entry it
// follows. When the branch already has that tree nothing is written
// (Changed false). Without expect the restore applies to the current tip.
// wrap (may be nil) turns the rollback's *PushResult into the restore's
// answer, carried by the rollback's log entry (Reason.Wrap).
func (s *Service) RestoreTree(ctx context.Context, actor *lockstep.Key, wsName, branch, commit, expectOID, follows string, details map[string]any,
	wrap func(inner any) any) (*PushResult, error) {
	r, err := s.Repo(ctx, wsName)
	if err != nil {
		return nil, err
	}
	// Checked here too, not only by the rollback below: a restore to the
	// tree the branch already has writes nothing, but the caller goes on
	// to restore the database.
	if err := CanMoveRefs(actor, r); err != nil {
		return nil, err
	}
	tipCommit, tipTree, err := s.BranchTip(ctx, r, branch)
	if err != nil {
		return nil, err
	}
	if err := expect(r, branchRef(branch), expectOID, tipCommit); err != nil {
		return nil, err
	}
	n, err := s.network(ctx, r.Network)
	if err != nil {
		return nil, err
	}
	target, err := n.Commit(gitobj.NewHash(commit))
	if err != nil {
		return nil, err
	}
	if target.Tree.String() == tipTree {
		return &PushResult{Commit: tipCommit, Tree: tipTree, Parent: tipCommit, Branch: branch, Changed: false}, nil
	}
	opts := WriteOptions{Branch: branch, ExpectOID: tipCommit,
		Message: fmt.Sprintf("Restore checkpoint %v\n\nRestores the tree of %s.", details["checkpoint"], commit)}
	// The commit is the checkpoint's, recorded by the server on this
	// workspace: a scoped key restores it even when a force push left it
	// out of the branch's history (scopedCommit).
	ctx = context.WithValue(ctx, restoreCommitKey{}, target.Hash)
	return s.rollback(ctx, actor, wsName, commit, opts, Reason{Op: "checkpoint.restore", Details: details, Follows: follows, Wrap: wrap})
}
