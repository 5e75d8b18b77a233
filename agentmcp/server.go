// Package agentmcp is Lockstep's Model Context Protocol server: the tools
// an agent needs for its whole loop (workspaces, file reads and edits,
// checkpoints, preflight, gate, promote, history), built on the HTTP API
// through the Go client, so MCP and HTTP callers get the same keys, roles,
// limits, idempotency and errors. `lockstep mcp` serves it over stdio (and
// adds tools that act on the agent's own machine: push a directory, run a
// command transactionally); `lockstep serve` serves it over streamable HTTP
// at /mcp with the caller's API key.
package agentmcp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/api"
	"github.com/lockstep-hq/lockstep/client"
)

// Options configure a server.
type Options struct {
	// Client returns the API client to act with for one request: the
	// stdio server's fixed client, or a client with the HTTP caller's key.
	Client func(ctx context.Context, extra *mcp.RequestExtra) (*client.Client, error)
	// Local runs the lockstep CLI on the agent's machine with args and
	// returns its standard output (JSON) or an error carrying its standard
	// error. Nil leaves out the tools that act on local directories
	// (push_directory, run_command): an HTTP server has no such machine.
	Local func(ctx context.Context, args []string) ([]byte, error)
	// Version is reported to clients.
	Version string
	// MaxReadBytes bounds what file_read returns (default 1 MiB).
	MaxReadBytes int64
}

// DefaultMaxReadBytes is Options.MaxReadBytes when zero.
const DefaultMaxReadBytes = 1 << 20

// New returns an MCP server with every tool and resource registered.
func New(o Options) *mcp.Server {
	if o.Version == "" {
		o.Version = "dev"
	}
	if o.MaxReadBytes <= 0 {
		o.MaxReadBytes = DefaultMaxReadBytes
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "lockstep", Title: "Lockstep workspaces", Version: o.Version},
		&mcp.ServerOptions{Instructions: instructions})
	t := &tools{o: o}
	t.register(s)
	s.AddReceivingMiddleware(safeErrors) // resources.go
	t.registerEffects(s)                 // effects.go
	return s
}

const instructions = `Lockstep gives each agent task its own versioned workspace: a fork of a base repository.
Typical loop: workspace_create (fork the base, e.g. repo "shop", with a task label) → file_list / file_read →
files_edit (one commit per batch; pass expect_oid = the tip you last saw) → checkpoint_create before risky steps →
checkpoint_restore to undo → merge_preflight and gate_status → promote when the gate passes.
Every write is compare-and-swap: a ref_conflict error means someone else moved the branch; re-read and retry.`

// tools holds the handlers; each resolves its client per call.
type tools struct{ o Options }

func (t *tools) client(ctx context.Context, extra *mcp.RequestExtra) (*client.Client, error) {
	return t.o.Client(ctx, extra)
}

// call performs one API request as the tool's caller and returns the JSON
// answer as the tool result.
func (t *tools) call(ctx context.Context, req *mcp.CallToolRequest, method, path string, body any) (*mcp.CallToolResult, any, error) {
	c, err := t.client(ctx, req.Extra)
	if err != nil {
		return nil, nil, err
	}
	raw, err := c.Do(ctx, method, path, body)
	if err != nil {
		return toolError(err), nil, nil
	}
	return jsonResult(raw), nil, nil
}

func jsonResult(raw json.RawMessage) *mcp.CallToolResult {
	text := strings.TrimSpace(string(raw))
	if text == "" {
		text = "{}"
	}
	r := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}
	if strings.HasPrefix(text, "{") && json.Valid([]byte(text)) {
		r.StructuredContent = json.RawMessage(text) // the same answer, for clients that read structured content
	}
	return r
}

func textResult(text string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}
}

// toolError turns an API error into a tool error that tells the model what
// to do next (MCP: errors of a tool are results with isError, so the model
// sees them; protocol errors are for broken requests).
func toolError(err error) *mcp.CallToolResult {
	code := lockstep.ErrorCode(err)
	msg := err.Error()
	var e *lockstep.Error
	if ok := asError(err, &e); ok {
		msg = e.Message
	}
	next := nextStep(code, lockstep.ErrorDetails(err))
	text := fmt.Sprintf("error %s: %s", code, msg)
	if d := lockstep.ErrorDetails(err); len(d) > 0 {
		if b, jerr := json.Marshal(d); jerr == nil {
			text += "\ndetails: " + string(b)
		}
	}
	if next != "" {
		text += "\nnext: " + next
	}
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: text}}}
}

