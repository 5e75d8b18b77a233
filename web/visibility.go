package web

import (
	"context"
	"slices"

	"github.com/lockstep-hq/lockstep"
)

// What a key may read of the operations log, in one place: the API
// (/api/v1/oplog) and the UI (its oplog pages, the failed runs and marks
// of the workspace and task pages, the live events) all go through these.
// An agent key sees its own operations only (a failed run's command,
// stdout and stderr included); admin, reviewer and ci keys see every
// operation.

// opVisible reports whether k may see an operation made by keyID.
func opVisible(k *lockstep.Key, keyID string) bool {
	if k == nil {
		return false
	}
	return k.Role != lockstep.RoleAgent || keyID == k.ID
}

// ownOpsOnly reports whether k sees only its own operations.
func ownOpsOnly(k *lockstep.Key) bool { return k == nil || k.Role == lockstep.RoleAgent }

// visibleOps narrows f to the operations k may see: an agent's filter is
// pinned to its own key, and asking for another key's is refused; a
// scoped key's (whatever its role) to the repositories of its scope, and
// asking for another repository is refused as any route naming it is.
func (s *Server) visibleOps(ctx context.Context, k *lockstep.Key, f lockstep.OpFilter) (lockstep.OpFilter, error) {
	if k == nil {
		return f, lockstep.Errorf(lockstep.EUNAUTH, "missing API key: send Authorization: Bearer <key>")
	}
	if ownOpsOnly(k) {
		if f.KeyID != "" && f.KeyID != k.ID {
			return f, lockstep.Errorf(lockstep.EFORBIDDEN, "an agent key may read only its own operations")
		}
		f.KeyID = k.ID
	}
	if k.Scope != nil {
		repos, err := s.scopeRepos(ctx, k.Scope)
		if err != nil {
			return f, err
		}
		if f.Repo != "" && !slices.Contains(repos, f.Repo) {
			return f, lockstep.Errorf(lockstep.EFORBIDDEN, "key %s is scoped to %s: it may not act on %s", k.Name, k.Scope, f.Repo)
		}
		f.Repos = repos
	}
	return f, nil
}

// scopeRepos names the repositories of a key's scope: its workspace; or
// the base and the base's workspaces labelled with the task
// (lockstep.Key.InScope).
func (s *Server) scopeRepos(ctx context.Context, sc *lockstep.KeyScope) ([]string, error) {
	if sc.Workspace != "" {
		return []string{sc.Workspace}, nil
	}
	wss, err := s.Store.ListRepos(ctx, lockstep.RepoFilter{Network: sc.Base, Task: sc.Task})
	if err != nil {
		return nil, err
	}
	out := []string{sc.Base}
	for _, w := range wss {
		if w.IsWorkspace() && w.Network == sc.Base && w.Task == sc.Task {
			out = append(out, w.Name)
		}
	}
	return out, nil
}
