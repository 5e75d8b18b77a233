package gate

import (
	"context"
	"fmt"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/gitobj"
	"github.com/lockstep-hq/lockstep/merge"
	"github.com/lockstep-hq/lockstep/repositories"
)

// PromoteTarget is a workspace commit and the base branch it would land on.
type PromoteTarget struct {
	Workspace *lockstep.Repo
	Base      *lockstep.Repo
	Branch    string
	Commit    gitobj.Hash
	Tree      gitobj.Hash
	// Tip is the workspace branch's tip when the target was read; the
	// landing requires it unchanged (StatusChange.ExpectRef).
	Tip gitobj.Hash
	// HoldEffectClasses are the effect classes the base branch's policy
	// holds for a reviewer (set by Promote from the policy).
	HoldEffectClasses []string
}

// PromoteTarget resolves what a promote of commit (default: the
// workspace tip) would do. Errors: not_found, invalid_argument when the
// repository is not a workspace or is not active, or when commit is not in
// the history of the workspace's branch.
func (s *Service) Target(ctx context.Context, wsName, commit string) (*PromoteTarget, error) {
	ws, err := s.repos.Repo(ctx, wsName)
	if err != nil {
		return nil, err
	}
	if !ws.IsWorkspace() {
		return nil, lockstep.Errorf(lockstep.EINVALID, "%s is a base repository, not a workspace: only workspaces are promoted", ws.Name)
	}
	if !ws.Movable() {
		return nil, lockstep.Errorf(lockstep.EINVALID, "workspace %s is %s, not active", ws.Name, ws.Status)
	}
	base, err := s.repos.Repo(ctx, ws.ForkOf)
	if err != nil {
		return nil, err
	}
	tip, err := s.repos.Tip(ctx, ws, ws.DefaultBranch)
	if err != nil {
		return nil, err
	}
	h := tip
	if commit != "" {
		if h, err = s.repos.Resolve(ctx, ws, commit); err != nil {
			return nil, err
		}
	}
	n, err := s.repos.Network(ws.Network)
	if err != nil {
		return nil, err
	}
	if commit != "" {
		// The fork network shares one object store, so an oid resolves in
		// every repository of it: require the workspace's own history, or
		// an agent could land another agent's commit through its workspace.
		if tip != h {
			bases, err := merge.MergeBases(ctx, n.Objects(), tip, h)
			if err != nil {
				return nil, err
			}
			if len(bases) != 1 || bases[0] != h {
				return nil, lockstep.Errorf(lockstep.EINVALID, "commit %s is not in the history of %s's branch %s", commit, ws.Name, ws.DefaultBranch)
			}
		}
	}
	ci, err := n.Commit(h)
	if err != nil {
		return nil, err
	}
	return &PromoteTarget{Workspace: ws, Base: base, Branch: base.DefaultBranch, Commit: h, Tree: ci.Tree, Tip: tip}, nil
}

// PromoteChanges lists what the workspace commit changes relative to its
// merge base with the base branch: the workspace's own work, not what the
// base did meanwhile.
func (s *Service) PromoteChanges(ctx context.Context, t *PromoteTarget) ([]gitobj.FileChange, error) {
	n, err := s.repos.Network(t.Base.Network)
	if err != nil {
		return nil, err
	}
	tip, err := s.repos.Tip(ctx, t.Base, t.Branch)
	if lockstep.ErrorCode(err) == lockstep.ENOTFOUND {
		return n.Compare(gitobj.ZeroHash, t.Commit, gitobj.CompareOptions{MaxPatchBytes: 1})
	}
	if err != nil {
		return nil, err
	}
	mb, err := merge.MergeBase(ctx, n.Objects(), tip, t.Commit)
	if err != nil {
		return nil, err
	}
	return n.Compare(mb, t.Commit, gitobj.CompareOptions{MaxPatchBytes: 1})
}

// PromotePreflight merges the commit into the base branch's current tip in
// memory (deep) and writes nothing.
func (s *Service) PromotePreflight(ctx context.Context, t *PromoteTarget) (*merge.Result, error) {
	n, err := s.repos.Network(t.Base.Network)
	if err != nil {
		return nil, err
	}
	tip, err := s.repos.Tip(ctx, t.Base, t.Branch)
	if lockstep.ErrorCode(err) == lockstep.ENOTFOUND {
		return &merge.Result{Clean: true, FastForward: true, Tree: t.Tree}, nil
	}
	if err != nil {
		return nil, err
	}
	return merge.Merge(ctx, merge.NewOverlay(n.Objects()), tip, t.Commit, s.repos.MergeOptions(true))
}

// land materializes the workspace commit into the base branch (the only
// way an agent's work reaches it): re-resolves the branch, fast-forwards or
// merges (mode merge, squash, fast_forward), moves it by compare-and-swap
// and marks the workspace promoted in the same transaction. Promote calls
// it from its landing queue after every rule passed.
// wrap (may be nil) turns the landing's *MergeResponse into the answer
// its log entry carries (repositories.Reason.Wrap).
func (s *Service) land(ctx context.Context, actor *lockstep.Key, t *PromoteTarget, mode, message string, details map[string]any,
	wrap func(inner any) any) (*repositories.MergeResponse, error) {
	start := s.now()
	if message == "" {
		message = fmt.Sprintf("Promote %s into %s", t.Workspace.Name, t.Branch)
	}
	if err := repositories.CanPromote(actor, t.Workspace, t.Base); err != nil {
		return nil, err
	}
	// The base branch moves and the workspace becomes promoted in one
	// transaction: never a landed workspace that is still active (and
	// could land again), never a promoted one whose commit did not land.
	// The change is the lifecycle's one landing transition (active →
	// promoted), a compare-and-swap from the status the target was read in.
	change := &lockstep.StatusChange{RepoID: t.Workspace.ID, Repo: t.Workspace.Name, From: t.Workspace.Status, To: lockstep.StatusPromoted,
		Entry: &lockstep.OpEntry{KeyID: actor.ID, KeyName: actor.Name, Op: "workspace.promoted", Repo: t.Workspace.Name, TraceID: traceID(ctx),
			Details: map[string]any{"into": t.Base.Name + ":" + t.Branch, "commit": t.Commit.String()}},
		// The workspace's staged effects go to the outbox with the move.
		Effects: &lockstep.EffectRelease{Into: t.Base.Name, IntoID: t.Base.ID, Hold: t.HoldEffectClasses, IntoWorkspace: t.Base.IsWorkspace()},
		// A push or rollback of the workspace after the target was read
		// refuses the landing: promoted would close the workspace with an
		// acknowledged write that never lands (or land what it undid).
		ExpectRef: "refs/heads/" + t.Workspace.DefaultBranch, ExpectOID: t.Tip.String()}
	res, err := s.repos.LandCommit(ctx, actor, t.Base, t.Branch, t.Commit, t.Tree, mode, message,
		repositories.Reason{Op: "promote", Start: start, Details: details, Workspace: t.Workspace.Name, Change: change, Wrap: wrap})
	if err != nil {
		return nil, err
	}
	if res.UpToDate {
		return nil, lockstep.Errorf(lockstep.EINVALID, "nothing to promote: %s:%s already contains %s", t.Base.Name, t.Branch, t.Commit.String()[:12])
	}
	t.Workspace.Status = lockstep.StatusPromoted
	return res, nil
}