func nextStep(code string, details map[string]any) string {
	switch code {
	case lockstep.EREFCONFLICT:
		if a, ok := details["actual"].(string); ok && a != "" {
			return fmt.Sprintf("the branch moved (it is now at %s): re-read the files you changed (file_read), re-apply your edits, and retry with expect_oid=%s", a, a)
		}
		return "the branch moved: re-read (workspace_status, file_read), re-apply your edits and retry with the new expect_oid"
	case lockstep.EPRECONDITION:
		if a, ok := details["actual"].(string); ok && a != "" {
			return fmt.Sprintf("pass expect_oid=%s (the branch's current tip) after checking it is the state you read (file_read, diff); force=true instead applies onto whatever is current", a)
		}
		return "pass expect_oid: the branch tip you last read (workspace_status shows it); force=true instead applies onto whatever is current"
	case lockstep.EGATEFAILED:
		return "the gate refused: fix each unmet rule listed in details.gate.reasons (e.g. make failing checks pass, stay under the file/line limits, leave protected paths alone), then call gate_status and promote again"
	case lockstep.EMERGECONFLICT:
		return syncAdvice
	case lockstep.ENOTFOUND:
		return "check the name: workspace_list lists workspaces of a repository, file_list lists files"
	case lockstep.EFORBIDDEN:
		return "your key may not do this: agents write only the workspaces they created; fork your own with workspace_create"
	case lockstep.EINVALID:
		return "fix the argument named in the message and call again"
	case lockstep.ETOOLARGE:
		return "split the change into smaller batches or files"
	case lockstep.EUNAVAILABLE:
		return "a dependency of the server is down: wait a few seconds and retry the same call"
	case lockstep.ENOTCONFIGURED:
		return "this feature is not configured on the server: do not retry; carry on without it or ask the operator to enable it"
	case lockstep.EUNAUTH:
		return "the API key is missing or revoked: ask the operator for a valid LOCKSTEP_KEY"
	case lockstep.ENORUNNER:
		return "no runner serves this workspace: do not retry now; ask the operator to start `lockstep runner --jobs` for it, or carry on without running code"
	}
	return ""
}

func asError(err error, target **lockstep.Error) bool {
	for err != nil {
		if e, ok := err.(*lockstep.Error); ok {
			*target = e
			return true
		}
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return false
		}
		err = u.Unwrap()
	}
	return false
}

func repoPath(repo string, rest ...string) string {
	p := "/api/v1/repos/" + url.PathEscape(repo)
	for _, r := range rest {
		p += "/" + r
	}
	return p
}

func withQuery(p string, kv ...string) string {
	q := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			q.Set(kv[i], kv[i+1])
		}
	}
	if len(q) == 0 {
		return p
	}
	return p + "?" + q.Encode()
}

// Tool inputs. Optional fields carry omitempty: the inferred schema then
// leaves them out of "required".

type workspaceCreateIn struct {
	Repo string `json:"repo" jsonschema:"the base repository to fork, e.g. shop"`
	Name string `json:"name" jsonschema:"the new workspace's name: lowercase letters, digits, . _ - (e.g. task-45-try1)"`
	Task string `json:"task,omitempty" jsonschema:"optional task label grouping attempts at one task (e.g. task-45)"`
}

type workspaceIn struct {
	Workspace string `json:"workspace" jsonschema:"the workspace (or repository) name"`
}

type workspaceListIn struct {
	Repo string `json:"repo" jsonschema:"the base repository whose workspaces to list"`
	Task string `json:"task,omitempty" jsonschema:"only workspaces with this task label"`
}

type fileListIn struct {
	Workspace string `json:"workspace" jsonschema:"the workspace name"`
	Path      string `json:"path,omitempty" jsonschema:"directory to list; empty for the root"`
	Rev       string `json:"rev,omitempty" jsonschema:"branch, commit oid or revision; default: the default branch"`
}

type fileReadIn struct {
	Workspace string `json:"workspace" jsonschema:"the workspace name"`
	Path      string `json:"path" jsonschema:"file path relative to the repository root"`
	Rev       string `json:"rev,omitempty" jsonschema:"branch, commit oid or revision; default: the default branch"`
	StartLine int    `json:"start_line,omitempty" jsonschema:"first line to return (1-based); default 1"`
	EndLine   int    `json:"end_line,omitempty" jsonschema:"last line to return (inclusive); default: the end of the file"`
}

type editIn struct {
	Op            string `json:"op" jsonschema:"write or delete"`
	Path          string `json:"path" jsonschema:"file path relative to the repository root"`
	Content       string `json:"content,omitempty" jsonschema:"the whole new file content (UTF-8 text), for op=write"`
	ContentBase64 string `json:"content_base64,omitempty" jsonschema:"the new content as base64, for binary files"`
	Executable    bool   `json:"executable,omitempty" jsonschema:"make the file executable (mode 100755)"`
}

type filesEditIn struct {
	Workspace string   `json:"workspace" jsonschema:"the workspace name"`
	Edits     []editIn `json:"edits" jsonschema:"the edits, applied in order and committed together"`
	ExpectOID string   `json:"expect_oid,omitempty" jsonschema:"required (or force): the branch tip you last read (workspace_status shows it; every write returns the new one); the commit is refused (ref_conflict) if the branch moved since"`
	Force     bool     `json:"force,omitempty" jsonschema:"instead of expect_oid: apply onto whatever the branch is now (last writer wins on the files you write)"`
	Message   string   `json:"message,omitempty" jsonschema:"commit message saying what and why"`
	Branch    string   `json:"branch,omitempty" jsonschema:"branch to commit to; default: the default branch"`
}

