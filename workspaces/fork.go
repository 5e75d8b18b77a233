package workspaces

import (
	"context"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/auth"
	"github.com/lockstep-hq/lockstep/gitobj"
	"github.com/lockstep-hq/lockstep/repositories"
)

// ForkResult is the answer to a fork.
type ForkResult struct {
	Name       string  `json:"name"`
	ForkOf     string  `json:"fork_of"`
	Network    string  `json:"network"`
	BaseCommit string  `json:"base_commit"`
	Owner      string  `json:"owner"`
	Task       string  `json:"task,omitempty"`
	DurationMS float64 `json:"duration_ms"`
}

// MaxTaskBytes bounds a workspace's task label.
const MaxTaskBytes = 200

// ValidateTask checks a task label: at most MaxTaskBytes of printable
// UTF-8 ("" means none).
func ValidateTask(task string) error {
	if len(task) > MaxTaskBytes || !utf8.ValidString(task) || strings.TrimSpace(task) != task {
		return lockstep.Errorf(lockstep.EINVALID, "task label %.64q: want at most %d bytes of UTF-8 without leading or trailing spaces", task, MaxTaskBytes)
	}
	for _, r := range task {
		if !unicode.IsPrint(r) {
			return lockstep.Errorf(lockstep.EINVALID, "task label %.64q: unprintable character %U", task, r)
		}
	}
	return nil
}

// Fork creates a workspace: a repository in base's fork network that
// starts with copies of base's branch refs and shares its object store, so
// it costs the same for 10 files or 100,000. The workspace is owned by the
// key that created it. A fork of a fork joins the same network. Errors:
// not_found, already_exists, invalid_argument, permission_denied. task is
// an optional label grouping attempts at one task.
func (s *Service) Fork(ctx context.Context, actor *lockstep.Key, baseName, name, task string) (*ForkResult, error) {
	return s.ForkWithin(ctx, actor, baseName, name, task, 0)
}

// ForkWithin is Fork bounded by the workspace quota: with maxOwned > 0
// the fork is refused (rate_limited, nothing created) if it would take
// actor to more than maxOwned active workspaces. The store counts inside
// the fork's transaction, so concurrent forks of one key, on any
// replica, cannot pass the bound together (a check before the call
// alone would let them).
func (s *Service) ForkWithin(ctx context.Context, actor *lockstep.Key, baseName, name, task string, maxOwned int) (*ForkResult, error) {
	start := s.now()
	if err := auth.Require(actor, lockstep.RoleAdmin, lockstep.RoleAgent); err != nil {
		return nil, err
	}
	if err := lockstep.ValidateName("workspace name", name); err != nil {
		return nil, err
	}
	if err := ValidateTask(task); err != nil {
		return nil, err
	}
	if sc := actor.Scope; sc != nil {
		// A scoped key's new workspace must fall in its scope: a task
		// scope forks its base for its task (the label defaults to it).
		if sc.Workspace != "" || baseName != sc.Base {
			return nil, lockstep.Errorf(lockstep.EFORBIDDEN, "key %s is scoped to %s: it may not create workspaces outside it", actor.Name, sc)
		}
		if task == "" {
			task = sc.Task
		}
		if task != sc.Task {
			return nil, lockstep.Errorf(lockstep.EFORBIDDEN, "key %s is scoped to %s: its workspaces carry task %q, not %q", actor.Name, sc, sc.Task, task)
		}
	}
	if err := lockstep.ValidateName("repository name", baseName); err != nil {
		return nil, err
	}
	// The base is read, and its branch refs copied, inside the fork's own
	// transaction (one round trip on PostgreSQL): fill completes the log
	// entry and the answer from what the store took from the base.
	ws := &lockstep.Repo{Name: name, Status: lockstep.StatusActive, OwnerKeyID: actor.ID, OwnerName: actor.Name, Task: task}
	entry := &lockstep.OpEntry{KeyID: actor.ID, KeyName: actor.Name, Op: "fork", Repo: name, TraceID: traceID(ctx)}
	var copied []lockstep.Ref
	var out *ForkResult
	fill := func(refs []lockstep.Ref) {
		copied = refs
		var moves []lockstep.RefMove
		for _, ref := range refs {
			moves = append(moves, lockstep.RefMove{Repo: name, Ref: ref.Name, Old: lockstep.ZeroOID, New: ref.OID})
		}
		entry.Refs = moves
		entry.Details = map[string]any{"fork_of": ws.ForkOf, "base_commit": ws.BaseCommit}
		if task != "" {
			entry.Details["task"] = task
		}
		entry.DurationUS = s.now().Sub(start).Microseconds()
		out = &ForkResult{Name: name, ForkOf: ws.ForkOf, Network: ws.Network, BaseCommit: ws.BaseCommit, Owner: actor.Name, Task: task, DurationMS: ms(s.now().Sub(start))}
		entry.Answer = out
	}
	if err := s.store.ForkRepo(ctx, baseName, ws, maxOwned, entry, fill); err != nil {
		return nil, err
	}
	baseCommit := ws.BaseCommit
	s.repos.MirrorNew(ctx, ws, copied)
	d := s.now().Sub(start)
	s.metrics.ObserveOp("fork", "ok", d)
	s.repos.Emit(ctx, repositories.Event{Type: "fork", Repo: ws, Branch: ws.DefaultBranch, Commit: baseCommit, KeyName: actor.Name})
	out.DurationMS = ms(d)
	s.br.AfterFork(ctx, ws.ForkOf, name)
	return out, nil
}

