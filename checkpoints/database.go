package checkpoints

import (
	"context"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/auth"
)

// Database is the answer of the database routes.
type Database struct {
	Repo     string `json:"repo"`
	Template string `json:"template,omitempty"`
	Database string `json:"database,omitempty"`
	Role     string `json:"role,omitempty"`
	DSN      string `json:"dsn,omitempty"`
}

// Enabled reports whether database branching is configured.
func (s *Service) Enabled() bool { return s.br.DatabaseEnabled() }

// BindTemplate binds a base repository to a template database (admin).
func (s *Service) BindTemplate(ctx context.Context, actor *lockstep.Key, repoName, template string) (*Database, error) {
	// Who may comes before whether it can: an agent learns 403, not
	// whether database branching is configured.
	if err := auth.Require(actor, lockstep.RoleAdmin); err != nil {
		return nil, err
	}
	if !s.br.DatabaseEnabled() {
		return nil, ErrBranchingOff()
	}
	r, err := s.repos.Repo(ctx, repoName)
	if err != nil {
		return nil, err
	}
	if r.ForkOf != "" {
		return nil, lockstep.Errorf(lockstep.EINVALID, "%s is a workspace: bind the template on its base repository %s", r.Name, r.ForkOf)
	}
	if template == "" {
		return nil, lockstep.Errorf(lockstep.EINVALID, "missing \"template\": the name of a database on the branch server")
	}
	start := s.now()
	if err := s.br.Databases().BindTemplate(ctx, r.Name, template); err != nil {
		return nil, err
	}
	e := &lockstep.OpEntry{KeyID: actor.ID, KeyName: actor.Name, Op: "database.bind", Repo: r.Name, TraceID: traceID(ctx),
		DurationUS: s.now().Sub(start).Microseconds(), Details: map[string]any{"template": template}}
	out := &Database{Repo: r.Name, Template: template}
	e.Answer = out
	if err := s.store.AppendOp(ctx, e); err != nil {
		return nil, err
	}
	return out, nil
}

// RefreshTemplate re-copies a base repository's template (admin).
func (s *Service) RefreshTemplate(ctx context.Context, actor *lockstep.Key, repoName string) (*Database, error) {
	if err := auth.Require(actor, lockstep.RoleAdmin); err != nil {
		return nil, err
	}
	if !s.br.DatabaseEnabled() {
		return nil, ErrBranchingOff()
	}
	r, err := s.repos.Repo(ctx, repoName)
	if err != nil {
		return nil, err
	}
	if err := s.br.Databases().RefreshTemplate(ctx, r.Name); err != nil {
		return nil, err
	}
	t, err := s.br.Databases().Template(ctx, r.Name)
	if err != nil {
		return nil, err
	}
	out := &Database{Repo: r.Name, Template: t.Source}
	// The template was re-copied: the log must say so, or the audit
	// chain silently misses a change (the caller learns it failed).
	if err := s.store.AppendOp(ctx, &lockstep.OpEntry{KeyID: actor.ID, KeyName: actor.Name, Op: "database.refresh", Repo: r.Name, TraceID: traceID(ctx), Answer: out}); err != nil {
		return nil, err
	}
	return out, nil
}

// Get returns a repository's database: for a base, its template binding;
// for a workspace, its branch (created on first use) with the DSN. Only
// the workspace's owner, an admin or CI may read a DSN.
func (s *Service) Get(ctx context.Context, actor *lockstep.Key, repoName string) (*Database, error) {
	r, err := s.repos.Repo(ctx, repoName)
	if err != nil {
		return nil, err
	}
	if r.ForkOf != "" && actor.Role != lockstep.RoleAdmin && actor.Role != lockstep.RoleCI && !actor.Owns(r) {
		return nil, lockstep.Errorf(lockstep.EFORBIDDEN, "only the workspace's owner, CI or an admin may read its database credentials")
	}
	if !s.br.DatabaseEnabled() {
		return nil, ErrBranchingOff()
	}
	if r.ForkOf == "" {
		t, err := s.br.Databases().Template(ctx, r.Name)
		if err != nil {
			return nil, err
		}
		return &Database{Repo: r.Name, Template: t.Source}, nil
	}
	b, err := s.br.Database(ctx, r)
	if err != nil {
		return nil, err
	}
	return &Database{Repo: r.Name, Database: b.Database, Role: b.Role, DSN: b.DSN}, nil
}

// AfterPromote refreshes the base's template copy in the background (when
// it has one; branches.Room.RefreshAfterPromote); Close cancels and waits
// for it.
func (s *Service) AfterPromote(ctx context.Context, base string) { s.br.RefreshAfterPromote(ctx, base) }
