package agentmcp

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lockstep-hq/lockstep"
)

// syncAdvice is the next step of a merge_conflict: followed literally it
// ends with a workspace whose merge_preflight is clean.
const syncAdvice = "the workspace conflicts with its base (the base moved since the fork). Resolve it in the workspace: " +
	"(1) call sync with on_conflict=\"markers\": the merge of the base, with conflict markers in the conflicting files, becomes a commit on the branch conflicts/<branch> (the answer's side_ref and commit); " +
	"(2) for each conflicting file, file_read it with rev=\"conflicts/<branch>\", and write the resolved content (no <<<<<<< ======= >>>>>>> lines left) with files_edit branch=\"conflicts/<branch>\" expect_oid=<that branch's tip, the commit of step 1, then of each write>; " +
	"(3) call sync with resolved=true: the workspace's branch moves to the resolved merge (compare-and-swap); merge_preflight is then clean"

type syncIn struct {
	Workspace  string `json:"workspace" jsonschema:"the workspace to bring up to date with its base"`
	ExpectOID  string `json:"expect_oid,omitempty" jsonschema:"the workspace tip you last read (compare-and-swap); omit to merge into whatever is current (a merge never drops your commits)"`
	OnConflict string `json:"on_conflict,omitempty" jsonschema:"fail (default: nothing is written, the conflicts are listed) or markers (the merge with conflict markers is committed to the branch conflicts/<branch> for you to resolve)"`
	Resolved   bool   `json:"resolved,omitempty" jsonschema:"after resolving the markers on conflicts/<branch>: move the workspace's branch to that resolved merge"`
}

type fileTreeIn struct {
	Workspace string `json:"workspace" jsonschema:"the workspace name"`
	Path      string `json:"path,omitempty" jsonschema:"directory to start at; empty for the root"`
	Rev       string `json:"rev,omitempty" jsonschema:"branch, commit oid or revision; default: the default branch"`
	Max       int    `json:"max_entries,omitempty" jsonschema:"stop after this many files (default 2000, at most 20000)"`
}

type fileReplaceIn struct {
	Workspace string `json:"workspace" jsonschema:"the workspace name"`
	Path      string `json:"path" jsonschema:"file path relative to the repository root"`
	Old       string `json:"old" jsonschema:"the exact text to replace (with enough context to be unique)"`
	New       string `json:"new" jsonschema:"the replacement text"`
	All       bool   `json:"all,omitempty" jsonschema:"replace every occurrence; default: old must occur exactly once"`
	ExpectOID string `json:"expect_oid,omitempty" jsonschema:"required (or force): the branch tip you last read; the file is read at it and the commit is refused if the branch moved"`
	Force     bool   `json:"force,omitempty" jsonschema:"instead of expect_oid: read and write whatever the branch is now"`
	Message   string `json:"message,omitempty" jsonschema:"commit message"`
}

type repoCreateIn struct {
	Name          string `json:"name" jsonschema:"the new repository's name: lowercase letters, digits, . _ -"`
	DefaultBranch string `json:"default_branch,omitempty" jsonschema:"default: main"`
}

type repoListIn struct{}

type oplogIn struct {
	Workspace string `json:"workspace" jsonschema:"the workspace (or repository) name"`
	Before    int64  `json:"before,omitempty" jsonschema:"page back: entries older than this sequence number (next_before of the previous page)"`
	Limit     int    `json:"limit,omitempty" jsonschema:"entries per page (default 100, at most 1000)"`
}