// WorkspaceInfo is one workspace in a base's listing.
type WorkspaceInfo struct {
	Name       string          `json:"name"`
	Owner      string          `json:"owner"`
	Status     lockstep.Status `json:"status"`
	Task       string          `json:"task,omitempty"`
	Tip        string          `json:"tip"`
	BaseCommit string          `json:"base_commit"`
	Ahead      int             `json:"ahead"`
	Behind     int             `json:"behind"`
	CreatedAt  string          `json:"created_at"`
	UpdatedAt  string          `json:"updated_at"`
}

// WorkspaceQuery selects a page of a base's workspaces, by name.
type WorkspaceQuery struct {
	Task   string          // only this task label
	Status lockstep.Status // only this status (lockstep.Statuses)
	After  string          // names after this one
	Limit  int             // page size (default 100, at most MaxWorkspacePage)
}

// MaxWorkspacePage bounds one page of a workspace listing.
const MaxWorkspacePage = 1000

// Workspaces lists one page of the forks of a base with owner, status,
// task, tip and ahead/behind counts against the base's default branch, and
// the name to pass as After for the next page ("" on the last). Filtering
// and paging happen in the store, so a page costs the same however many
// workspaces the base has. A task-scoped caller (the key in ctx) lists its
// task's workspaces only; asking for another task is permission_denied.
func (s *Service) Workspaces(ctx context.Context, baseName string, q WorkspaceQuery) ([]WorkspaceInfo, string, error) {
	if q.Limit == 0 {
		q.Limit = 100
	}
	if q.Limit < 0 || q.Limit > MaxWorkspacePage {
		return nil, "", lockstep.Errorf(lockstep.EINVALID, "limit %d: want 1 to %d", q.Limit, MaxWorkspacePage)
	}
	if q.Status != "" && !q.Status.Valid() {
		return nil, "", lockstep.Errorf(lockstep.EINVALID, "status %q: want one of %v", q.Status, lockstep.Statuses)
	}
	base, err := s.repos.Repo(ctx, baseName)
	if err != nil {
		return nil, "", err
	}
	if k := auth.FromContext(ctx); k != nil && k.Scope != nil && k.Scope.Task != "" {
		// A task-scoped key names its base (in its scope) but sees only
		// the workspaces of its task, as in its list of repositories.
		if q.Task != "" && q.Task != k.Scope.Task {
			return nil, "", lockstep.Errorf(lockstep.EFORBIDDEN, "key %s is scoped to %s: it may not list task %s", k.Name, k.Scope, q.Task)
		}
		q.Task = k.Scope.Task
	}
	forks, err := s.store.ListRepos(ctx, lockstep.RepoFilter{ForkOf: base.Name, Task: q.Task, Status: q.Status, After: q.After, Limit: q.Limit + 1})
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(forks) > q.Limit {
		forks = forks[:q.Limit]
		next = forks[len(forks)-1].Name
	}
	n, err := s.repos.Network(base.Network)
	if err != nil {
		return nil, "", err
	}
	baseTip := gitobj.ZeroHash
	if ref, err := s.store.Ref(ctx, base.ID, branchRef(base.DefaultBranch)); err == nil {
		baseTip = gitobj.NewHash(ref.OID)
	}
	out := []WorkspaceInfo{}
	for _, ws := range forks {
		info := WorkspaceInfo{Name: ws.Name, Owner: ws.OwnerName, Status: ws.Status, Task: ws.Task, BaseCommit: ws.BaseCommit,
			CreatedAt: ws.CreatedAt.Format("2006-01-02T15:04:05Z"), UpdatedAt: ws.UpdatedAt.Format("2006-01-02T15:04:05Z")}
		if ref, err := s.store.Ref(ctx, ws.ID, branchRef(ws.DefaultBranch)); err == nil {
			info.Tip = ref.OID
			if !baseTip.IsZero() {
				info.Ahead, info.Behind, _ = n.AheadBehind(gitobj.NewHash(ref.OID), baseTip)
			}
		}
		out = append(out, info)
	}
	return out, next, nil
}

