package forks

import (
	"context"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/auth"
)

// ForkResult is the answer to a fork.
type ForkResult struct {
	Name       string  `json:"name"`
	ForkOf     string  `json:"fork_of"`
	Network    string  `json:"network"`
	BaseCommit string  `json:"base_commit"`
	Owner      string  `json:"owner"`
	DurationMS float64 `json:"duration_ms"`
}

// Fork creates a workspace: a repository in base's fork network that
// starts with copies of base's branch refs and shares its object store, so
// it costs the same for 10 files or 100,000. The workspace is owned by the
// key that created it. A fork of a fork joins the same network. Errors:
// not_found, already_exists, invalid_argument, permission_denied.
func (s *Service) Fork(ctx context.Context, actor *lockstep.Key, baseName, name string) (*ForkResult, error) {
	start := s.now()
	if err := auth.Require(actor, lockstep.RoleAdmin, lockstep.RoleAgent); err != nil {
		return nil, err
	}
	if err := lockstep.ValidateName("workspace name", name); err != nil {
		return nil, err
	}
	base, err := s.Repo(ctx, baseName)
	if err != nil {
		return nil, err
	}
	refs, err := s.store.Refs(ctx, base.ID)
	if err != nil {
		return nil, err
	}
	var copied []lockstep.Ref
	var moves []lockstep.RefMove
	baseCommit := ""
	for _, ref := range refs {
		if len(ref.Name) < 11 || ref.Name[:11] != "refs/heads/" {
			continue
		}
		copied = append(copied, lockstep.Ref{Name: ref.Name, OID: ref.OID})
		moves = append(moves, lockstep.RefMove{Repo: name, Ref: ref.Name, Old: lockstep.ZeroOID, New: ref.OID})
		if ref.Name == branchRef(base.DefaultBranch) {
			baseCommit = ref.OID
		}
	}
	ws := &lockstep.Repo{Name: name, Network: base.Network, ForkOf: base.Name, DefaultBranch: base.DefaultBranch,
		Status: lockstep.StatusActive, OwnerKeyID: actor.ID, OwnerName: actor.Name, BaseCommit: baseCommit}
	entry := &lockstep.OpEntry{KeyID: actor.ID, KeyName: actor.Name, Op: "fork", Repo: name, TraceID: traceID(ctx), Refs: moves,
		Details: map[string]any{"fork_of": base.Name, "base_commit": baseCommit}}
	entry.DurationUS = s.now().Sub(start).Microseconds()
	if err := s.store.CreateRepo(ctx, ws, copied, entry); err != nil {
		return nil, err
	}
	if n, err := s.Network(ws.Network); err != nil {
		s.mirrorFailed(ctx, name, "", err)
	} else {
		m := make(map[string]plumbing.Hash, len(copied))
		for _, ref := range copied {
			m[ref.Name] = plumbing.NewHash(ref.OID)
		}
		s.syncMirror(ctx, n, name, m)
		if err := n.MirrorHEAD(name, ws.DefaultBranch); err != nil {
			s.mirrorFailed(ctx, name, "HEAD", err)
		}
	}
	d := s.now().Sub(start)
	s.metrics.ObserveOp("fork", "ok", d)
	s.emit(ctx, Event{Type: "fork", Repo: ws, Branch: ws.DefaultBranch, Commit: baseCommit, KeyName: actor.Name})
	return &ForkResult{Name: name, ForkOf: base.Name, Network: ws.Network, BaseCommit: baseCommit, Owner: actor.Name, DurationMS: ms(d)}, nil
}

// WorkspaceInfo is one workspace in a base's listing.
type WorkspaceInfo struct {
	Name       string `json:"name"`
	Owner      string `json:"owner"`
	Status     string `json:"status"`
	Tip        string `json:"tip"`
	BaseCommit string `json:"base_commit"`
	Ahead      int    `json:"ahead"`
	Behind     int    `json:"behind"`
	CreatedAt  string `json:"created_at"`
	UpdatedAt  string `json:"updated_at"`
}

