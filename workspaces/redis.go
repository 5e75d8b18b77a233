package workspaces

import (
	"context"

	"github.com/lockstep-hq/lockstep"
)

// A workspace's Redis branch follows its life like its database branch:
// created in the background right after the fork (from the template RDB
// of the base it descends from, or empty), dropped when the workspace is
// abandoned. Errors are logged: GET /redis creates a missing branch.

// SetRedis turns Redis branching on (nil: off). Call before serving.
func (s *Service) SetRedis(r lockstep.RedisBrancher) { s.rds = r }

func (s *Service) redisAfterFork(ctx context.Context, base, ws string) {
	if s.rds == nil {
		return
	}
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		defer cancel()
		stop := context.AfterFunc(s.bgCtx, cancel)
		defer stop()
		if _, err := s.rds.CreateBranch(ctx, RootOf(ctx, s.repos, base), ws); err != nil {
			s.log.WarnContext(ctx, "create redis branch", "workspace", ws, "error", err)
			return
		}
		// Abandoned while the instance started: the abandon's drop may
		// have run first, so drop it here (drops are serialized with it).
		if r, err := s.repos.Repo(ctx, ws); err == nil && r.Status == lockstep.StatusAbandoned {
			s.dropRedisAfterAbandon(ctx, ws)
		}
	}()
}

func (s *Service) dropRedisAfterAbandon(ctx context.Context, ws string) {
	if s.rds == nil {
		return
	}
	if err := s.rds.DropBranch(context.WithoutCancel(ctx), ws); err != nil && lockstep.ErrorCode(err) != lockstep.ENOTFOUND {
		s.log.WarnContext(ctx, "drop redis branch", "workspace", ws, "error", err)
	}
}
