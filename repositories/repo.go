package repositories

import (
	"container/heap"
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/auth"
	"github.com/lockstep-hq/lockstep/gitobj"
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
	n, err := s.network(ctx, r.Network)
	if err != nil {
		return nil, err
	}
	entry := &lockstep.OpEntry{KeyID: actor.ID, KeyName: actor.Name, Op: "repo.create", Repo: name, TraceID: traceID(ctx),
		Details: map[string]any{"default_branch": defaultBranch}, Answer: RepoInfo{Repo: r}}
	defer func() { entry.DurationUS = s.now().Sub(start).Microseconds() }()
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
	if err := actor.InScope(r); err != nil {
		return err
	}
	if sc := actor.Scope; sc != nil && !r.IsWorkspace() {
		return lockstep.Errorf(lockstep.EFORBIDDEN, "key %s is scoped to %s: it may not write base repository %s", actor.Name, sc, r.Name)
	}
	switch actor.Role {
	case lockstep.RoleAdmin:
		return nil
	case lockstep.RoleAgent:
		if r.ForkOf == "" {
			return lockstep.Errorf(lockstep.EFORBIDDEN, "an agent key may not write base repository %s: fork a workspace and promote it", r.Name)
		}
		if !actor.Owns(r) {
			return lockstep.Errorf(lockstep.EFORBIDDEN, "workspace %s belongs to another key", r.Name)
		}
		return nil
	}
	return lockstep.Errorf(lockstep.EFORBIDDEN, "role %s may not write repositories", actor.Role)
}

// CanMoveRefs is the rule of every route that moves a ref of r, directly
// (push, git push, rollback, merge, sync) or indirectly (a promote into
// it, a checkpoint restore, a database restore): CanWrite, and r must be
// active — a promoted, failed or abandoned workspace's refs never move
// again. The store re-checks the status inside the ref's transaction.
func CanMoveRefs(actor *lockstep.Key, r *lockstep.Repo) error {
	if err := CanWrite(actor, r); err != nil {
		return err
	}
	if !r.Movable() {
		return lockstep.Errorf(lockstep.EINVALID, "workspace %s is %s: its refs are kept for review and never move again; create a new workspace to continue", r.Name, r.Status)
	}
	return nil
}

// CanPromote is the rule of a promote of workspace ws into base: the
// caller must be able to move ws's refs (its owner or an admin, ws
// active), and base must accept the landing. A base repository accepts
// it (promote is how agents reach one; the gate decides); a workspace
// base (ws is a fork of a fork) only from a caller who could push to it
// directly — otherwise any agent could fork another agent's workspace
// and land into it.
func CanPromote(actor *lockstep.Key, ws, base *lockstep.Repo) error {
	if !ws.IsWorkspace() {
		return lockstep.Errorf(lockstep.EINVALID, "%s is a base repository, not a workspace: only workspaces are promoted", ws.Name)
	}
	if err := CanWrite(actor, ws); err != nil {
		return lockstep.Errorf(lockstep.EFORBIDDEN, "only the workspace's owner or an admin may promote %s", ws.Name)
	}
	if _, ok := lockstep.Transition(ws.Status, lockstep.StatusPromoted); !ok {
		return lockstep.Errorf(lockstep.EINVALID, "workspace %s is %s, not active", ws.Name, ws.Status)
	}
	if !base.IsWorkspace() {
		if !base.Movable() {
			return lockstep.Errorf(lockstep.EINVALID, "repository %s is %s", base.Name, base.Status)
		}
		return nil
	}
	if err := CanMoveRefs(actor, base); err != nil {
		return lockstep.Errorf(lockstep.ErrorCode(err), "promote %s into workspace %s: %s", ws.Name, base.Name, lockstep.ErrorMessage(err))
	}
	return nil
}

func writable(actor *lockstep.Key, r *lockstep.Repo) error { return CanMoveRefs(actor, r) }

