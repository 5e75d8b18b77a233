package checkpoints

import (
	"context"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/workspaces"
)

// Redis is the answer of GET /repos/{workspace}/redis.
type Redis struct {
	Repo     string `json:"repo"`
	Template bool   `json:"template"` // seeded from the base's template RDB
	URL      string `json:"url"`
}

// SetRedis turns Redis branching on (nil: off). Call before serving.
func (s *Service) SetRedis(r lockstep.RedisBrancher) { s.rds = r }

// RedisEnabled reports whether Redis branching is configured.
func (s *Service) RedisEnabled() bool { return s.rds != nil }

// ErrRedisOff is the answer of the Redis route without Redis branching.
func ErrRedisOff() error {
	return lockstep.Errorf(lockstep.ENOTCONFIGURED, "redis branching is off: start lockstep serve with LOCKSTEP_BRANCH_REDIS (or --branch-redis) set to on or to a redis-server binary")
}

// GetRedis returns a workspace's Redis branch (created on first use) with
// its URL. Only the workspace's owner, an admin or CI may read it; a base
// repository has no instance of its own (its template is an RDB file).
func (s *Service) GetRedis(ctx context.Context, actor *lockstep.Key, repoName string) (*Redis, error) {
	r, err := s.repos.Repo(ctx, repoName)
	if err != nil {
		return nil, err
	}
	if r.ForkOf != "" && actor.Role != lockstep.RoleAdmin && actor.Role != lockstep.RoleCI && !actor.Owns(r) {
		return nil, lockstep.Errorf(lockstep.EFORBIDDEN, "only the workspace's owner, CI or an admin may read its redis credentials")
	}
	if s.rds == nil {
		return nil, ErrRedisOff()
	}
	if r.ForkOf == "" {
		return nil, lockstep.Errorf(lockstep.EINVALID, "%s is a base repository: Redis branches belong to workspaces (its template is the RDB file templates/%s.rdb in the Redis branch directory)", r.Name, r.Name)
	}
	var b *lockstep.RedisBranch
	if !r.Movable() {
		// Never re-create the instance of a finished workspace.
		b, err = s.rds.Branch(ctx, r.Name)
		if lockstep.ErrorCode(err) == lockstep.ENOTFOUND {
			return nil, lockstep.Errorf(lockstep.ENOTFOUND, "workspace %s is %s and has no redis branch", r.Name, r.Status)
		}
	} else {
		b, err = s.rds.CreateBranch(ctx, workspaces.RootOf(ctx, s.repos, r.ForkOf), r.Name)
	}
	if err != nil {
		return nil, err
	}
	return &Redis{Repo: r.Name, Template: b.Template, URL: b.URL}, nil
}
