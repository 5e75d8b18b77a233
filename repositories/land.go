package repositories

import (
	"context"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/gitobj"
	"github.com/lockstep-hq/lockstep/merge"
)

// The exported primitives below are what the workspaces service and the
// gate's landing build on: the repositories service stays the one place a
// ref moves (compare-and-swap, attempt record, hook outbox, log entry and
// mirror), the callers decide when and why.

// Tip is a branch's commit. Errors: not_found when the branch does not
// exist.
func (s *Service) Tip(ctx context.Context, r *lockstep.Repo, branch string) (gitobj.Hash, error) {
	return s.branchTip(ctx, r, branch)
}

// MergeOptions is the merge engine's options with the configured limits.
func (s *Service) MergeOptions(deep bool) merge.Options {
	return merge.Options{Deep: deep, MaxFileBytes: s.cfg.MergeMaxFileBytes, RenameLimit: s.cfg.MergeRenameLimit}
}

// Materialize merges theirs into r's branch req.Ours and moves it (see
// Merge) for why (why.Op names the operation in the log; why.Change, a
// promote's workspace status, commits in the same transaction as the ref).
func (s *Service) Materialize(ctx context.Context, actor *lockstep.Key, r *lockstep.Repo, req MergeRequest, theirs gitobj.Hash, why Reason) (*MergeResponse, error) {
	return s.materialize(ctx, actor, r, req, theirs, why)
}

// LandCommit brings commit (with tree) onto r's branch: the branch is
// created when it does not exist yet, else commit is merged into it by
// mode (Materialize). why.Change commits in the same transaction as the ref.
func (s *Service) LandCommit(ctx context.Context, actor *lockstep.Key, r *lockstep.Repo, branch string, commit, tree gitobj.Hash,
	mode, message string, why Reason) (*MergeResponse, error) {
	if _, terr := s.branchTip(ctx, r, branch); lockstep.ErrorCode(terr) == lockstep.ENOTFOUND {
		res := &MergeResponse{Clean: true, FastForward: true, Theirs: commit.String(), Tree: tree.String(), Commit: commit.String(), Branch: branch, Conflicts: []merge.Conflict{}}
		m := branchMove(actor, r, branch, lockstep.ZeroOID, commit.String(), tree.String(), gitobj.WriteStats{}, why)
		m.Answer = res
		if err := s.move(ctx, m); err != nil {
			return nil, err
		}
		return res, nil
	}
	req := MergeRequest{Ours: branch, Theirs: commit.String(), Deep: true, Materialize: true, Message: message, Mode: mode}
	return s.materialize(ctx, actor, r, req, commit, why)
}

// MirrorNew writes a just-created repository's refs and HEAD to the
// on-disk mirror; a failure is remembered (MirrorProblems), not returned:
// the store already holds the truth.
func (s *Service) MirrorNew(ctx context.Context, r *lockstep.Repo, refs []lockstep.Ref) {
	if s.shared {
		// Shared networks: the mirror is rewritten from the store before
		// git serves r (PrepareGit), so a fork touches neither the cache
		// nor the object store.
		return
	}
	n, err := s.network(ctx, r.Network)
	if err != nil {
		s.mirrorFailed(ctx, r.Name, "", err)
		return
	}
	m := make(map[string]gitobj.Hash, len(refs))
	for _, ref := range refs {
		m[ref.Name] = gitobj.NewHash(ref.OID)
	}
	s.syncMirror(ctx, n, r.Name, m)
	if err := n.MirrorHEAD(r.Name, r.DefaultBranch); err != nil {
		s.mirrorFailed(ctx, r.Name, "HEAD", err)
	}
}

// Emit calls the event hooks (OnEvent) for an event that committed.
func (s *Service) Emit(ctx context.Context, ev Event) { s.emit(ctx, ev) }

// CheckWritable returns permission_denied unless actor may move r's refs
// (CanMoveRefs).
func CheckWritable(actor *lockstep.Key, r *lockstep.Repo) error { return writable(actor, r) }
