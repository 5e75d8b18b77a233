package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/lockstep-hq/lockstep/api"
)

// Names kept from before package api: each is the api wire type.
type (
	Repo           = api.RepoInfo
	Ref            = api.Ref
	PushResult     = api.PushResult
	Commit         = api.Commit
	UploadStats    = api.UploadStats
	ForkResult     = api.ForkResult
	Edit           = api.Edit
	Workspace      = api.Workspace
	WorkspaceQuery = api.WorkspaceQuery
	MergeRequest   = api.MergeRequest
)

// WriteOptions are the compare-and-swap parameters of a branch write.
type WriteOptions struct {
	Branch string
	// ExpectOID: the oid the branch must still have (api.ZeroOID: it must
	// not exist); a mismatch is ref_conflict with the current oid in the
	// details. Writing an existing branch without it (or Force) is
	// precondition_required.
	ExpectOID  string
	Force      bool
	Message    string
	Author     string
	AllowEmpty bool
	From       string // start a new branch from this revision
}

func (o WriteOptions) query() url.Values {
	q := url.Values{}
	set := func(k, v string) {
		if v != "" {
			q.Set(k, v)
		}
	}
	set("branch", o.Branch)
	set("expect_oid", o.ExpectOID)
	set("message", o.Message)
	set("author", o.Author)
	set("from", o.From)
	if o.Force {
		q.Set("force", "true")
	}
	if o.AllowEmpty {
		q.Set("allow_empty", "true")
	}
	return q
}

func repoPath(repo string, rest ...string) string {
	p := "/api/v1/repos/" + url.PathEscape(repo)
	for _, r := range rest {
		p += "/" + r
	}
	return p
}

// CreateRepo creates a base repository (admin only; already_exists when
// the name is taken, invalid_argument for a bad name).
func (c *Client) CreateRepo(ctx context.Context, name, defaultBranch string) (*Repo, error) {
	var out Repo
	return &out, c.post(ctx, "/api/v1/repos", api.RepoCreateRequest{Name: name, DefaultBranch: defaultBranch}, &out)
}

// Repos lists repositories.
func (c *Client) Repos(ctx context.Context) ([]*api.Repo, error) {
	return c.RepoList(ctx, api.RepoQuery{})
}

// RepoList lists the repositories q selects (a base's workspaces with
// ForkOf, one fork network with Network).
func (c *Client) RepoList(ctx context.Context, q api.RepoQuery) ([]*api.Repo, error) {
	v := url.Values{}
	if q.ForkOf != "" {
		v.Set("fork_of", q.ForkOf)
	}
	if q.Network != "" {
		v.Set("network", q.Network)
	}
	var out api.RepoList
	return out.Repos, c.get(ctx, "/api/v1/repos", v, &out)
}

// Repo shows one repository with its default branch's tip (not_found).
func (c *Client) Repo(ctx context.Context, name string) (*Repo, error) {
	var out Repo
	return &out, c.get(ctx, repoPath(name), nil, &out)
}

// Abandon marks a workspace abandoned (DELETE /repos/{workspace}); its
// refs are kept. reason may be "".
func (c *Client) Abandon(ctx context.Context, ws, reason string) (*api.Repo, error) {
	var q url.Values
	if reason != "" {
		q = url.Values{"reason": {reason}}
	}
	var out api.Repo
	return &out, c.del(ctx, repoPath(ws), q, &out)
}

// DeleteWorkspace deletes a workspace at once (DELETE
// /repos/{workspace}?purge=true; owner or admin): abandoned if active,
// then its refs, database branch, checkpoint records and staged effects
// go; its oplog entries stay.
func (c *Client) DeleteWorkspace(ctx context.Context, ws string) (*api.Repo, error) {
	var out api.Repo
	return &out, c.del(ctx, repoPath(ws), url.Values{"purge": {"true"}}, &out)
}

// SetStatus moves a workspace to a status (active, failed, abandoned;
// invalid_argument otherwise).
func (c *Client) SetStatus(ctx context.Context, ws, status, reason string) (*api.Repo, error) {
	var out api.Repo
	return &out, c.post(ctx, repoPath(ws, "status"), api.StatusRequest{Status: status, Reason: reason}, &out)
}