type fileWriteIn struct {
	Workspace  string `json:"workspace" jsonschema:"the workspace name"`
	Path       string `json:"path" jsonschema:"file path relative to the repository root"`
	Content    string `json:"content" jsonschema:"the whole new file content (UTF-8 text)"`
	Executable bool   `json:"executable,omitempty" jsonschema:"make the file executable"`
	ExpectOID  string `json:"expect_oid,omitempty" jsonschema:"required (or force): the branch tip you last read (compare-and-swap)"`
	Force      bool   `json:"force,omitempty" jsonschema:"instead of expect_oid: apply onto whatever the branch is now"`
	Message    string `json:"message,omitempty" jsonschema:"commit message"`
}

type fileDeleteIn struct {
	Workspace string `json:"workspace" jsonschema:"the workspace name"`
	Path      string `json:"path" jsonschema:"file or directory to delete"`
	ExpectOID string `json:"expect_oid,omitempty" jsonschema:"required (or force): the branch tip you last read (compare-and-swap)"`
	Force     bool   `json:"force,omitempty" jsonschema:"instead of expect_oid: apply onto whatever the branch is now"`
	Message   string `json:"message,omitempty" jsonschema:"commit message"`
}

type checkpointCreateIn struct {
	Workspace string `json:"workspace" jsonschema:"the workspace name"`
	Label     string `json:"label,omitempty" jsonschema:"a short label, e.g. before-migration"`
}

type checkpointRestoreIn struct {
	Workspace string `json:"workspace" jsonschema:"the workspace name"`
	ID        string `json:"id" jsonschema:"the checkpoint id (cp-…) from checkpoint_create or checkpoint_list"`
	ExpectOID string `json:"expect_oid,omitempty" jsonschema:"required (or force): the branch tip you last read"`
	Force     bool   `json:"force,omitempty" jsonschema:"instead of expect_oid: restore over whatever the branch is now"`
}

type rollbackIn struct {
	Workspace string `json:"workspace" jsonschema:"the workspace name"`
	To        string `json:"to" jsonschema:"commit oid (or revision) whose tree to bring back as a new commit"`
	ExpectOID string `json:"expect_oid,omitempty" jsonschema:"required (or force): the branch tip you last read"`
	Force     bool   `json:"force,omitempty" jsonschema:"instead of expect_oid: roll back whatever the branch is now"`
}

type logIn struct {
	Workspace string `json:"workspace" jsonschema:"the workspace name"`
	Limit     int    `json:"limit,omitempty" jsonschema:"how many commits (default 20)"`
	Ref       string `json:"ref,omitempty" jsonschema:"branch or revision; default: the default branch"`
}

type diffIn struct {
	Workspace string `json:"workspace" jsonschema:"the workspace name"`
	Base      string `json:"base,omitempty" jsonschema:"base revision; default: the commit the workspace was forked from"`
	Head      string `json:"head,omitempty" jsonschema:"head revision; default: the workspace's default branch"`
}

type compareAttemptsIn struct {
	Repo       string   `json:"repo" jsonschema:"the base repository"`
	Task       string   `json:"task,omitempty" jsonschema:"compare every workspace with this task label"`
	Workspaces []string `json:"workspaces,omitempty" jsonschema:"or compare these workspaces"`
}

type promoteIn struct {
	Workspace string `json:"workspace" jsonschema:"the workspace to land into its base"`
	Message   string `json:"message,omitempty" jsonschema:"merge commit message"`
}

type pushDirIn struct {
	Dir       string `json:"dir" jsonschema:"local directory to push (its whole content becomes the branch's tree)"`
	Workspace string `json:"workspace" jsonschema:"the workspace name"`
	ExpectOID string `json:"expect_oid,omitempty" jsonschema:"the branch tip you last read; omit to push only if the branch is where it was when the push started"`
	Message   string `json:"message,omitempty" jsonschema:"commit message"`
}

type runIn struct {
	Dir       string   `json:"dir" jsonschema:"the local working directory to protect"`
	Workspace string   `json:"workspace" jsonschema:"the workspace the run belongs to"`
	Command   []string `json:"command" jsonschema:"the command and its arguments, e.g. [\"make\", \"test\"]"`
	Commit    bool     `json:"commit_on_success,omitempty" jsonschema:"push the directory when the command succeeds"`
}

