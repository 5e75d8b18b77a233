package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
)

// Repo is a repository as the server shows it.
type Repo struct {
	Name          string `json:"name"`
	Network       string `json:"network"`
	ForkOf        string `json:"fork_of,omitempty"`
	DefaultBranch string `json:"default_branch"`
	Status        string `json:"status"`
	Owner         string `json:"owner,omitempty"`
	BaseCommit    string `json:"base_commit,omitempty"`
	Head          string `json:"head,omitempty"`
	CreatedAt     string `json:"created_at"`
}

// Ref is a ref with its oid.
type Ref struct {
	Name string `json:"name"`
	OID  string `json:"oid"`
}

// PushResult is the answer to a push or rollback.
type PushResult struct {
	Commit         string  `json:"commit"`
	Tree           string  `json:"tree"`
	Parent         string  `json:"parent,omitempty"`
	Branch         string  `json:"branch"`
	Changed        bool    `json:"changed"`
	ObjectsWritten int     `json:"objects_written"`
	BytesWritten   int64   `json:"bytes_written"`
	DurationMS     float64 `json:"duration_ms"`
}

// Commit is one commit.
type Commit struct {
	Commit  string   `json:"commit"`
	Tree    string   `json:"tree"`
	Parents []string `json:"parents"`
	Message string   `json:"message"`
	Author  struct {
		Name  string `json:"name"`
		Email string `json:"email"`
		Time  string `json:"time"`
	} `json:"author"`
	Time string `json:"time"`
}