func (t *tools) registerMore(s *mcp.Server) {
	ro := &mcp.ToolAnnotations{ReadOnlyHint: true}
	mcp.AddTool(s, &mcp.Tool{Name: "sync", Description: "Bring a workspace up to date with its base (merge the base's branch into it; compare-and-swap like every write). " +
		"On conflicts: on_conflict=markers commits the merge with conflict markers to conflicts/<branch>; resolve the files there, then sync with resolved=true.", Annotations: &mcp.ToolAnnotations{}},
		func(ctx context.Context, req *mcp.CallToolRequest, in syncIn) (*mcp.CallToolResult, any, error) {
			return t.sync(ctx, req, in)
		})
	mcp.AddTool(s, &mcp.Tool{Name: "file_tree", Description: "List every file under a directory of a workspace, recursively (paths, sizes, blob oids).", Annotations: ro},
		func(ctx context.Context, req *mcp.CallToolRequest, in fileTreeIn) (*mcp.CallToolResult, any, error) {
			return t.tree(ctx, req, in)
		})
	mcp.AddTool(s, &mcp.Tool{Name: "file_replace", Description: "Search and replace in one file of a workspace, committed (compare-and-swap on expect_oid): old must occur exactly once unless all=true.", Annotations: &mcp.ToolAnnotations{}},
		func(ctx context.Context, req *mcp.CallToolRequest, in fileReplaceIn) (*mcp.CallToolResult, any, error) {
			return t.replace(ctx, req, in)
		})
	mcp.AddTool(s, &mcp.Tool{Name: "repo_list", Description: "List the repositories (bases and workspaces) this key can see.", Annotations: ro},
		func(ctx context.Context, req *mcp.CallToolRequest, _ repoListIn) (*mcp.CallToolResult, any, error) {
			return t.call(ctx, req, http.MethodGet, "/api/v1/repos", nil)
		})
	mcp.AddTool(s, &mcp.Tool{Name: "repo_create", Description: "Create an empty base repository (admins and maintainers; agents fork with workspace_create).", Annotations: &mcp.ToolAnnotations{}},
		func(ctx context.Context, req *mcp.CallToolRequest, in repoCreateIn) (*mcp.CallToolResult, any, error) {
			return t.call(ctx, req, http.MethodPost, "/api/v1/repos", map[string]string{"name": in.Name, "default_branch": in.DefaultBranch})
		})
	mcp.AddTool(s, &mcp.Tool{Name: "database_info", Description: "The workspace's database branch, if it has one: its state and the DSN (connection URL) to run the code against.", Annotations: ro},
		func(ctx context.Context, req *mcp.CallToolRequest, in workspaceIn) (*mcp.CallToolResult, any, error) {
			return t.call(ctx, req, http.MethodGet, repoPath(in.Workspace, "database"), nil)
		})
	mcp.AddTool(s, &mcp.Tool{Name: "oplog", Description: "The operations log of a workspace, newest first, with next_before to page back.", Annotations: ro},
		func(ctx context.Context, req *mcp.CallToolRequest, in oplogIn) (*mcp.CallToolResult, any, error) {
			c, err := t.client(ctx, req.Extra)
			if err != nil {
				return nil, nil, err
			}
			before, limit := "", ""
			if in.Before > 0 {
				before = fmt.Sprint(in.Before)
			}
			if in.Limit != 0 {
				limit = fmt.Sprint(in.Limit)
			}
			raw, err := t.oplog(ctx, c, in.Workspace, before, limit)
			if err != nil {
				return toolError(err), nil, nil
			}
			return jsonResult(raw), nil, nil
		})
}

func (t *tools) sync(ctx context.Context, req *mcp.CallToolRequest, in syncIn) (*mcp.CallToolResult, any, error) {
	c, err := t.client(ctx, req.Extra)
	if err != nil {
		return nil, nil, err
	}
	if !in.Resolved {
		body := map[string]string{}
		if in.ExpectOID != "" {
			body["expect_oid"] = in.ExpectOID
		}
		if in.OnConflict != "" {
			body["on_conflict"] = in.OnConflict
		}
		raw, err := c.Do(ctx, http.MethodPost, repoPath(in.Workspace, "sync"), body)
		if err != nil {
			return toolError(err), nil, nil
		}
		var res struct {
			Clean   bool   `json:"clean"`
			SideRef string `json:"side_ref"`
			Commit  string `json:"commit"`
		}
		if json.Unmarshal(raw, &res) == nil && !res.Clean && res.SideRef != "" {
			side := strings.TrimPrefix(res.SideRef, "refs/heads/")
			r := jsonResult(raw)
			r.Content = append(r.Content, &mcp.TextContent{Text: fmt.Sprintf("next: the merge with conflict markers is commit %s on branch %s. For each file in conflicts: file_read rev=%q, "+
				"write the resolved content (no conflict markers left) with files_edit branch=%q expect_oid=<the branch's tip: %s, then the commit each write returns>; then call sync with resolved=true",
				res.Commit, side, side, side, res.Commit)})
			return r, nil, nil
		}
		return jsonResult(raw), nil, nil
	}
	r, err := t.repo(ctx, c, in.Workspace)
	if err != nil {
		return toolError(err), nil, nil
	}
	side := "conflicts/" + r.DefaultBranch
	body := map[string]any{"ours": r.DefaultBranch, "theirs": side, "materialize": true, "mode": "fast_forward",
		"message": fmt.Sprintf("Sync %s with its base (conflicts resolved)", in.Workspace)}
	if in.ExpectOID != "" {
		body["expect_oid"] = in.ExpectOID
	}
	raw, err := c.Do(ctx, http.MethodPost, repoPath(in.Workspace, "merges"), body)
	if err != nil {
		if lockstep.ErrorCode(err) == lockstep.ENOTFOUND {
			return toolError(lockstep.Errorf(lockstep.EINVALID, "%s has no branch %s to land: call sync with on_conflict=\"markers\" first", in.Workspace, side)), nil, nil
		}
		return toolError(err), nil, nil
	}
	return jsonResult(raw), nil, nil
}