func (t *tools) register(s *mcp.Server) {
	ro := &mcp.ToolAnnotations{ReadOnlyHint: true}
	add := func(name, desc string, ann *mcp.ToolAnnotations) *mcp.Tool {
		return &mcp.Tool{Name: name, Description: desc, Annotations: ann}
	}
	mcp.AddTool(s, add("workspace_create", "Create a workspace: a fork of a base repository (copies refs, not files; instant). You own it and may write it. Returns its name, base commit and task label.", nil),
		func(ctx context.Context, req *mcp.CallToolRequest, in workspaceCreateIn) (*mcp.CallToolResult, any, error) {
			return t.call(ctx, req, http.MethodPost, repoPath(in.Repo, "forks"), map[string]string{"name": in.Name, "task": in.Task})
		})
	mcp.AddTool(s, add("workspace_list", "List the workspaces forked from a repository, with owner, status (active, failed, promoted, abandoned), task label, tip and ahead/behind counts.", ro),
		func(ctx context.Context, req *mcp.CallToolRequest, in workspaceListIn) (*mcp.CallToolResult, any, error) {
			return t.call(ctx, req, http.MethodGet, withQuery(repoPath(in.Repo, "workspaces"), "task", in.Task), nil)
		})
	mcp.AddTool(s, add("workspace_status", "Show a workspace: status, owner, base, task label and its branches with their tips (use a tip as expect_oid for the next write).", ro),
		func(ctx context.Context, req *mcp.CallToolRequest, in workspaceIn) (*mcp.CallToolResult, any, error) {
			return t.status(ctx, req, in.Workspace)
		})
	mcp.AddTool(s, add("file_list", "List a directory of a workspace (names, types, sizes, blob oids).", ro),
		func(ctx context.Context, req *mcp.CallToolRequest, in fileListIn) (*mcp.CallToolResult, any, error) {
			return t.call(ctx, req, http.MethodGet, withQuery(repoPath(in.Workspace, "tree", url.PathEscape(revOr(in.Rev))), "path", in.Path), nil)
		})
	mcp.AddTool(s, add("file_read", "Read a file of a workspace. Text comes back as is; binary content as base64.", ro),
		func(ctx context.Context, req *mcp.CallToolRequest, in fileReadIn) (*mcp.CallToolResult, any, error) {
			return t.read(ctx, req, in)
		})
	mcp.AddTool(s, withOutput(add("files_edit", "Write and delete files in a workspace as ONE commit (compare-and-swap on expect_oid). Each edit is {op: write, path, content} or {op: delete, path}; a write replaces the whole file. Returns the new commit: use it as expect_oid next time.", nil), outputSchema[api.PushResult]()),
		func(ctx context.Context, req *mcp.CallToolRequest, in filesEditIn) (*mcp.CallToolResult, any, error) {
			return t.edit(ctx, req, in.Workspace, in.Branch, in.ExpectOID, in.Force, in.Message, in.Edits)
		})
	mcp.AddTool(s, withOutput(add("file_write", "Write one file of a workspace (the whole content) as a commit. For several files use files_edit.", nil), outputSchema[api.PushResult]()),
		func(ctx context.Context, req *mcp.CallToolRequest, in fileWriteIn) (*mcp.CallToolResult, any, error) {
			return t.edit(ctx, req, in.Workspace, "", in.ExpectOID, in.Force, in.Message, []editIn{{Op: "write", Path: in.Path, Content: in.Content, Executable: in.Executable}})
		})
	mcp.AddTool(s, withOutput(add("file_delete", "Delete a file or a whole directory of a workspace as a commit.", &mcp.ToolAnnotations{DestructiveHint: ptr(true)}), outputSchema[api.PushResult]()),
		func(ctx context.Context, req *mcp.CallToolRequest, in fileDeleteIn) (*mcp.CallToolResult, any, error) {
			return t.edit(ctx, req, in.Workspace, "", in.ExpectOID, in.Force, in.Message, []editIn{{Op: "delete", Path: in.Path}})
		})
	mcp.AddTool(s, add("checkpoint_create", "Checkpoint a workspace before a risky step: its code (and its database branch, if it has one) can be restored together later.", nil),
		func(ctx context.Context, req *mcp.CallToolRequest, in checkpointCreateIn) (*mcp.CallToolResult, any, error) {
			return t.call(ctx, req, http.MethodPost, repoPath(in.Workspace, "checkpoints"), map[string]string{"label": in.Label})
		})
	mcp.AddTool(s, add("checkpoint_list", "List a workspace's checkpoints, newest first.", ro),
		func(ctx context.Context, req *mcp.CallToolRequest, in workspaceIn) (*mcp.CallToolResult, any, error) {
			return t.call(ctx, req, http.MethodGet, repoPath(in.Workspace, "checkpoints"), nil)
		})
	mcp.AddTool(s, add("checkpoint_restore", "Restore a checkpoint: the code comes back as a NEW commit whose tree equals the checkpoint's (history is kept as evidence), and the database branch is restored with it.", nil),
		func(ctx context.Context, req *mcp.CallToolRequest, in checkpointRestoreIn) (*mcp.CallToolResult, any, error) {
			body := map[string]string{}
			if in.ExpectOID != "" {
				body["expect_oid"] = in.ExpectOID
			} else if !in.Force {
				return t.needExpect(ctx, req, in.Workspace, "")
			}
			return t.call(ctx, req, http.MethodPost, repoPath(in.Workspace, "checkpoints", url.PathEscape(in.ID), "restore"), body)
		})
	mcp.AddTool(s, add("rollback", "Bring back the tree of an earlier commit as a new commit (undo without losing history).", nil),
		func(ctx context.Context, req *mcp.CallToolRequest, in rollbackIn) (*mcp.CallToolResult, any, error) {
			body := map[string]any{"to": in.To}
			if in.ExpectOID != "" {
				body["expect_oid"] = in.ExpectOID
			} else if in.Force {
				body["force"] = true
			} else {
				return t.needExpect(ctx, req, in.Workspace, "")
			}
			return t.call(ctx, req, http.MethodPost, repoPath(in.Workspace, "rollback"), body)
		})
	mcp.AddTool(s, add("merge_preflight", "Would the workspace merge cleanly into its base right now? Line-level three-way merge; writes nothing. Lists conflicting files and hunks.", ro),
		func(ctx context.Context, req *mcp.CallToolRequest, in workspaceIn) (*mcp.CallToolResult, any, error) {
			return t.preflight(ctx, req, in.Workspace)
		})
	mcp.AddTool(s, add("gate_status", "Evaluate the gate for the workspace's tip: every unmet rule (missing or failing checks, file/line limits, protected paths, merge conflicts). promote succeeds only when passed is true.", ro),
		func(ctx context.Context, req *mcp.CallToolRequest, in workspaceIn) (*mcp.CallToolResult, any, error) {
			return t.call(ctx, req, http.MethodGet, repoPath(in.Workspace, "gate", "evaluate"), nil)
		})
	mcp.AddTool(s, add("promote", "Land the workspace into its base branch through the gate and the landing queue (fast-forward or merge commit). Refused with the list of unmet rules if the gate fails.", nil),
		func(ctx context.Context, req *mcp.CallToolRequest, in promoteIn) (*mcp.CallToolResult, any, error) {
			return t.call(ctx, req, http.MethodPost, repoPath(in.Workspace, "promote"), map[string]string{"message": in.Message})
		})
	mcp.AddTool(s, add("log", "List a workspace's commits, newest first.", ro),
		func(ctx context.Context, req *mcp.CallToolRequest, in logIn) (*mcp.CallToolResult, any, error) {
			limit := in.Limit
			if limit <= 0 {
				limit = 20
			}
			return t.call(ctx, req, http.MethodGet, withQuery(repoPath(in.Workspace, "commits"), "ref", in.Ref, "limit", fmt.Sprint(limit)), nil)
		})
	mcp.AddTool(s, add("diff", "Show what a workspace changed: files with status, added/removed lines and patches, between its fork point (or base) and its tip (or head).", ro),
		func(ctx context.Context, req *mcp.CallToolRequest, in diffIn) (*mcp.CallToolResult, any, error) {
			return t.diff(ctx, req, in)
		})
	mcp.AddTool(s, add("compare_attempts", "Compare several attempts at one task side by side: for each workspace (by task label or by name) its status, tip, gate result and the files it changed.", ro),
		func(ctx context.Context, req *mcp.CallToolRequest, in compareAttemptsIn) (*mcp.CallToolResult, any, error) {
			return t.compareAttempts(ctx, req, in)
		})
	if t.o.Local != nil {
		mcp.AddTool(s, add("push_directory", "Push a local directory as the workspace's new tree (one commit; only changed objects are sent). Compare-and-swap like every write.", nil),
			func(ctx context.Context, req *mcp.CallToolRequest, in pushDirIn) (*mcp.CallToolResult, any, error) {
				args := []string{"push", "--quiet", "--repo", in.Workspace}
				if in.ExpectOID != "" {
					args = append(args, "--expect", in.ExpectOID)
				} else {
					args = append(args, "--expect-current")
				}
				if in.Message != "" {
					args = append(args, "--message", in.Message)
				}
				// "--": a dir that starts with "-" is a directory, not a flag.
				return t.local(ctx, append(args, "--", in.Dir))
			})
		mcp.AddTool(s, add("run_command", "Run a command transactionally in a local directory: the directory (and the workspace's database branch) is checkpointed first; if the command fails everything is restored and the failed state is kept as evidence. Returns the exit code and output tail.", nil),
			func(ctx context.Context, req *mcp.CallToolRequest, in runIn) (*mcp.CallToolResult, any, error) {
				if len(in.Command) == 0 {
					return toolError(lockstep.Errorf(lockstep.EINVALID, "command: give the program and its arguments")), nil, nil
				}
				args := []string{"run", "--json", "--workspace", in.Workspace, "--dir", in.Dir}
				if in.Commit {
					args = append(args, "--commit-on-success")
				}
				return t.local(ctx, append(append(args, "--"), in.Command...))
			})
	}
	if t.o.Local == nil {
		t.registerRunJob(s) // runjob.go: run_command on a runner
	}
	t.registerMore(s) // more.go
	t.resources(s)
}