// Resolve turns a revision into a commit of r's network: a full or
// abbreviated (at least 4 hex digits, unique) oid, a branch name of r,
// "refs/…", "HEAD" (the default branch), or "repo:branch" of a repository
// in the same fork network, each optionally followed by git's ancestry
// suffixes: "~N" (N-th first-parent ancestor), "^N" (N-th parent), "^"
// and "~" (the first parent). A name that is both a branch and a hex
// prefix is the branch, as in git. Errors: not_found, invalid_argument
// (malformed, or an ambiguous abbreviation).
func (s *Service) Resolve(ctx context.Context, r *lockstep.Repo, rev string) (gitobj.Hash, error) {
	n, err := s.network(ctx, r.Network)
	if err != nil {
		return gitobj.ZeroHash, err
	}
	base, steps, err := splitRevSuffix(rev)
	if err != nil {
		return gitobj.ZeroHash, err
	}
	h, err := s.resolveBase(ctx, n, r, base, rev)
	if err != nil {
		return gitobj.ZeroHash, err
	}
	for _, st := range steps {
		for range st.count {
			c, err := n.Commit(h)
			if err != nil {
				return gitobj.ZeroHash, missingOr(err, lockstep.Errorf(lockstep.ENOTFOUND, "commit %s not found in %s", h, r.Name))
			}
			p := 1
			if st.op == '^' {
				p = st.parent
			}
			if p == 0 {
				break // ^0 is the commit itself
			}
			if len(c.Parents) < p {
				return gitobj.ZeroHash, lockstep.Errorf(lockstep.ENOTFOUND, "revision %s not found in %s: %s has %d parent(s)", rev, r.Name, h.String()[:12], len(c.Parents))
			}
			h = c.Parents[p-1]
		}
	}
	return h, nil
}

// revStep is one ancestry suffix: '~' count times the first parent, or
// '^' once the parent-th parent.
type revStep struct {
	op     byte
	count  int
	parent int
}

// splitRevSuffix splits "main~2^2" into "main" and its steps. '~' and '^'
// cannot occur in a branch name, so the split is unambiguous.
func splitRevSuffix(rev string) (string, []revStep, error) {
	i := strings.IndexAny(rev, "~^")
	if i < 0 {
		return rev, nil, nil
	}
	base, rest := rev[:i], rev[i:]
	if base == "" {
		return "", nil, lockstep.Errorf(lockstep.EINVALID, "invalid revision %q: nothing before %q", rev, rest[:1])
	}
	var steps []revStep
	for len(rest) > 0 {
		op := rest[0]
		if op != '~' && op != '^' {
			return "", nil, lockstep.Errorf(lockstep.EINVALID, "invalid revision %q: want NAME followed by ~N or ^N", rev)
		}
		j := 1
		for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
			j++
		}
		num := 1
		if j > 1 {
			v, err := strconv.Atoi(rest[1:j])
			if err != nil || v > 100_000 {
				return "", nil, lockstep.Errorf(lockstep.EINVALID, "invalid revision %q: number out of range", rev)
			}
			num = v
		}
		if op == '~' {
			steps = append(steps, revStep{op: '~', count: num})
		} else {
			steps = append(steps, revStep{op: '^', count: 1, parent: num})
		}
		rest = rest[j:]
	}
	return base, steps, nil
}

// missingOr returns nf when err says an object is missing (not_found), and
// err itself otherwise: a read that failed (out of file descriptors, an
// I/O error) is never answered as a missing commit.
func missingOr(err, nf error) error {
	if lockstep.ErrorCode(err) == lockstep.ENOTFOUND || errors.Is(err, gitobj.ErrObjectNotFound) {
		return nf
	}
	return err
}