// treeEntry is the part of a tree listing the recursive walk uses.
type treeEntry struct {
	Name string `json:"name"`
	Path string `json:"path,omitempty"`
	Type string `json:"type"`
	Mode string `json:"mode,omitempty"`
	Hash string `json:"hash,omitempty"`
	Size int64  `json:"size,omitempty"`
}

func (t *tools) tree(ctx context.Context, req *mcp.CallToolRequest, in fileTreeIn) (*mcp.CallToolResult, any, error) {
	c, err := t.client(ctx, req.Extra)
	if err != nil {
		return nil, nil, err
	}
	limit := in.Max
	if limit <= 0 {
		limit = 2000
	}
	if limit > 20000 {
		return toolError(lockstep.Errorf(lockstep.EINVALID, "max_entries %d: at most 20000", limit)), nil, nil
	}
	type file struct {
		Path string `json:"path"`
		Mode string `json:"mode,omitempty"`
		Hash string `json:"hash,omitempty"`
		Size int64  `json:"size"`
	}
	files := []file{}
	truncated := false
	queue := []string{strings.Trim(in.Path, "/")}
	for len(queue) > 0 && !truncated {
		dir := queue[0]
		queue = queue[1:]
		raw, err := c.Do(ctx, http.MethodGet, withQuery(repoPath(in.Workspace, "tree", url.PathEscape(revOr(in.Rev))), "path", dir), nil)
		if err != nil {
			return toolError(err), nil, nil
		}
		var list struct {
			Entries []treeEntry `json:"entries"`
		}
		if err := json.Unmarshal(raw, &list); err != nil {
			return nil, nil, err
		}
		for _, e := range list.Entries {
			p := e.Name
			if dir != "" {
				p = dir + "/" + e.Name
			}
			if e.Type == "tree" || e.Type == "dir" {
				queue = append(queue, p)
				continue
			}
			if len(files) >= limit {
				truncated = true
				break
			}
			files = append(files, file{Path: p, Mode: e.Mode, Hash: e.Hash, Size: e.Size})
		}
	}
	b, _ := json.MarshalIndent(map[string]any{"files": files, "truncated": truncated}, "", "  ")
	return jsonResult(b), nil, nil
}

func (t *tools) replace(ctx context.Context, req *mcp.CallToolRequest, in fileReplaceIn) (*mcp.CallToolResult, any, error) {
	if in.ExpectOID == "" && !in.Force {
		return t.needExpect(ctx, req, in.Workspace, "")
	}
	if in.Old == "" {
		return toolError(lockstep.Errorf(lockstep.EINVALID, "old: give the text to replace")), nil, nil
	}
	c, err := t.client(ctx, req.Extra)
	if err != nil {
		return nil, nil, err
	}
	rev := in.ExpectOID
	if rev == "" {
		rev = "HEAD"
	}
	body, hdr, err := t.readBlob(ctx, c, in.Workspace, rev, in.Path, 0, 0)
	if err != nil {
		return toolError(err), nil, nil
	}
	text := string(body)
	n := strings.Count(text, in.Old)
	switch {
	case n == 0:
		return toolError(lockstep.Errorf(lockstep.ENOTFOUND, "%s does not contain the text of old (at %s): file_read it and copy the text exactly", in.Path, rev)), nil, nil
	case n > 1 && !in.All:
		return toolError(lockstep.Errorf(lockstep.EINVALID, "old occurs %d times in %s: add context to make it unique, or pass all=true", n, in.Path)), nil, nil
	}
	text = strings.ReplaceAll(text, in.Old, in.New)
	msg := in.Message
	if msg == "" {
		msg = "Edit " + in.Path
	}
	return t.edit(ctx, req, in.Workspace, "", in.ExpectOID, in.Force, msg, []editIn{{Op: "write", Path: in.Path, Content: text, Executable: hdr.Get("X-Lockstep-Mode") == "100755"}})
}