func ptr[T any](v T) *T { return &v }

// withOutput gives tool an output schema (its structured content).
func withOutput(tool *mcp.Tool, schema *jsonschema.Schema) *mcp.Tool {
	tool.OutputSchema = schema
	return tool
}

func revOr(rev string) string {
	if rev == "" {
		return "HEAD"
	}
	return rev
}

func (t *tools) local(ctx context.Context, args []string) (*mcp.CallToolResult, any, error) {
	out, err := t.o.Local(ctx, args)
	if err != nil {
		return toolError(err), nil, nil
	}
	return textResult(strings.TrimSpace(string(out))), nil, nil
}

func (t *tools) status(ctx context.Context, req *mcp.CallToolRequest, ws string) (*mcp.CallToolResult, any, error) {
	c, err := t.client(ctx, req.Extra)
	if err != nil {
		return nil, nil, err
	}
	repo, err := c.Do(ctx, http.MethodGet, repoPath(ws), nil)
	if err != nil {
		return toolError(err), nil, nil
	}
	refs, err := c.Do(ctx, http.MethodGet, repoPath(ws, "refs"), nil)
	if err != nil {
		return toolError(err), nil, nil
	}
	out, _ := json.MarshalIndent(map[string]json.RawMessage{"repository": repo, "refs": refs}, "", "  ")
	return jsonResult(out), nil, nil
}

