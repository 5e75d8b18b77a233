package forks

import (
	"context"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/auth"
)

// CreateRepo creates an empty base repository with its own fork network.
// Only admins create base repositories. Returns already_exists if the name
// is taken.
func (s *Service) CreateRepo(ctx context.Context, actor *lockstep.Key, name, defaultBranch string) (*lockstep.Repo, error) {
	if err := auth.Require(actor, lockstep.RoleAdmin); err != nil {
		return nil, err
	}
	if err := lockstep.ValidateName("repository name", name); err != nil {
		return nil, err
	}
	if defaultBranch == "" {
		defaultBranch = "main"
	}
	if err := lockstep.ValidateBranch(defaultBranch); err != nil {
		return nil, err
	}
	start := s.now()
	r := &lockstep.Repo{Name: name, Network: name, DefaultBranch: defaultBranch, Status: lockstep.StatusActive,
		OwnerKeyID: actor.ID, OwnerName: actor.Name}
	n, err := s.Network(r.Network)
	if err != nil {
		return nil, err
	}
	entry := &lockstep.OpEntry{KeyID: actor.ID, KeyName: actor.Name, Op: "repo.create", Repo: name, TraceID: traceID(ctx),
		Details: map[string]any{"default_branch": defaultBranch}}
	defer func() { entry.DurationUS = s.now().Sub(start).Microseconds() }()
	lockstep.StageResult(ctx, RepoInfo{Repo: r})
	if err := s.store.CreateRepo(ctx, r, nil, entry); err != nil {
		return nil, err
	}
	if err := n.MirrorHEAD(name, defaultBranch); err != nil {
		s.log.ErrorContext(ctx, "mirror HEAD", "repo", name, "error", err)
	}
	return r, nil
}

// Repo returns a repository by name (not_found otherwise).
func (s *Service) Repo(ctx context.Context, name string) (*lockstep.Repo, error) {
	if err := lockstep.ValidateName("repository name", name); err != nil {
		return nil, err
	}
	return s.store.RepoByName(ctx, name)
}

// Repos lists repositories.
func (s *Service) Repos(ctx context.Context, f lockstep.RepoFilter) ([]*lockstep.Repo, error) {
	return s.store.ListRepos(ctx, f)
}

// RepoInfo is a repository with its default branch's head.
type RepoInfo struct {
	*lockstep.Repo
	Head string `json:"head"`
}

// Info returns a repository with its head.
func (s *Service) Info(ctx context.Context, name string) (*RepoInfo, error) {
	r, err := s.Repo(ctx, name)
	if err != nil {
		return nil, err
	}
	info := &RepoInfo{Repo: r}
	if ref, err := s.store.Ref(ctx, r.ID, branchRef(r.DefaultBranch)); err == nil {
		info.Head = ref.OID
	}
	return info, nil
}

// Refs lists a repository's refs.
func (s *Service) Refs(ctx context.Context, name string) ([]lockstep.Ref, error) {
	r, err := s.Repo(ctx, name)
	if err != nil {
		return nil, err
	}
	refs, err := s.store.Refs(ctx, r.ID)
	if refs == nil && err == nil {
		refs = []lockstep.Ref{}
	}
	return refs, err
}

// CanWrite reports whether actor may move refs of r: admins anywhere,
// agents only in the workspaces they own, never a base repository.
func CanWrite(actor *lockstep.Key, r *lockstep.Repo) error {
	switch actor.Role {
	case lockstep.RoleAdmin:
		return nil
	case lockstep.RoleAgent:
		if r.ForkOf == "" {
			return lockstep.Errorf(lockstep.EFORBIDDEN, "an agent key may not write base repository %s: fork a workspace and promote it", r.Name)
		}
		if r.OwnerKeyID != actor.ID {
			return lockstep.Errorf(lockstep.EFORBIDDEN, "workspace %s belongs to another key", r.Name)
		}
		return nil
	}
	return lockstep.Errorf(lockstep.EFORBIDDEN, "role %s may not write repositories", actor.Role)
}

func writable(actor *lockstep.Key, r *lockstep.Repo) error {
	if err := CanWrite(actor, r); err != nil {
		return err
	}
	if r.ForkOf != "" && r.Status != lockstep.StatusActive {
		return lockstep.Errorf(lockstep.EINVALID, "workspace %s is %s: its refs are kept for review, create a new workspace to continue", r.Name, r.Status)
	}
	return nil
}

// Resolve turns a revision into a commit of r's network: a full oid, a
// branch name of r, "refs/…", or "repo:branch" of a repository in the same
// fork network.
func (s *Service) Resolve(ctx context.Context, r *lockstep.Repo, rev string) (plumbing.Hash, error) {
	n, err := s.Network(r.Network)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	if lockstep.IsOID(rev) {
		h := plumbing.NewHash(rev)
		if _, err := n.Commit(h); err != nil {
			return plumbing.ZeroHash, lockstep.Errorf(lockstep.ENOTFOUND, "commit %s not found in %s", rev, r.Name)
		}
		return h, nil
	}
	if rev == "HEAD" {
		rev = r.DefaultBranch
	}
	target, branch := r, rev
	if i := strings.IndexByte(rev, ':'); i >= 0 {
		other, err := s.Repo(ctx, rev[:i])
		if err != nil {
			return plumbing.ZeroHash, err
		}
		if other.Network != r.Network {
			return plumbing.ZeroHash, lockstep.Errorf(lockstep.EINVALID, "%s is not in the fork network of %s", other.Name, r.Name)
		}
		target, branch = other, rev[i+1:]
	}
	ref := branch
	if !strings.HasPrefix(ref, "refs/") {
		if err := lockstep.ValidateBranch(branch); err != nil {
			return plumbing.ZeroHash, lockstep.Errorf(lockstep.EINVALID, "invalid revision %q: want a 40-hex oid, a branch, or repo:branch", rev)
		}
		ref = branchRef(branch)
	}
	cur, err := s.store.Ref(ctx, target.ID, ref)
	if err != nil {
		if lockstep.ErrorCode(err) == lockstep.ENOTFOUND {
			return plumbing.ZeroHash, lockstep.Errorf(lockstep.ENOTFOUND, "revision %s not found in %s", rev, target.Name)
		}
		return plumbing.ZeroHash, err
	}
	return plumbing.NewHash(cur.OID), nil
}