// Workspaces lists the forks of a base with owner, status, tip and
// ahead/behind counts against the base's default branch.
func (s *Service) Workspaces(ctx context.Context, baseName string) ([]WorkspaceInfo, error) {
	base, err := s.Repo(ctx, baseName)
	if err != nil {
		return nil, err
	}
	forks, err := s.store.ListRepos(ctx, lockstep.RepoFilter{ForkOf: base.Name})
	if err != nil {
		return nil, err
	}
	n, err := s.Network(base.Network)
	if err != nil {
		return nil, err
	}
	baseTip := plumbing.ZeroHash
	if ref, err := s.store.Ref(ctx, base.ID, branchRef(base.DefaultBranch)); err == nil {
		baseTip = plumbing.NewHash(ref.OID)
	}
	out := []WorkspaceInfo{}
	for _, ws := range forks {
		info := WorkspaceInfo{Name: ws.Name, Owner: ws.OwnerName, Status: ws.Status, BaseCommit: ws.BaseCommit,
			CreatedAt: ws.CreatedAt.Format("2006-01-02T15:04:05Z"), UpdatedAt: ws.UpdatedAt.Format("2006-01-02T15:04:05Z")}
		if ref, err := s.store.Ref(ctx, ws.ID, branchRef(ws.DefaultBranch)); err == nil {
			info.Tip = ref.OID
			if !baseTip.IsZero() {
				info.Ahead, info.Behind, _ = n.AheadBehind(plumbing.NewHash(ref.OID), baseTip)
			}
		}
		out = append(out, info)
	}
	return out, nil
}

// Attempts lists the commits pushed to a workspace, newest first.
func (s *Service) Attempts(ctx context.Context, wsName string, limit int) ([]lockstep.Attempt, error) {
	ws, err := s.Repo(ctx, wsName)
	if err != nil {
		return nil, err
	}
	a, err := s.store.Attempts(ctx, ws.ID, limit)
	if a == nil && err == nil {
		a = []lockstep.Attempt{}
	}
	return a, err
}

// SetStatus changes a workspace's status. Abandoning (DELETE) is for the
// owner or an admin; marking failed is for reviewers, CI and admins;
// refs are always kept for review.
func (s *Service) SetStatus(ctx context.Context, actor *lockstep.Key, wsName, status, reason string) (*lockstep.Repo, error) {
	ws, err := s.Repo(ctx, wsName)
	if err != nil {
		return nil, err
	}
	if ws.ForkOf == "" {
		return nil, lockstep.Errorf(lockstep.EINVALID, "%s is a base repository, not a workspace", ws.Name)
	}
	switch status {
	case lockstep.StatusAbandoned:
		if actor.Role != lockstep.RoleAdmin && actor.ID != ws.OwnerKeyID {
			return nil, lockstep.Errorf(lockstep.EFORBIDDEN, "only the workspace's owner or an admin may abandon it")
		}
	case lockstep.StatusFailed:
		if err := auth.Require(actor, lockstep.RoleAdmin, lockstep.RoleReviewer, lockstep.RoleCI); err != nil {
			return nil, err
		}
	case lockstep.StatusActive, lockstep.StatusPromoted:
		if err := auth.Require(actor, lockstep.RoleAdmin); err != nil {
			return nil, err
		}
	default:
		return nil, lockstep.Errorf(lockstep.EINVALID, "invalid status %q: want active, failed, abandoned or promoted", status)
	}
	entry := &lockstep.OpEntry{KeyID: actor.ID, KeyName: actor.Name, Op: "workspace." + status, Repo: ws.Name, TraceID: traceID(ctx),
		Details: map[string]any{"from": ws.Status, "to": status, "reason": reason}}
	if err := s.store.SetRepoStatus(ctx, ws.ID, status, entry); err != nil {
		return nil, err
	}
	ws.Status = status
	return ws, nil
}