// Refs lists a repository's refs.
func (c *Client) Refs(ctx context.Context, repo string) ([]Ref, error) {
	var out api.RefList
	return out.Refs, c.get(ctx, repoPath(repo, "refs"), nil, &out)
}

// Ref returns the oid of refs/heads/branch, or "" when it does not exist.
func (c *Client) Ref(ctx context.Context, repo, branch string) (string, error) {
	refs, err := c.Refs(ctx, repo)
	if err != nil {
		return "", err
	}
	for _, r := range refs {
		if r.Name == "refs/heads/"+branch {
			return r.OID, nil
		}
	}
	return "", nil
}

// PushTar uploads a tar (or tar.gz) worktree (PUT /worktree): one commit
// of its tree under the compare-and-swap rules of o.
func (c *Client) PushTar(ctx context.Context, repo string, tar io.Reader, o WriteOptions) (*PushResult, error) {
	var out PushResult
	_, err := c.Request(ctx, http.MethodPut, repoPath(repo, "worktree"), o.query(), tar, "application/x-tar", &out)
	return &out, err
}

// PushTree commits a tree the server already has (PUT /worktree?tree=;
// not_found when it lacks the tree or an object under it).
func (c *Client) PushTree(ctx context.Context, repo, tree string, o WriteOptions) (*PushResult, error) {
	q := o.query()
	q.Set("tree", tree)
	var out PushResult
	_, err := c.Request(ctx, http.MethodPut, repoPath(repo, "worktree"), q, nil, "", &out)
	return &out, err
}

// Missing asks which objects the repository's network lacks.
func (c *Client) Missing(ctx context.Context, repo string, oids []string) ([]string, error) {
	var out api.MissingResult
	return out.Missing, c.post(ctx, repoPath(repo, "objects", "missing"), api.MissingRequest{OIDs: oids}, &out)
}

// UploadPack sends a packfile of objects.
func (c *Client) UploadPack(ctx context.Context, repo string, pack io.Reader) (*UploadStats, error) {
	var out UploadStats
	_, err := c.Request(ctx, http.MethodPost, repoPath(repo, "objects"), nil, pack, "application/x-git-packfile", &out)
	return &out, err
}

// UploadPackFunc is UploadPack with a pack that can be produced again, so
// the upload is retried (objects are content-addressed: sending them twice
// stores nothing twice).
func (c *Client) UploadPackFunc(ctx context.Context, repo string, pack BodyFunc) (*UploadStats, error) {
	var out UploadStats
	_, err := c.Request(ctx, http.MethodPost, repoPath(repo, "objects"), nil, pack, "application/x-git-packfile", &out)
	return &out, err
}

// Rollback makes a commit with rev to's tree on the branch.
func (c *Client) Rollback(ctx context.Context, repo, to string, o WriteOptions) (*PushResult, error) {
	var out PushResult
	body := api.RollbackRequest{Branch: o.Branch, To: to, ExpectOID: o.ExpectOID, Message: o.Message, Force: o.Force}
	return &out, c.post(ctx, repoPath(repo, "rollback"), body, &out)
}

