package workspaces

import (
	"context"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/branches"
)

// The database and Redis branches of a workspace follow its life by the
// rules of package branches (one Room): created in the background right
// after the fork, dropped on abandon, on promote and on purge.

// UseBranches makes the service apply the branch rules through room (the
// one cmd shares with the checkpoints service and the gate's callback).
// Call before serving.
func (s *Service) UseBranches(room *branches.Room) { s.br = room }

// SetRedis turns Redis branching on (nil: off). Call before serving.
func (s *Service) SetRedis(r lockstep.RedisBrancher) { s.br.SetRedis(r) }

// RootOf follows fork_of up to the base repository that holds the
// template (branches.RootOf).
func RootOf(ctx context.Context, repos branches.Repos, name string) string {
	return branches.RootOf(ctx, repos, name)
}

// AfterPromote drops a promoted workspace's database branch, its snapshots
// and its warm spare, and its Redis branch, in the background
// (branches.Room.DropAfterPromote).
func (s *Service) AfterPromote(ctx context.Context, ws string) { s.br.DropAfterPromote(ctx, ws) }

// Purge deletes a workspace at once (DELETE /repos/{ws}?purge=true, owner
// or admin): an active one is abandoned first (which discards its staged
// effects, in the abandon's transaction and entry), then its database
// branch (with its snapshots and spares) and its Redis branch (instance,
// data and RDB snapshots) are dropped, whatever its status (a failed
// workspace keeps both for review until then), then its refs (rows and
// mirror) and checkpoint records go, recorded by one "workspace.purge"
// oplog entry whose details say what happened to each branch
// (branches.Room.Purge). The repository row, its attempts and every
// oplog entry stay.
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
	s.br.Purge(ctx, ws.Name, details)
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
