package workspaces

import (
	"context"

	"github.com/lockstep-hq/lockstep"
)

// The database branch of a workspace follows its life: created in the
// background right after the fork when the base (or, for a fork of a
// fork, the base it descends from) has a template; dropped when the
// workspace is abandoned. Errors are logged, never returned: the fork or
// abandon already committed, and GET /database creates a missing branch.

// RootOf follows fork_of up to the base repository that holds the
// template (a fork of a fork branches from the same template).
func RootOf(ctx context.Context, repos interface {
	Repo(ctx context.Context, name string) (*lockstep.Repo, error)
}, name string) string {
	for i := 0; i < 16; i++ {
		r, err := repos.Repo(ctx, name)
		if err != nil || r.ForkOf == "" {
			return name
		}
		name = r.ForkOf
	}
	return name
}

// EnsureBranch returns ws's database branch, creating it from the
// template of base's root when it does not exist (a concurrent create
// returns the branch the other made). Errors: those of lockstep.Brancher.
func EnsureBranch(ctx context.Context, dbs lockstep.Brancher, repos interface {
	Repo(ctx context.Context, name string) (*lockstep.Repo, error)
}, base, ws string) (*lockstep.DatabaseBranch, error) {
	b, err := dbs.Branch(ctx, ws)
	if lockstep.ErrorCode(err) != lockstep.ENOTFOUND {
		return b, err
	}
	b, err = dbs.CreateBranch(ctx, RootOf(ctx, repos, base), ws)
	if lockstep.ErrorCode(err) == lockstep.ECONFLICT {
		return dbs.Branch(ctx, ws) // created concurrently
	}
	return b, err
}

// branchAfterFork creates the new workspace's database branch in the
// background; Close cancels and waits for it.
func (s *Service) branchAfterFork(ctx context.Context, base, ws string) {
	if s.dbs == nil {
		return
	}
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		defer cancel()
		stop := context.AfterFunc(s.bgCtx, cancel)
		defer stop()
		if _, err := s.dbs.Template(ctx, RootOf(ctx, s.repos, base)); err != nil {
			return
		}
		if _, err := EnsureBranch(ctx, s.dbs, s.repos, base, ws); err != nil {
			s.log.WarnContext(ctx, "create database branch", "workspace", ws, "error", err)
		}
	}()
}

// AfterPromote drops a promoted workspace's database branch, its snapshots
// and its warm spare in the background: a promoted workspace takes no
// more writes and its checkpoints can no longer be restored, so they only
// held databases on the branch server (issue 27: six workspaces left
// twenty databases behind). The gate calls it after a promote landed.
func (s *Service) AfterPromote(ctx context.Context, ws string) {
	if s.dbs == nil && s.rds == nil {
		return
	}
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		defer cancel()
		stop := context.AfterFunc(s.bgCtx, cancel)
		defer stop()
		s.dropAfterAbandon(ctx, ws)
		s.dropRedisAfterAbandon(ctx, ws) // its Redis branch likewise
	}()
}

// dropAfterAbandon drops an abandoned workspace's database branch.
func (s *Service) dropAfterAbandon(ctx context.Context, ws string) {
	if s.dbs == nil {
		return
	}
	if err := s.dbs.DropBranch(context.WithoutCancel(ctx), ws); err != nil && lockstep.ErrorCode(err) != lockstep.ENOTFOUND {
		s.log.WarnContext(ctx, "drop database branch", "workspace", ws, "error", err)
	}
}

// Purge deletes a workspace at once (DELETE /repos/{ws}?purge=true, owner
// or admin): an active one is abandoned first (which discards its staged
// effects and drops its database branch), then its refs (rows and mirror)
// and checkpoint records go, recorded by a "workspace.purge" oplog entry.
// The repository row, its attempts and every oplog entry stay.
func (s *Service) Purge(ctx context.Context, actor *lockstep.Key, wsName string) (*lockstep.Repo, error) {
	ws, err := s.repos.Repo(ctx, wsName)
	if err != nil {
		return nil, err
	}
	if !ws.IsWorkspace() {
		return nil, lockstep.Errorf(lockstep.EINVALID, "%s is a base repository: only workspaces are deleted", ws.Name)
	}
	if actor.Role != lockstep.RoleAdmin && !actor.Owns(ws) {
		return nil, lockstep.Errorf(lockstep.EFORBIDDEN, "only the workspace's owner or an admin may delete %s", ws.Name)
	}
	if ws.Status == lockstep.StatusActive {
		if ws, err = s.SetStatus(ctx, actor, wsName, lockstep.StatusAbandoned, "deleted"); err != nil {
			return nil, err
		}
	} else {
		s.dropAfterAbandon(ctx, ws.Name)
	}
	entry := &lockstep.OpEntry{KeyID: actor.ID, KeyName: actor.Name, Op: "workspace.purge", Repo: ws.Name, TraceID: traceID(ctx),
		Details: map[string]any{"status": string(ws.Status)}}
	refs, err := s.store.PurgeRepo(ctx, ws.ID, entry)
	if err != nil {
		return nil, err
	}
	if err := s.repos.Unmirror(ctx, ws, refs); err != nil {
		s.log.WarnContext(ctx, "purge: unmirror refs", "workspace", ws.Name, "error", err)
	}
	return ws, nil
}