func (t *tools) read(ctx context.Context, req *mcp.CallToolRequest, in fileReadIn) (*mcp.CallToolResult, any, error) {
	c, err := t.client(ctx, req.Extra)
	if err != nil {
		return nil, nil, err
	}
	if in.StartLine < 0 || in.EndLine < 0 || (in.EndLine > 0 && in.EndLine < in.StartLine) {
		return toolError(lockstep.Errorf(lockstep.EINVALID, "start_line %d, end_line %d: want 1 <= start_line <= end_line", in.StartLine, in.EndLine)), nil, nil
	}
	body, hdr, err := t.readBlob(ctx, c, in.Workspace, revOr(in.Rev), in.Path, in.StartLine, in.EndLine)
	if err != nil {
		return toolError(err), nil, nil
	}
	if utf8.Valid(body) {
		return textResult(string(body)), nil, nil
	}
	return textResult(fmt.Sprintf("binary file %s (blob %s, %d bytes), base64:\n%s", in.Path, hdr.Get("X-Lockstep-Blob"), len(body), base64.StdEncoding.EncodeToString(body))), nil, nil
}

// readBlob reads a file, or the lines start..end of it (1-based,
// inclusive; 0: from the start, to the end), at most MaxReadBytes of
// it: a larger file is refused (too_large) after MaxReadBytes were read,
// and the rest is never produced.
func (t *tools) readBlob(ctx context.Context, c *client.Client, ws, rev, path string, start, end int) ([]byte, http.Header, error) {
	lw := &lineWriter{max: t.o.MaxReadBytes, start: max(start, 1), end: end, line: 1}
	resp, err := c.Request(ctx, http.MethodGet, repoPath(ws, "blob", url.PathEscape(rev), escapePath(path)), nil, nil, "", io.Writer(lw))
	switch {
	case errors.Is(err, errEnough):
	case errors.Is(err, errTooLarge):
		size := ""
		if resp != nil && resp.ContentLength >= 0 {
			size = fmt.Sprintf(" is %d bytes:", resp.ContentLength)
		}
		hint := "read a line range (start_line, end_line)"
		if start > 0 || end > 0 {
			hint = "read fewer lines"
		}
		return nil, nil, lockstep.Errorf(lockstep.ETOOLARGE, "%s%s reads return at most %d bytes (--mcp-max-read-bytes): %s", path, size, t.o.MaxReadBytes, hint).
			WithDetails(map[string]any{"limit": t.o.MaxReadBytes})
	case err != nil:
		return nil, nil, err
	}
	hdr := http.Header{}
	if resp != nil {
		hdr = resp.Header
	}
	return lw.buf.Bytes(), hdr, nil
}

var (
	errTooLarge = errors.New("over the read limit")
	errEnough   = errors.New("the lines asked for are read")
)

// lineWriter keeps the lines start..end (end 0: all) of what is written,
// up to max bytes.
type lineWriter struct {
	buf        bytes.Buffer
	max        int64
	start, end int
	line       int
}

func (w *lineWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		if w.end > 0 && w.line > w.end {
			return n - len(p), errEnough
		}
		i := bytes.IndexByte(p, '\n')
		chunk := p
		if i >= 0 {
			chunk = p[:i+1]
		}
		if w.line >= w.start {
			if int64(w.buf.Len()+len(chunk)) > w.max {
				return n - len(p), errTooLarge
			}
			w.buf.Write(chunk)
		}
		if i >= 0 {
			w.line++
		}
		p = p[len(chunk):]
	}
	return n, nil
}