// Log lists commits from ref (default branch when empty) and the cursor
// of the next page ("" on the last).
func (c *Client) Log(ctx context.Context, repo, ref string, limit int, after string) ([]Commit, string, error) {
	q := url.Values{}
	if ref != "" {
		q.Set("ref", ref)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if after != "" {
		q.Set("after", after)
	}
	var out api.CommitPage
	err := c.get(ctx, repoPath(repo, "commits"), q, &out)
	return out.Commits, out.NextAfter, err
}

// Commit shows one commit (not_found for an unknown revision).
func (c *Client) Commit(ctx context.Context, repo, rev string) (*Commit, error) {
	var out Commit
	return &out, c.get(ctx, repoPath(repo, "commits", url.PathEscape(rev)), nil, &out)
}

// Tree lists the entries of the directory at path ("" for the root) of
// rev's tree.
func (c *Client) Tree(ctx context.Context, repo, rev, path string) ([]api.TreeEntry, error) {
	var q url.Values
	if path != "" {
		q = url.Values{"path": {path}}
	}
	var out api.TreeList
	return out.Entries, c.get(ctx, repoPath(repo, "tree", url.PathEscape(rev)), q, &out)
}

// Blob streams the file at path of rev into w and says what it is
// (not_found for a missing path).
func (c *Client) Blob(ctx context.Context, repo, rev, path string, w io.Writer) (*api.BlobInfo, error) {
	p := repoPath(repo, "blob", url.PathEscape(rev))
	for _, seg := range splitPath(path) {
		p += "/" + url.PathEscape(seg)
	}
	resp, err := c.Request(ctx, http.MethodGet, p, nil, nil, "", w)
	if err != nil {
		return nil, err
	}
	return &api.BlobInfo{Hash: resp.Header.Get("X-Lockstep-Blob"), Mode: resp.Header.Get("X-Lockstep-Mode"), Size: resp.ContentLength}, nil
}

func splitPath(p string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(p); i++ {
		if i == len(p) || p[i] == '/' {
			if i > start {
				out = append(out, p[start:i])
			}
			start = i + 1
		}
	}
	return out
}

// Archive streams rev's tree as a tar into w and returns the commit.
func (c *Client) Archive(ctx context.Context, repo, rev string, w io.Writer) (string, error) {
	resp, err := c.Request(ctx, http.MethodGet, repoPath(repo, "archive", url.PathEscape(rev)), nil, nil, "", w)
	if err != nil {
		return "", err
	}
	return resp.Header.Get("X-Lockstep-Commit"), nil
}

// Compare diffs two revisions of the fork network (base..head, each an
// oid, a branch or repo:branch).
func (c *Client) Compare(ctx context.Context, repo, base, head string) (*api.CompareResult, error) {
	q := url.Values{}
	if base != "" {
		q.Set("base", base)
	}
	if head != "" {
		q.Set("head", head)
	}
	var out api.CompareResult
	return &out, c.get(ctx, repoPath(repo, "compare"), q, &out)
}

// Fork creates a workspace of base.
func (c *Client) Fork(ctx context.Context, base, name string) (*ForkResult, error) {
	return c.ForkTask(ctx, base, name, "")
}

// ForkTask creates a workspace with a task label grouping attempts at one
// task ("" for none). Returns already_exists when the name is taken.
func (c *Client) ForkTask(ctx context.Context, base, name, task string) (*ForkResult, error) {
	var out ForkResult
	return &out, c.post(ctx, repoPath(base, "forks"), api.ForkRequest{Name: name, Task: task}, &out)
}

// WriteFile is the Edit that writes content at path.
func WriteFile(path, content string) Edit { return Edit{Op: "write", Path: path, Content: &content} }

// DeleteFile is the Edit that deletes path.
func DeleteFile(path string) Edit { return Edit{Op: "delete", Path: path} }

// EditFiles commits a batch of edits to a branch as one commit under the
// compare-and-swap rules of o (ExpectOID, or Force to apply onto the
// current tip).
func (c *Client) EditFiles(ctx context.Context, repo string, edits []Edit, o WriteOptions) (*PushResult, error) {
	body := api.EditRequest{Edits: edits, Branch: o.Branch, ExpectOID: o.ExpectOID, Force: o.Force,
		Message: o.Message, Author: o.Author, From: o.From}
	var out PushResult
	return &out, c.post(ctx, repoPath(repo, "edits"), body, &out)
}

// Workspaces lists a base's workspaces.
func (c *Client) Workspaces(ctx context.Context, base string) ([]Workspace, error) {
	return c.TaskWorkspaces(ctx, base, "")
}

// TaskWorkspaces lists a base's workspaces with one task label ("" for
// all), every page.
func (c *Client) TaskWorkspaces(ctx context.Context, base, task string) ([]Workspace, error) {
	all := []Workspace{}
	after := ""
	for {
		page, next, err := c.WorkspacePage(ctx, base, WorkspaceQuery{Task: task, After: after, Limit: 1000})
		if err != nil {
			return nil, err
		}
		all = append(all, page...)
		if next == "" {
			return all, nil
		}
		after = next
	}
}

// WorkspacePage lists one page of a base's workspaces and the cursor of
// the next page ("" on the last).
func (c *Client) WorkspacePage(ctx context.Context, base string, q WorkspaceQuery) ([]Workspace, string, error) {
	var out api.WorkspacePage
	v := url.Values{}
	for k, s := range map[string]string{"task": q.Task, "status": q.Status, "after": q.After} {
		if s != "" {
			v.Set(k, s)
		}
	}
	if q.Limit > 0 {
		v.Set("limit", fmt.Sprint(q.Limit))
	}
	err := c.get(ctx, repoPath(base, "workspaces"), v, &out)
	return out.Workspaces, out.NextAfter, err
}

// Attempts lists the commits pushed to a workspace, newest first
// (limit 0: the server's default of 100).
func (c *Client) Attempts(ctx context.Context, ws string, limit int) ([]api.Attempt, error) {
	var q url.Values
	if limit > 0 {
		q = url.Values{"limit": {strconv.Itoa(limit)}}
	}
	var out api.AttemptList
	return out.Attempts, c.get(ctx, repoPath(ws, "attempts"), q, &out)
}

// Do sends a JSON request to any API path and returns the raw answer.
func (c *Client) Do(ctx context.Context, method, path string, body any) (json.RawMessage, error) {
	var raw []byte
	_, err := c.Request(ctx, method, path, nil, body, "", &raw)
	return raw, err
}

// MergeBranches runs a preflight (req.Preflight: computes, writes
// nothing) or a materialize (req.Materialize: writes the merge and moves
// ours by compare-and-swap). Conflicts are in the answer, not an error,
// unless a materialize without on_conflict meets them (merge_conflict).
func (c *Client) MergeBranches(ctx context.Context, repo string, req MergeRequest) (*api.MergeResponse, error) {
	var out api.MergeResponse
	return &out, c.post(ctx, repoPath(repo, "merges"), req, &out)
}

// PreflightBatch preflights many workspaces of base in one call (POST
// /repos/{base}/merges/preflight): one item per workspace, each with the
// single preflight's answer or its error. More workspaces than the
// server's --preflight-batch-max is invalid_argument.
func (c *Client) PreflightBatch(ctx context.Context, base string, req api.PreflightBatchRequest) (*api.PreflightBatchResponse, error) {
	var out api.PreflightBatchResponse
	return &out, c.post(ctx, repoPath(base, "merges/preflight"), req, &out)
}

// Merge is MergeBranches answering raw JSON.
//
// Deprecated: use MergeBranches (kept for the bench until it moves).
func (c *Client) Merge(ctx context.Context, repo string, req MergeRequest) (json.RawMessage, error) {
	return c.Do(ctx, http.MethodPost, repoPath(repo, "merges"), req)
}

// Sync merges the base branch into a workspace (req may be zero).
func (c *Client) Sync(ctx context.Context, ws string, req api.SyncRequest) (*api.MergeResponse, error) {
	var out api.MergeResponse
	return &out, c.post(ctx, repoPath(ws, "sync"), req, &out)
}

func (c *Client) String() string { return fmt.Sprintf("lockstep client for %s", c.BaseURL) }

// Usage returns the storage of repo's fork network (GET
// /repos/{repo}/usage; admins: permission_denied otherwise, not_found if
// repo does not exist).
func (c *Client) Usage(ctx context.Context, repo string) (*api.Usage, error) {
	var out api.Usage
	return &out, c.get(ctx, repoPath(repo, "usage"), nil, &out)
}

// Retention is a base repository's retention policy (GET
// /api/v1/repos/{repo}/retention; admin only).
func (c *Client) Retention(ctx context.Context, repo string) (*api.Retention, error) {
	var out api.Retention
	return &out, c.get(ctx, "/api/v1/repos/"+url.PathEscape(repo)+"/retention", nil, &out)
}

// SetRetention sets a base repository's retention policy (PUT
// /api/v1/repos/{repo}/retention; admin only). Ages are "0" (off), days
// ("7d") or a Go duration ("36h").
func (c *Client) SetRetention(ctx context.Context, repo string, p api.Retention) (*api.Retention, error) {
	var out api.Retention
	return &out, c.put(ctx, "/api/v1/repos/"+url.PathEscape(repo)+"/retention", p, &out)
}