// resolveBase resolves a revision without ancestry suffixes.
func (s *Service) resolveBase(ctx context.Context, n gitobj.Reader, r *lockstep.Repo, rev, full string) (gitobj.Hash, error) {
	if lockstep.IsOID(rev) {
		h := gitobj.NewHash(rev)
		if _, err := n.Commit(h); err != nil {
			return gitobj.ZeroHash, missingOr(err, lockstep.Errorf(lockstep.ENOTFOUND, "commit %s not found in %s", rev, r.Name))
		}
		if err := s.scopedCommit(ctx, n, r, h); err != nil {
			return gitobj.ZeroHash, err
		}
		return h, nil
	}
	if rev == "HEAD" {
		rev = r.DefaultBranch
	}
	target, branch := r, rev
	other := ""
	if i := strings.IndexByte(rev, ':'); i >= 0 {
		other, branch = rev[:i], rev[i+1:]
	}
	// The ref's name, or "" for a branch name that is not valid (maybe
	// an abbreviated oid, tried below).
	ref := branch
	if !strings.HasPrefix(ref, "refs/") {
		ref = ""
		if lockstep.ValidateBranch(branch) == nil {
			ref = branchRef(branch)
		}
	}
	var cur *lockstep.Ref // repo:branch on a store that reads both at once
	if other != "" {
		var o *lockstep.Repo
		var err error
		if rr, ok := s.store.(repoRefReader); ok && ref != "" && lockstep.ValidateName("repository name", other) == nil {
			o, cur, err = rr.RepoRef(ctx, other, ref)
		} else {
			o, err = s.Repo(ctx, other)
		}
		if err != nil {
			return gitobj.ZeroHash, err
		}
		// A scoped key reaches another repository through repo:branch
		// only within its scope: the repository it named was checked
		// before the body was read, this one is checked here, for every
		// route that resolves a revision (preflight theirs, reads,
		// rollback and edit sources, sync).
		if err := auth.FromContext(ctx).InScope(o); err != nil {
			return gitobj.ZeroHash, err
		}
		if o.Network != r.Network {
			return gitobj.ZeroHash, lockstep.Errorf(lockstep.EINVALID, "%s is not in the fork network of %s", o.Name, r.Name)
		}
		target = o
	}
	if ref == "" {
		if h, ok, err := s.abbrev(ctx, n, r, branch, full); ok || err != nil {
			return h, err
		}
		return gitobj.ZeroHash, lockstep.Errorf(lockstep.EINVALID, "invalid revision %q: want an oid (4 to 40 hex digits), a branch, or repo:branch, optionally with ~N or ^N", full)
	}
	var err error
	if cur == nil {
		var got lockstep.Ref
		if got, err = s.store.Ref(ctx, target.ID, ref); err == nil {
			cur = &got
		}
	}
	if err != nil {
		if lockstep.ErrorCode(err) != lockstep.ENOTFOUND {
			return gitobj.ZeroHash, err
		}
		if h, ok, err := s.abbrev(ctx, n, r, branch, full); ok || err != nil {
			return h, err
		}
		return gitobj.ZeroHash, lockstep.Errorf(lockstep.ENOTFOUND, "revision %s not found in %s", full, target.Name)
	}
	return gitobj.NewHash(cur.OID), nil
}

// abbrev resolves an abbreviated commit oid; ok is false when name is not
// one (not hex, too short, or no such object; for a scoped key, none
// reachable from r's refs).
func (s *Service) abbrev(ctx context.Context, n gitobj.Reader, r *lockstep.Repo, name, full string) (gitobj.Hash, bool, error) {
	if len(name) < gitobj.MinAbbrev || len(name) > 40 || strings.Trim(name, "0123456789abcdef") != "" {
		return gitobj.ZeroHash, false, nil
	}
	var commits []gitobj.Hash
	for _, h := range n.ExpandPrefix(name, 16) {
		if _, err := n.Commit(h); err == nil {
			if err := s.scopedCommit(ctx, n, r, h); err != nil {
				if lockstep.ErrorCode(err) == lockstep.ENOTFOUND {
					continue
				}
				return gitobj.ZeroHash, true, err
			}
			commits = append(commits, h)
		}
	}
	switch len(commits) {
	case 0:
		return gitobj.ZeroHash, false, nil
	case 1:
		return commits[0], true, nil
	}
	names := make([]string, len(commits))
	for i, h := range commits {
		names[i] = h.String()
	}
	return gitobj.ZeroHash, true, lockstep.Errorf(lockstep.EINVALID, "revision %q is ambiguous in %s: it abbreviates %d commits; give more digits", full, r.Name, len(commits)).
		WithDetails(map[string]any{"candidates": names})
}

// restoreCommitKey carries a checkpoint restore's commit to scopedCommit.
type restoreCommitKey struct{}

// scopedSkew is Config.ScopedCommitSkew or its default.
func (s *Service) scopedSkew() time.Duration {
	if s.cfg.ScopedCommitSkew > 0 {
		return s.cfg.ScopedCommitSkew
	}
	return DefaultScopedCommitSkew
}