func escapePath(p string) string {
	parts := strings.Split(strings.Trim(p, "/"), "/")
	for i := range parts {
		parts[i] = url.PathEscape(parts[i])
	}
	return strings.Join(parts, "/")
}

func (t *tools) edit(ctx context.Context, req *mcp.CallToolRequest, ws, branch, expect string, force bool, msg string, edits []editIn) (*mcp.CallToolResult, any, error) {
	if expect == "" && !force {
		return t.needExpect(ctx, req, ws, branch)
	}
	c, err := t.client(ctx, req.Extra)
	if err != nil {
		return nil, nil, err
	}
	head := map[string]any{"message": msg}
	if branch != "" {
		head["branch"] = branch
	}
	if expect != "" {
		head["expect_oid"] = expect
	} else {
		head["force"] = true // applied onto the current tip, re-applied if it moves: never a stale tree
	}
	// The body is streamed to the edits route: file contents are not
	// copied into one more buffer on their way.
	body := client.BodyFunc(func() (io.Reader, error) {
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(writeEdits(pw, head, edits)) }()
		return pr, nil
	})
	var raw []byte
	if _, err := c.Request(ctx, http.MethodPost, repoPath(ws, "edits"), nil, body, "application/json", &raw); err != nil {
		return toolError(err), nil, nil
	}
	return jsonResult(raw), nil, nil
}

// writeEdits writes the edits request as JSON: the small fields of head,
// then "edits" with each content escaped piece by piece.
func writeEdits(w io.Writer, head map[string]any, edits []editIn) error {
	b, err := json.Marshal(head)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	bw.Write(b[:len(b)-1]) // without the closing brace
	bw.WriteString(`,"edits":[`)
	for i, e := range edits {
		if i > 0 {
			bw.WriteByte(',')
		}
		m := map[string]any{"op": e.Op, "path": e.Path}
		if e.Op == "write" && e.Executable {
			m["executable"] = true
		}
		b, err := json.Marshal(m)
		if err != nil {
			return err
		}
		bw.Write(b[:len(b)-1])
		if e.Op == "write" {
			if e.ContentBase64 != "" {
				bw.WriteString(`,"content_base64":`)
				writeJSONString(bw, e.ContentBase64)
			} else {
				bw.WriteString(`,"content":`)
				writeJSONString(bw, e.Content)
			}
		}
		bw.WriteByte('}')
	}
	bw.WriteString("]}")
	return bw.Flush()
}

// writeJSONString writes s as a JSON string, escaping 64 KiB at a time.
func writeJSONString(w *bufio.Writer, s string) {
	w.WriteByte('"')
	for len(s) > 0 {
		n := min(len(s), 64<<10)
		for n < len(s) && !utf8.RuneStart(s[n]) {
			n++
		}
		b, _ := json.Marshal(s[:n])
		w.Write(b[1 : len(b)-1])
		s = s[n:]
	}
	w.WriteByte('"')
}

