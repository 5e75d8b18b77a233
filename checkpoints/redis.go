package checkpoints

import (
	"context"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/branches"
)

// Redis is the answer of GET /repos/{workspace}/redis.
type Redis struct {
	Repo     string `json:"repo"`
	Template bool   `json:"template"` // seeded from the base's template RDB
	URL      string `json:"url"`
}

// SetRedis turns Redis branching on (nil: off). Call before serving.
func (s *Service) SetRedis(r lockstep.RedisBrancher) { s.br.SetRedis(r) }

// RedisEnabled reports whether Redis branching is configured.
func (s *Service) RedisEnabled() bool { return s.br.RedisEnabled() }

// ErrRedisOff is the answer of the Redis route without Redis branching.
var ErrRedisOff = branches.ErrRedisOff

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
	if !s.br.RedisEnabled() {
		return nil, ErrRedisOff()
	}
	if r.ForkOf == "" {
		return nil, lockstep.Errorf(lockstep.EINVALID, "%s is a base repository: Redis branches belong to workspaces (its template is the RDB file templates/%s.rdb in the Redis branch directory)", r.Name, r.Name)
	}
	b, err := s.br.Redis(ctx, r)
	if err != nil {
		return nil, err
	}
	return &Redis{Repo: r.Name, Template: b.Template, URL: b.URL}, nil
}