// Tasks lists a page of the task labels of a base's workspaces with
// counts by status (see lockstep.Store.Tasks).
func (s *Service) Tasks(ctx context.Context, baseName, after string, limit int) ([]lockstep.TaskCount, error) {
	base, err := s.repos.Repo(ctx, baseName)
	if err != nil {
		return nil, err
	}
	return s.store.Tasks(ctx, base.Name, after, limit)
}

// Attempts lists the commits pushed to a workspace, newest first.
func (s *Service) Attempts(ctx context.Context, wsName string, limit int) ([]lockstep.Attempt, error) {
	ws, err := s.repos.Repo(ctx, wsName)
	if err != nil {
		return nil, err
	}
	a, err := s.store.Attempts(ctx, ws.ID, limit)
	if a == nil && err == nil {
		a = []lockstep.Attempt{}
	}
	return a, err
}

// SetStatus changes a workspace's status by the lifecycle table
// (lockstep.StatusTransitions, lockstep.CheckTransition): abandoning
// (DELETE) is for the owner or an admin; marking failed is for reviewers,
// CI and admins; an admin may reopen a failed workspace; promoted and
// abandoned are final; refs are always kept for review. The store swaps
// the status only if it is still the one the rule was checked on; when
// it changed meanwhile (a promote landed, someone else marked it), the
// change is decided again on the new status.
func (s *Service) SetStatus(ctx context.Context, actor *lockstep.Key, wsName string, status lockstep.Status, reason string) (*lockstep.Repo, error) {
	ws, err := s.setStatus(ctx, actor, wsName, status, reason)
	if err == nil && status == lockstep.StatusAbandoned {
		s.br.AfterAbandon(ctx, ws.Name)
	}
	return ws, err
}

// setStatus is SetStatus without the drops that follow an abandon (Purge
// does them itself, to record them in its entry).
func (s *Service) setStatus(ctx context.Context, actor *lockstep.Key, wsName string, status lockstep.Status, reason string) (*lockstep.Repo, error) {
	for attempt := 0; ; attempt++ {
		ws, err := s.repos.Repo(ctx, wsName)
		if err != nil {
			return nil, err
		}
		if err := lockstep.CheckTransition(actor, ws, status); err != nil {
			return nil, err
		}
		entry := &lockstep.OpEntry{KeyID: actor.ID, KeyName: actor.Name, Op: "workspace." + string(status), Repo: ws.Name, TraceID: traceID(ctx),
			Details: map[string]any{"from": string(ws.Status), "to": string(status), "reason": reason}}
		staged := *ws
		staged.Status = status
		entry.Answer = &staged
		err = s.store.SetRepoStatus(ctx, lockstep.StatusChange{RepoID: ws.ID, Repo: ws.Name, From: ws.Status, To: status, Entry: entry})
		if lockstep.ErrorCode(err) == lockstep.EREFCONFLICT && attempt < 3 {
			continue // the status changed since it was read: decide again
		}
		if err != nil {
			return nil, err
		}
		ws.Status = status
		return ws, nil
	}
}