// scopedCommit returns not_found (as for a missing commit) unless the
// caller may read commit h of r by its id: any key but a scoped one; a
// scoped key only a commit reachable from one of r's refs (r itself was
// checked against its scope). A fork network stores the objects of all
// its repositories together, so an id, full or abbreviated to 4 hex
// digits tried one by one, would otherwise read the commits of
// workspaces outside the scope.
func (s *Service) scopedCommit(ctx context.Context, n gitobj.Reader, r *lockstep.Repo, h gitobj.Hash) error {
	if k := auth.FromContext(ctx); k == nil || k.Scope == nil {
		return nil
	}
	if c, ok := ctx.Value(restoreCommitKey{}).(gitobj.Hash); ok && c == h {
		return nil
	}
	refs, err := s.store.Refs(ctx, r.ID)
	if err != nil {
		return err
	}
	tips := make([]gitobj.Hash, len(refs))
	for i, ref := range refs {
		tips[i] = gitobj.NewHash(ref.OID)
	}
	if ok, err := reachable(ctx, n, tips, h, s.scopedSkew()); ok || err != nil {
		return err
	}
	return lockstep.Errorf(lockstep.ENOTFOUND, "commit %s not found in %s", h, r.Name)
}

// Unmirror removes refs of r from its network's mirror (after the store
// deleted them: a workspace purge). Returns the first failure; the mirror
// is rebuilt from the store at start-up.
func (s *Service) Unmirror(ctx context.Context, r *lockstep.Repo, refs []lockstep.Ref) error {
	n, err := s.network(ctx, r.Network)
	if err != nil {
		return err
	}
	var first error
	for _, ref := range refs {
		if err := n.MirrorRef(r.Name, ref.Name, gitobj.ZeroHash); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// reachable reports whether commit h is reachable from one of tips. It
// walks parents from every tip, newest committer time first, until h is
// met, or until every commit left to walk is older than h by more than
// skew: past that, h cannot be below them unless times run
// backwards along history by more than the skew (then a reachable h is
// missed: refused, never an unreachable one let through). So an
// unreachable h costs the commits newer than it, not the whole history.
func reachable(ctx context.Context, n gitobj.Reader, tips []gitobj.Hash, h gitobj.Hash, skew time.Duration) (bool, error) {
	return newReachWalk(n, tips, skew).reaches(ctx, h)
}

// reachWalk is reachable's walk kept across the questions of one
// request: a scoped key's objects/missing or a fetch's have lines ask
// about many ids, and each question continues the walk where the last
// one stopped, so N questions read the history at most once, not N
// times (N old commits, each older than the whole history, would each
// walk all of it). What the walk has met is reachable whatever the
// floor of the question that met it.
type reachWalk struct {
	n    gitobj.Reader
	skew time.Duration
	q    infoQueue
	seen map[gitobj.Hash]bool // the tips, and the parents of every commit walked
}

func newReachWalk(n gitobj.Reader, tips []gitobj.Hash, skew time.Duration) *reachWalk {
	w := &reachWalk{n: n, skew: skew, seen: map[gitobj.Hash]bool{}}
	for _, t := range tips {
		w.add(t)
	}
	return w
}

func (w *reachWalk) add(c gitobj.Hash) {
	if w.seen[c] {
		return
	}
	w.seen[c] = true
	if ci, err := w.n.Commit(c); err == nil { // a ref naming a tag or a blob: no history to walk
		heap.Push(&w.q, ci)
	}
}

// reaches reports whether commit h is reachable from the walk's tips
// (see reachable).
func (w *reachWalk) reaches(ctx context.Context, h gitobj.Hash) (bool, error) {
	target, err := w.n.Commit(h)
	if err != nil {
		return false, err
	}
	if w.seen[h] {
		return true, nil
	}
	floor := target.Committer.When.Add(-w.skew)
	for w.q.Len() > 0 {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		if w.q[0].Committer.When.Before(floor) {
			break // left for a question about an older commit
		}
		c := heap.Pop(&w.q).(*gitobj.CommitInfo)
		for _, p := range c.Parents {
			w.add(p)
		}
		if w.seen[h] {
			return true, nil
		}
	}
	return false, nil
}

// DefaultScopedCommitSkew is how far committer times may run backwards
// along a history for scopedCommit to still find a commit
// (Config.ScopedCommitSkew, --scoped-commit-skew): its walk stops at
// commits older than the one asked for by more than this.
const DefaultScopedCommitSkew = 24 * time.Hour

// infoQueue is a max-heap of commits on committer time.
type infoQueue []*gitobj.CommitInfo

func (q infoQueue) Len() int           { return len(q) }
func (q infoQueue) Less(i, j int) bool { return q[i].Committer.When.After(q[j].Committer.When) }
func (q infoQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *infoQueue) Push(x any)        { *q = append(*q, x.(*gitobj.CommitInfo)) }
func (q *infoQueue) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}