// WriteOptions are the compare-and-swap parameters of a branch write.
type WriteOptions struct {
	Branch     string
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

// CreateRepo creates a base repository (admin only).
func (c *Client) CreateRepo(ctx context.Context, name, defaultBranch string) (*Repo, error) {
	var out Repo
	return &out, c.post(ctx, "/api/v1/repos", map[string]string{"name": name, "default_branch": defaultBranch}, &out)
}

// Repos lists repositories.
func (c *Client) Repos(ctx context.Context) ([]Repo, error) {
	var out struct {
		Repos []Repo `json:"repos"`
	}
	return out.Repos, c.get(ctx, "/api/v1/repos", nil, &out)
}

// Repo shows one repository.
func (c *Client) Repo(ctx context.Context, name string) (*Repo, error) {
	var out Repo
	return &out, c.get(ctx, repoPath(name), nil, &out)
}

// Refs lists a repository's refs.
func (c *Client) Refs(ctx context.Context, repo string) ([]Ref, error) {
	var out struct {
		Refs []Ref `json:"refs"`
	}
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

// PushTar uploads a tar (or tar.gz) worktree.
func (c *Client) PushTar(ctx context.Context, repo string, tar io.Reader, o WriteOptions) (*PushResult, error) {
	var out PushResult
	_, err := c.Request(ctx, http.MethodPut, repoPath(repo, "worktree"), o.query(), tar, "application/x-tar", &out)
	return &out, err
}

// PushTree commits a tree the server already has.
func (c *Client) PushTree(ctx context.Context, repo, tree string, o WriteOptions) (*PushResult, error) {
	q := o.query()
	q.Set("tree", tree)
	var out PushResult
	_, err := c.Request(ctx, http.MethodPut, repoPath(repo, "worktree"), q, nil, "", &out)
	return &out, err
}

// Missing asks which objects the repository's network lacks.
func (c *Client) Missing(ctx context.Context, repo string, oids []string) ([]string, error) {
	var out struct {
		Missing []string `json:"missing"`
	}
	return out.Missing, c.post(ctx, repoPath(repo, "objects", "missing"), map[string]any{"oids": oids}, &out)
}

// UploadStats is the answer to an object upload.
type UploadStats struct {
	ObjectsWritten int   `json:"objects_written"`
	BytesWritten   int64 `json:"bytes_written"`
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
	body := map[string]any{"branch": o.Branch, "to": to, "expect_oid": o.ExpectOID, "message": o.Message, "force": o.Force}
	return &out, c.post(ctx, repoPath(repo, "rollback"), body, &out)
}

// Log lists commits from ref (default branch when empty).
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
	var out struct {
		Commits   []Commit `json:"commits"`
		NextAfter string   `json:"next_after"`
	}
	err := c.get(ctx, repoPath(repo, "commits"), q, &out)
	return out.Commits, out.NextAfter, err
}

// Commit shows one commit.
func (c *Client) Commit(ctx context.Context, repo, rev string) (*Commit, error) {
	var out Commit
	return &out, c.get(ctx, repoPath(repo, "commits", url.PathEscape(rev)), nil, &out)
}

// Archive streams rev's tree as a tar into w and returns the commit.
func (c *Client) Archive(ctx context.Context, repo, rev string, w io.Writer) (string, error) {
	resp, err := c.Request(ctx, http.MethodGet, repoPath(repo, "archive", url.PathEscape(rev)), nil, nil, "", w)
	if err != nil {
		return "", err
	}
	return resp.Header.Get("X-Lockstep-Commit"), nil
}

// ForkResult is the answer to a fork.
type ForkResult struct {
	Name       string  `json:"name"`
	ForkOf     string  `json:"fork_of"`
	BaseCommit string  `json:"base_commit"`
	Owner      string  `json:"owner"`
	Task       string  `json:"task,omitempty"`
	DurationMS float64 `json:"duration_ms"`
}

// Fork creates a workspace of base.
func (c *Client) Fork(ctx context.Context, base, name string) (*ForkResult, error) {
	return c.ForkTask(ctx, base, name, "")
}

// ForkTask creates a workspace with a task label grouping attempts at one
// task ("" for none).
func (c *Client) ForkTask(ctx context.Context, base, name, task string) (*ForkResult, error) {
	var out ForkResult
	body := map[string]string{"name": name}
	if task != "" {
		body["task"] = task
	}
	return &out, c.post(ctx, repoPath(base, "forks"), body, &out)
}

// Edit is one file change of an edit batch: Op "write" (Content, or
// ContentBase64 for bytes) or "delete" (a file or a whole directory).
type Edit struct {
	Op            string  `json:"op"`
	Path          string  `json:"path"`
	Content       *string `json:"content,omitempty"`
	ContentBase64 *string `json:"content_base64,omitempty"`
	Executable    bool    `json:"executable,omitempty"`
}

// WriteFile is the Edit that writes content at path.
func WriteFile(path, content string) Edit { return Edit{Op: "write", Path: path, Content: &content} }

// DeleteFile is the Edit that deletes path.
func DeleteFile(path string) Edit { return Edit{Op: "delete", Path: path} }

// EditFiles commits a batch of edits to a branch as one commit under the
// compare-and-swap rules of o (ExpectOID, or Force to apply onto the
// current tip).
func (c *Client) EditFiles(ctx context.Context, repo string, edits []Edit, o WriteOptions) (*PushResult, error) {
	body := map[string]any{"edits": edits, "branch": o.Branch, "expect_oid": o.ExpectOID, "force": o.Force,
		"message": o.Message, "author": o.Author, "from": o.From}
	var out PushResult
	return &out, c.post(ctx, repoPath(repo, "edits"), body, &out)
}

// Workspace is one workspace in a listing.
type Workspace struct {
	Name       string `json:"name"`
	Owner      string `json:"owner"`
	Status     string `json:"status"`
	Task       string `json:"task,omitempty"`
	Tip        string `json:"tip"`
	BaseCommit string `json:"base_commit"`
	Ahead      int    `json:"ahead"`
	Behind     int    `json:"behind"`
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

// WorkspaceQuery selects a page of workspaces (see GET /workspaces).
type WorkspaceQuery struct {
	Task, Status, After string
	Limit               int
}

// WorkspacePage lists one page of a base's workspaces and the cursor of
// the next page ("" on the last).
func (c *Client) WorkspacePage(ctx context.Context, base string, q WorkspaceQuery) ([]Workspace, string, error) {
	var out struct {
		Workspaces []Workspace `json:"workspaces"`
		NextAfter  string      `json:"next_after"`
	}
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

// Do sends a JSON request to any API path and decodes the answer into a
// generic value (for routes without a typed method yet).
func (c *Client) Do(ctx context.Context, method, path string, body any) (json.RawMessage, error) {
	var raw []byte
	_, err := c.Request(ctx, method, path, nil, body, "", &raw)
	return raw, err
}

// MergeRequest is the body of POST /repos/{repo}/merges.
type MergeRequest struct {
	Ours        string `json:"ours"`
	Theirs      string `json:"theirs"`
	Preflight   bool   `json:"preflight,omitempty"`
	Deep        bool   `json:"deep,omitempty"`
	Materialize bool   `json:"materialize,omitempty"`
	Message     string `json:"message,omitempty"`
	OnConflict  string `json:"on_conflict,omitempty"`
	ExpectOID   string `json:"expect_oid,omitempty"`
	// Renames: nil detects renames (the server's default); false merges a
	// rename as a delete plus an add.
	Renames *bool `json:"renames,omitempty"`
	// Style of a markers merge: "diff3" (default) or "merge".
	Style string `json:"style,omitempty"`
}

// Merge runs a preflight or a materialize; the answer is raw JSON (its
// shape is merge.Response on the server).
func (c *Client) Merge(ctx context.Context, repo string, req MergeRequest) (json.RawMessage, error) {
	return c.Do(ctx, http.MethodPost, repoPath(repo, "merges"), req)
}

// Sync merges the base branch into a workspace.
func (c *Client) Sync(ctx context.Context, ws, expect string) (json.RawMessage, error) {
	body := map[string]any{}
	if expect != "" {
		body["expect_oid"] = expect
	}
	return c.Do(ctx, http.MethodPost, repoPath(ws, "sync"), body)
}

func (c *Client) String() string { return fmt.Sprintf("lockstep client for %s", c.BaseURL) }
