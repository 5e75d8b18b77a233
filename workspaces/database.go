package workspaces

import (
	"context"
	"strings"

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
// effects, in the abandon's transaction and entry), then its database
// branch (with its snapshots and spares) and its Redis branch (instance,
// data and RDB snapshots) are dropped, whatever its status (a failed
// workspace keeps both for review until then), then its refs (rows and
// mirror) and checkpoint records go, recorded by one "workspace.purge"
// oplog entry whose details say what happened to each branch
// ("dropped", "none", "off" when branching is not configured, or
// "error: …"; a drop that failed is logged and the purge goes on: the
// refs must not outlive the request because a branch server is down).
// The repository row, its attempts and every oplog entry stay.
func (s *Service) Purge(ctx context.Context, actor *lockstep.Key, wsName string) (*lockstep.Repo, error) {
	return s.purge(ctx, actor, wsName, "deleted")
}

// purge is Purge with the reason its entries record (the abandon's and
// the purge's details.reason): "deleted" for a request, the policy for
// the retention sweeper.
func (s *Service) purge(ctx context.Context, actor *lockstep.Key, wsName, reason string) (*lockstep.Repo, error) {
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
		if ws, err = s.setStatus(ctx, actor, wsName, lockstep.StatusAbandoned, reason); err != nil {
			return nil, err
		}
	}
	details := map[string]any{"status": string(ws.Status), "reason": reason}
	if s.dbs == nil {
		details["database_branch"] = "off"
	} else {
		details["database_branch"] = dropOutcome(s.dbs.DropBranch(context.WithoutCancel(ctx), ws.Name))
	}
	if s.rds == nil {
		details["redis_branch"] = "off"
	} else {
		details["redis_branch"] = dropOutcome(s.rds.DropBranch(context.WithoutCancel(ctx), ws.Name))
	}
	for _, k := range []string{"database_branch", "redis_branch"} {
		if v := details[k].(string); strings.HasPrefix(v, "error") {
			s.log.WarnContext(ctx, "purge: drop "+k, "workspace", ws.Name, "error", v)
		}
	}
	entry := &lockstep.OpEntry{KeyID: actor.ID, KeyName: actor.Name, Op: "workspace.purge", Repo: ws.Name, TraceID: traceID(ctx), Details: details}
	refs, err := s.store.PurgeRepo(ctx, ws.ID, entry)
	if err != nil {
		return nil, err
	}
	if err := s.repos.Unmirror(ctx, ws, refs); err != nil {
		s.log.WarnContext(ctx, "purge: unmirror refs", "workspace", ws.Name, "error", err)
	}
	return ws, nil
}

// dropOutcome names the result of a branch drop for the purge entry.
func dropOutcome(err error) string {
	switch {
	case err == nil:
		return "dropped"
	case lockstep.ErrorCode(err) == lockstep.ENOTFOUND:
		return "none"
	default:
		return "error: " + err.Error()
	}
}