// needExpect refuses a write without expect_oid or force, naming the tip
// to pass.
func (t *tools) needExpect(ctx context.Context, req *mcp.CallToolRequest, ws, branch string) (*mcp.CallToolResult, any, error) {
	c, err := t.client(ctx, req.Extra)
	if err != nil {
		return nil, nil, err
	}
	tip, name := "", branch
	if r, err := t.repo(ctx, c, ws); err == nil {
		if name == "" {
			name = r.DefaultBranch
		}
		var refs struct {
			Refs []struct {
				Name string `json:"name"`
				OID  string `json:"oid"`
			} `json:"refs"`
		}
		if raw, err := c.Do(ctx, http.MethodGet, repoPath(ws, "refs"), nil); err == nil && json.Unmarshal(raw, &refs) == nil {
			for _, rf := range refs.Refs {
				if rf.Name == "refs/heads/"+name || rf.Name == name {
					tip = rf.OID
				}
			}
		}
	} else {
		return toolError(err), nil, nil
	}
	e := lockstep.Errorf(lockstep.EPRECONDITION, "writes are compare-and-swap: pass expect_oid (the tip of %s you last read) or force=true", orDefault(name, "the branch"))
	if tip != "" {
		e = e.WithDetails(map[string]any{"ref": "refs/heads/" + name, "actual": tip})
	}
	return toolError(e), nil, nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// repoInfo is the part of a repository answer the tools use.
type repoInfo struct {
	Name          string `json:"name"`
	ForkOf        string `json:"fork_of"`
	DefaultBranch string `json:"default_branch"`
	BaseCommit    string `json:"base_commit"`
	Status        string `json:"status"`
	Task          string `json:"task"`
	Owner         string `json:"owner"`
}

func (t *tools) repo(ctx context.Context, c *client.Client, name string) (*repoInfo, error) {
	var r repoInfo
	raw, err := c.Do(ctx, http.MethodGet, repoPath(name), nil)
	if err != nil {
		return nil, err
	}
	return &r, json.Unmarshal(raw, &r)
}

func (t *tools) preflight(ctx context.Context, req *mcp.CallToolRequest, ws string) (*mcp.CallToolResult, any, error) {
	c, err := t.client(ctx, req.Extra)
	if err != nil {
		return nil, nil, err
	}
	r, err := t.repo(ctx, c, ws)
	if err != nil {
		return toolError(err), nil, nil
	}
	if r.ForkOf == "" {
		return toolError(lockstep.Errorf(lockstep.EINVALID, "%s is not a workspace (it has no base to merge into)", ws)), nil, nil
	}
	raw, err := c.Do(ctx, http.MethodPost, repoPath(r.ForkOf, "merges"), map[string]any{
		"ours": r.DefaultBranch, "theirs": ws + ":" + r.DefaultBranch, "preflight": true, "deep": true})
	if err != nil {
		return toolError(err), nil, nil
	}
	return jsonResult(raw), nil, nil
}

func (t *tools) diff(ctx context.Context, req *mcp.CallToolRequest, in diffIn) (*mcp.CallToolResult, any, error) {
	c, err := t.client(ctx, req.Extra)
	if err != nil {
		return nil, nil, err
	}
	base, head := in.Base, in.Head
	if base == "" || head == "" {
		r, err := t.repo(ctx, c, in.Workspace)
		if err != nil {
			return toolError(err), nil, nil
		}
		if base == "" {
			base = r.BaseCommit
			if base == "" {
				return toolError(lockstep.Errorf(lockstep.EINVALID, "%s has no fork point: give base", in.Workspace)), nil, nil
			}
		}
		if head == "" {
			head = r.DefaultBranch
		}
	}
	return t.call(ctx, req, http.MethodGet, withQuery(repoPath(in.Workspace, "compare"), "base", base, "head", head), nil)
}

// attempt is one workspace's row in compare_attempts.
type attempt struct {
	Workspace string          `json:"workspace"`
	Status    string          `json:"status"`
	Owner     string          `json:"owner"`
	Task      string          `json:"task,omitempty"`
	Tip       string          `json:"tip,omitempty"`
	Files     []attemptFile   `json:"files"`
	Gate      json.RawMessage `json:"gate,omitempty"`
	Error     string          `json:"error,omitempty"`
}

type attemptFile struct {
	Path    string `json:"path"`
	Status  string `json:"status"`
	Added   int    `json:"added"`
	Removed int    `json:"removed"`
}

func (t *tools) compareAttempts(ctx context.Context, req *mcp.CallToolRequest, in compareAttemptsIn) (*mcp.CallToolResult, any, error) {
	c, err := t.client(ctx, req.Extra)
	if err != nil {
		return nil, nil, err
	}
	names := in.Workspaces
	if len(names) == 0 {
		if in.Task == "" {
			return toolError(lockstep.Errorf(lockstep.EINVALID, "give task or workspaces")), nil, nil
		}
		var list struct {
			Workspaces []struct {
				Name string `json:"name"`
			} `json:"workspaces"`
		}
		raw, err := c.Do(ctx, http.MethodGet, withQuery(repoPath(in.Repo, "workspaces"), "task", in.Task), nil)
		if err != nil {
			return toolError(err), nil, nil
		}
		if err := json.Unmarshal(raw, &list); err != nil {
			return nil, nil, err
		}
		for _, w := range list.Workspaces {
			names = append(names, w.Name)
		}
	}
	const maxAttempts = 20
	if len(names) > maxAttempts {
		return toolError(lockstep.Errorf(lockstep.ETOOLARGE, "%d workspaces: compare at most %d at once", len(names), maxAttempts)), nil, nil
	}
	out := []attempt{}
	for _, name := range names {
		a := attempt{Workspace: name, Files: []attemptFile{}}
		r, err := t.repo(ctx, c, name)
		if err != nil {
			a.Error = lockstep.ErrorMessage(err)
			out = append(out, a)
			continue
		}
		a.Status, a.Owner, a.Task = r.Status, r.Owner, r.Task
		var cmp struct {
			Head  string        `json:"head"`
			Files []attemptFile `json:"files"`
		}
		if raw, err := c.Do(ctx, http.MethodGet, withQuery(repoPath(name, "compare"), "base", r.BaseCommit, "head", r.DefaultBranch), nil); err == nil {
			if json.Unmarshal(raw, &cmp) == nil {
				a.Files, a.Tip = cmp.Files, cmp.Head
			}
		} else {
			a.Error = lockstep.ErrorMessage(err)
		}
		if raw, err := c.Do(ctx, http.MethodGet, repoPath(name, "gate", "evaluate"), nil); err == nil {
			a.Gate = raw
		}
		out = append(out, a)
	}
	b, _ := json.MarshalIndent(map[string]any{"attempts": out}, "", "  ")
	return jsonResult(b), nil, nil
}
