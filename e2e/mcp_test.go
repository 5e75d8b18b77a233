package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lockstep-hq/lockstep/internal/e2ekit"
)

// bearer adds an API key to every request of an MCP HTTP client.
type bearer struct{ key string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return http.DefaultTransport.RoundTrip(r)
}

func mcpHTTP(t *testing.T, s *e2ekit.Server, key string) *mcp.ClientSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: s.URL + "/mcp",
		HTTPClient: &http.Client{Transport: bearer{key}}, DisableStandaloneSSE: true}, nil)
	if err != nil {
		t.Fatalf("connect MCP over HTTP: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// toolCall calls a tool and returns its text and whether it was an error.
func toolCall(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) (string, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: protocol error: %v", name, err)
	}
	var sb strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			sb.WriteString(tc.Text)
		}
	}
	return sb.String(), res.IsError
}

// mustTool calls a tool that must succeed and decodes its JSON into out.
func mustTool(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any, out any) string {
	t.Helper()
	text, isErr := toolCall(t, cs, name, args)
	if isErr {
		t.Fatalf("%s(%v): tool error: %s", name, args, text)
	}
	if out != nil {
		if err := json.Unmarshal([]byte(text), out); err != nil {
			t.Fatalf("%s: answer is not JSON: %v\n%s", name, err, text)
		}
	}
	return text
}

// mustToolError calls a tool that must fail with code and a next step.
func mustToolError(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any, code string) string {
	t.Helper()
	text, isErr := toolCall(t, cs, name, args)
	if !isErr {
		t.Fatalf("%s(%v) succeeded, want error %s:\n%s", name, args, code, text)
	}
	if !strings.HasPrefix(text, "error "+code+":") || !strings.Contains(text, "\nnext: ") {
		t.Fatalf("%s: want error %s with a next step, got:\n%s", name, code, text)
	}
	return text
}

// TestMCPAgentSession drives a whole agent session through the MCP server
// of `lockstep serve` with the official Go SDK client: create a workspace,
// write files, checkpoint, break something, restore, get refused by the
// gate, fix it and promote.
func TestMCPAgentSession(t *testing.T) {
	s := e2ekit.StartServer(t, e2ekit.ServerOpts{})
	s.CreateRepo(t, "shop")
	s.PushWith(t, s.AdminKey, "shop", e2ekit.PushQuery("main", "", "force=true"), map[string]string{"app.txt": "v1\n", "README": "shop\n"})
	s.MustJSON(t, "PUT", "/api/v1/repos/shop/gate", s.AdminKey, map[string]any{"protected_paths": []string{"migrations/**"}}, http.StatusOK, nil)
	agent := s.CreateKey(t, "agent-mcp", "agent")
	cs := mcpHTTP(t, s, agent.Secret)

	ctx := context.Background()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
		if tl.Description == "" || tl.InputSchema == nil {
			t.Errorf("tool %s: no description or input schema", tl.Name)
		}
	}
	for _, want := range []string{"workspace_create", "workspace_list", "workspace_status", "file_list", "file_read", "files_edit",
		"file_write", "file_delete", "checkpoint_create", "checkpoint_list", "checkpoint_restore", "rollback", "merge_preflight",
		"gate_status", "promote", "log", "diff", "compare_attempts"} {
		if !slices.Contains(names, want) {
			t.Errorf("tools/list lacks %s (has %v)", want, names)
		}
	}
	if slices.Contains(names, "push_directory") {
		t.Error("the HTTP server offers push_directory, which acts on the caller's machine")
	}
	// run_command over HTTP runs on a runner (issue 24); it and the write
	// tools describe their structured results.
	for _, tl := range tools.Tools {
		switch tl.Name {
		case "run_command":
			if !strings.Contains(tl.Description, "runner") {
				t.Errorf("HTTP run_command does not say it runs on a runner: %s", tl.Description)
			}
			fallthrough
		case "files_edit", "file_write", "file_delete":
			if tl.OutputSchema == nil {
				t.Errorf("tool %s has no outputSchema", tl.Name)
			}
		}
	}

	var fork struct{ Name, Task, BaseCommit string }
	mustTool(t, cs, "workspace_create", map[string]any{"repo": "shop", "name": "t1", "task": "task-1"}, &fork)
	if fork.Name != "t1" || fork.Task != "task-1" {
		t.Fatalf("workspace_create: %+v", fork)
	}
	var status struct {
		Refs struct {
			Refs []struct{ Name, OID string } `json:"refs"`
		} `json:"refs"`
	}
	mustTool(t, cs, "workspace_status", map[string]any{"workspace": "t1"}, &status)
	tip := ""
	for _, r := range status.Refs.Refs {
		if r.Name == "refs/heads/main" {
			tip = r.OID
		}
	}
	if tip == "" {
		t.Fatalf("workspace_status shows no main: %+v", status)
	}

	var w1 struct{ Commit, Parent string }
	mustTool(t, cs, "files_edit", map[string]any{"workspace": "t1", "expect_oid": tip, "message": "v2 and notes",
		"edits": []map[string]any{{"op": "write", "path": "app.txt", "content": "v2\n"}, {"op": "write", "path": "docs/notes.md", "content": "# notes\n"}}}, &w1)
	if w1.Parent != tip || w1.Commit == tip {
		t.Fatalf("files_edit: commit %s parent %s, want a child of %s", w1.Commit, w1.Parent, tip)
	}
	// A stale expect_oid is a tool error that says to re-read.
	text := mustToolError(t, cs, "files_edit", map[string]any{"workspace": "t1", "expect_oid": tip,
		"edits": []map[string]any{{"op": "write", "path": "app.txt", "content": "lost\n"}}}, "ref_conflict")
	if !strings.Contains(text, w1.Commit) || !strings.Contains(text, "re-read") {
		t.Errorf("ref_conflict error does not name the new tip and say to re-read:\n%s", text)
	}
	if got, _ := toolCall(t, cs, "file_read", map[string]any{"workspace": "t1", "path": "app.txt"}); got != "v2\n" {
		t.Fatalf("file_read app.txt = %q, want v2", got)
	}
	var entries struct {
		Entries []struct{ Name, Type string } `json:"entries"`
	}
	mustTool(t, cs, "file_list", map[string]any{"workspace": "t1"}, &entries)
	if len(entries.Entries) != 3 {
		t.Errorf("file_list root: %+v, want README, app.txt, docs", entries.Entries)
	}

	var cp struct{ ID string }
	mustTool(t, cs, "checkpoint_create", map[string]any{"workspace": "t1", "label": "before-break"}, &cp)
	if !strings.HasPrefix(cp.ID, "cp-") {
		t.Fatalf("checkpoint_create: id %q", cp.ID)
	}
	mustTool(t, cs, "file_write", map[string]any{"workspace": "t1", "path": "app.txt", "content": "BROKEN\n", "expect_oid": w1.Commit}, nil)
	mustTool(t, cs, "file_delete", map[string]any{"workspace": "t1", "path": "docs", "force": true}, nil)
	if got, _ := toolCall(t, cs, "file_read", map[string]any{"workspace": "t1", "path": "app.txt"}); got != "BROKEN\n" {
		t.Fatalf("after the break app.txt = %q", got)
	}
	mustTool(t, cs, "checkpoint_restore", map[string]any{"workspace": "t1", "id": cp.ID, "force": true}, nil)
	if got, _ := toolCall(t, cs, "file_read", map[string]any{"workspace": "t1", "path": "app.txt"}); got != "v2\n" {
		t.Fatalf("after restore app.txt = %q, want v2", got)
	}
	if got, isErr := toolCall(t, cs, "file_read", map[string]any{"workspace": "t1", "path": "docs/notes.md"}); isErr || got != "# notes\n" {
		t.Fatalf("after restore docs/notes.md = %q (error %v)", got, isErr)
	}

	// Touch a protected path: the gate refuses and says which rule.
	mustTool(t, cs, "file_write", map[string]any{"workspace": "t1", "path": "migrations/001.sql", "content": "DROP TABLE users;\n", "force": true}, nil)
	var ev struct {
		Passed  bool
		Reasons []struct{ Rule string }
	}
	mustTool(t, cs, "gate_status", map[string]any{"workspace": "t1"}, &ev)
	if ev.Passed || len(ev.Reasons) == 0 || ev.Reasons[0].Rule != "protected_path" {
		t.Fatalf("gate_status with a protected path: %+v", ev)
	}
	text = mustToolError(t, cs, "promote", map[string]any{"workspace": "t1"}, "gate_failed")
	if !strings.Contains(text, "protected_path") {
		t.Errorf("gate_failed error does not list the unmet rule:\n%s", text)
	}
	var pre struct{ Clean bool }
	mustTool(t, cs, "merge_preflight", map[string]any{"workspace": "t1"}, &pre)
	if !pre.Clean {
		t.Errorf("merge_preflight: not clean")
	}
	// Fix it and land.
	mustTool(t, cs, "file_delete", map[string]any{"workspace": "t1", "path": "migrations", "force": true}, nil)
	mustTool(t, cs, "gate_status", map[string]any{"workspace": "t1"}, &ev)
	if !ev.Passed {
		t.Fatalf("gate_status after the fix: %+v", ev)
	}
	mustTool(t, cs, "promote", map[string]any{"workspace": "t1"}, nil)
	if got := s.Blob(t, "shop", "main", "app.txt"); got != "v2\n" {
		t.Fatalf("shop main app.txt = %q after promote, want v2", got)
	}

	var cmp struct {
		Attempts []struct {
			Workspace, Status string
			Files             []struct{ Path string }
		}
	}
	mustTool(t, cs, "compare_attempts", map[string]any{"repo": "shop", "task": "task-1"}, &cmp)
	if len(cmp.Attempts) != 1 || cmp.Attempts[0].Workspace != "t1" || cmp.Attempts[0].Status != "promoted" {
		t.Fatalf("compare_attempts: %+v", cmp)
	}
	var log struct {
		Commits []struct{ OID string } `json:"commits"`
	}
	mustTool(t, cs, "log", map[string]any{"workspace": "t1", "limit": 3}, &log)
	if len(log.Commits) != 3 {
		t.Errorf("log limit 3: %d commits", len(log.Commits))
	}

	// Resources: a file and the workspace's operations log.
	rr, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "lockstep://t1/files/app.txt"})
	if err != nil || len(rr.Contents) != 1 || rr.Contents[0].Text != "v2\n" {
		t.Fatalf("read resource file: %v %+v", err, rr)
	}
	rr, err = cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "lockstep://t1/oplog"})
	if err != nil || !strings.Contains(rr.Contents[0].Text, `"op":"edit"`) {
		t.Fatalf("read resource oplog: %v %+v", err, rr)
	}
	// The operations log attributes the edits to the agent's key.
	ops := s.Oplog(t, map[string][]string{"repo": {"t1"}, "op": {"edit"}})
	if len(ops) < 4 {
		t.Fatalf("oplog has %d edit entries for t1, want at least 4", len(ops))
	}
	for _, op := range ops {
		if op.KeyName != "agent-mcp" {
			t.Errorf("edit entry by %q, want agent-mcp", op.KeyName)
		}
	}
}

// TestMCPKeysAndRoles: /mcp needs a key, a session belongs to its key, and
// a tool acts with the caller's own rights.
func TestMCPKeysAndRoles(t *testing.T) {
	s := e2ekit.StartServer(t, e2ekit.ServerOpts{})
	s.CreateRepo(t, "shop")
	s.PushWith(t, s.AdminKey, "shop", e2ekit.PushQuery("main", "", "force=true"), map[string]string{"a.txt": "a\n"})
	a := s.CreateKey(t, "agent-a", "agent")
	b := s.CreateKey(t, "agent-b", "agent")

	r, err := s.Try("POST", "/mcp", "", map[string]any{"jsonrpc": "2.0", "id": 1, "method": "initialize"}, "application/json")
	if err != nil || r.Status != http.StatusUnauthorized {
		t.Fatalf("/mcp without a key: %v %v, want 401", err, r)
	}

	csA := mcpHTTP(t, s, a.Secret)
	mustTool(t, csA, "workspace_create", map[string]any{"repo": "shop", "name": "a1"}, nil)
	csB := mcpHTTP(t, s, b.Secret)
	mustToolError(t, csB, "file_write", map[string]any{"workspace": "a1", "path": "x", "content": "y", "force": true}, "permission_denied")
	mustToolError(t, csB, "file_read", map[string]any{"workspace": "nope", "path": "x"}, "not_found")

	// The endpoint is stateless by default: no session to share (web's
	// TestMCPErrorsAreJSON checks that a stateful session is refused to
	// another key).
	if sid := csA.ID(); sid != "" {
		t.Fatalf("stateless /mcp gave a session id %q", sid)
	}
	// Bad arguments come back as tool errors the model can act on.
	mustToolError(t, csA, "files_edit", map[string]any{"workspace": "a1", "edits": []map[string]any{{"op": "write", "path": "../x", "content": "y"}}, "force": true}, "invalid_argument")
	mustToolError(t, csA, "files_edit", map[string]any{"workspace": "a1", "edits": []map[string]any{{"op": "delete", "path": "missing.txt"}}, "force": true}, "not_found")
}

// TestMCPStdio runs `lockstep mcp` as an agent's MCP client would start it
// and uses the tools that act on the agent's machine.
func TestMCPStdio(t *testing.T) {
	s := e2ekit.StartServer(t, e2ekit.ServerOpts{})
	s.CreateRepo(t, "shop")
	s.PushWith(t, s.AdminKey, "shop", e2ekit.PushQuery("main", "", "force=true"), map[string]string{"a.txt": "a\n"})
	agent := s.CreateKey(t, "agent-stdio", "agent")

	cmd := exec.Command(e2ekit.Binary, "mcp")
	cmd.Env = append(e2ekit.CleanEnv(), "LOCKSTEP_URL="+s.URL, "LOCKSTEP_KEY="+agent.Secret)
	cmd.Dir = t.TempDir() // relative dirs below are the agent's, relative to here
	c := mcp.NewClient(&mcp.Implementation{Name: "e2e-stdio", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("start lockstep mcp: %v", err)
	}
	defer cs.Close()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
	}
	if !slices.Contains(names, "push_directory") || !slices.Contains(names, "run_command") {
		t.Fatalf("stdio tools lack push_directory/run_command: %v", names)
	}
	mustTool(t, cs, "workspace_create", map[string]any{"repo": "shop", "name": "s1"}, nil)

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.txt"), []byte("from disk\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	text := mustTool(t, cs, "push_directory", map[string]any{"dir": dir, "workspace": "s1", "message": "local work"}, nil)
	if !regexp.MustCompile(`[0-9a-f]{40}`).MatchString(text) {
		t.Fatalf("push_directory answer names no commit:\n%s", text)
	}
	if got := s.Blob(t, "s1", "main", "a.txt"); got != "from disk\n" {
		t.Fatalf("after push_directory a.txt = %q", got)
	}
	// A failing command is reported with its exit status, and the
	// directory is rolled back.
	text, _ = toolCall(t, cs, "run_command", map[string]any{"dir": dir, "workspace": "s1",
		"command": []string{"sh", "-c", "echo junk > a.txt; echo boom >&2; exit 3"}})
	if !strings.Contains(text, "3") {
		t.Errorf("run_command of a failing command does not report exit status 3:\n%s", text)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "a.txt")); string(b) != "from disk\n" {
		t.Errorf("after a failed run a.txt = %q, want it rolled back", b)
	}
	// An error of the CLI comes back as a tool error with a next step.
	mustToolError(t, cs, "push_directory", map[string]any{"dir": dir, "workspace": "nope"}, "not_found")

	// A dir that looks like a flag is a directory: it was passed as a bare
	// argument, so "--force" became the push's --force and no directory.
	flagLike := filepath.Join(cmd.Dir, "--force")
	if err := os.Mkdir(flagLike, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(flagLike, "b.txt"), []byte("dashed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	text = mustTool(t, cs, "push_directory", map[string]any{"dir": "--force", "workspace": "s1", "message": "dashed dir"}, nil)
	if !regexp.MustCompile(`[0-9a-f]{40}`).MatchString(text) {
		t.Fatalf("push_directory of ./--force names no commit:\n%s", text)
	}
	if got := s.Blob(t, "s1", "main", "b.txt"); got != "dashed\n" {
		t.Fatalf("after push_directory of ./--force b.txt = %q", got)
	}
}

// TestEditsConcurrent: forced edit batches racing on one branch are each
// re-applied on the tip they lose to, so every file written survives; with
// one expect_oid, exactly one of several racers wins.
func TestEditsConcurrent(t *testing.T) {
	s := e2ekit.StartServer(t, e2ekit.ServerOpts{})
	s.CreateRepo(t, "shop")
	s.PushWith(t, s.AdminKey, "shop", e2ekit.PushQuery("main", "", "force=true"), map[string]string{"a.txt": "a\n"})
	const n = 6
	errs := make(chan error, n)
	for i := range n {
		go func() {
			r, err := s.Try("POST", "/api/v1/repos/shop/edits", s.AdminKey, map[string]any{"force": true,
				"edits": []map[string]any{{"op": "write", "path": "f" + string(rune('0'+i)), "content": "x"}}}, "application/json")
			if err == nil && r.Status != http.StatusCreated {
				err = &httpStatusError{r.String()}
			}
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	var entries struct {
		Entries []struct{ Name string } `json:"entries"`
	}
	s.MustJSON(t, "GET", "/api/v1/repos/shop/tree/main", s.AdminKey, nil, http.StatusOK, &entries)
	if len(entries.Entries) != n+1 {
		t.Fatalf("after %d forced edits the tree has %v: a write was lost", n, entries.Entries)
	}

	tip := s.Head(t, "shop")
	wins := make(chan int, n)
	for i := range n {
		go func() {
			r, err := s.Try("POST", "/api/v1/repos/shop/edits", s.AdminKey, map[string]any{"expect_oid": tip,
				"edits": []map[string]any{{"op": "write", "path": "race", "content": string(rune('a' + i))}}}, "application/json")
			if err != nil {
				wins <- -1
				return
			}
			wins <- r.Status
		}()
	}
	created, conflicts := 0, 0
	for range n {
		switch <-wins {
		case http.StatusCreated:
			created++
		case http.StatusConflict:
			conflicts++
		}
	}
	if created != 1 || conflicts != n-1 {
		t.Fatalf("CAS race: %d created, %d conflicts, want 1 and %d", created, conflicts, n-1)
	}
}

type httpStatusError struct{ s string }

func (e *httpStatusError) Error() string { return e.s }

// TestMCPLoopAcrossRestart: an HTTP-only MCP client drives an agent's loop
// through a load balancer while the server behind it is restarted: write
// with compare-and-swap (a write without expect_oid is refused and names
// the tip), the base moves, the server restarts, and the client — without
// re-initializing — follows the merge_conflict advice (sync with markers,
// resolve, sync resolved) to a clean preflight and promotes (issue 24
// items 3, 4 and 5).
func TestMCPLoopAcrossRestart(t *testing.T) {
	s := e2ekit.StartServer(t, e2ekit.ServerOpts{})
	s.CreateRepo(t, "shop")
	s.PushWith(t, s.AdminKey, "shop", e2ekit.PushQuery("main", "", "force=true"), map[string]string{"app.txt": "one\ntwo\nthree\n"})
	agent := s.CreateKey(t, "agent-loop", "agent")
	var target atomic.Pointer[url.URL]
	u, _ := url.Parse(s.URL)
	target.Store(u)
	lb := httptest.NewServer(&httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(target.Load()) }})
	defer lb.Close()
	lbServer := *s
	lbServer.URL = lb.URL
	cs := mcpHTTP(t, &lbServer, agent.Secret)

	mustTool(t, cs, "workspace_create", map[string]any{"repo": "shop", "name": "loop"}, nil)
	text := mustToolError(t, cs, "file_write", map[string]any{"workspace": "loop", "path": "app.txt", "content": "x\n"}, "precondition_required")
	m := regexp.MustCompile(`expect_oid=([0-9a-f]{40})`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("the refusal names no tip:\n%s", text)
	}
	var w struct{ Commit string }
	mustTool(t, cs, "file_write", map[string]any{"workspace": "loop", "path": "app.txt", "content": "one\nTWO (agent)\nthree\n", "expect_oid": m[1]}, &w)
	// The base moves with a conflicting change.
	s.PushWith(t, s.AdminKey, "shop", e2ekit.PushQuery("main", "", "force", "true"), map[string]string{"app.txt": "one\ntwo (base)\nthree\n"})

	// Restart behind the load balancer.
	if code := s.Stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("graceful stop: exit %d", code)
	}
	s2 := s.Restart(t)
	u2, _ := url.Parse(s2.URL)
	target.Store(u2)

	text = mustToolError(t, cs, "sync", map[string]any{"workspace": "loop", "expect_oid": w.Commit}, "merge_conflict")
	if !strings.Contains(text, `on_conflict="markers"`) {
		t.Fatalf("merge_conflict advice:\n%s", text)
	}
	var synced struct {
		Clean  bool
		Commit string
	}
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "sync", Arguments: map[string]any{"workspace": "loop", "expect_oid": w.Commit, "on_conflict": "markers"}})
	if err != nil || res.IsError {
		t.Fatalf("sync with markers: %v %+v", err, res)
	}
	if err := json.Unmarshal([]byte(res.Content[0].(*mcp.TextContent).Text), &synced); err != nil || synced.Clean || synced.Commit == "" {
		t.Fatalf("sync with markers: %v %+v", err, synced)
	}
	if got, _ := toolCall(t, cs, "file_read", map[string]any{"workspace": "loop", "path": "app.txt", "rev": "conflicts/main"}); !strings.Contains(got, "<<<<<<<") {
		t.Fatalf("no conflict markers on conflicts/main:\n%s", got)
	}
	mustTool(t, cs, "files_edit", map[string]any{"workspace": "loop", "branch": "conflicts/main", "expect_oid": synced.Commit,
		"edits": []map[string]any{{"op": "write", "path": "app.txt", "content": "one\nTWO (agent, after base)\nthree\n"}}}, nil)
	mustTool(t, cs, "sync", map[string]any{"workspace": "loop", "resolved": true}, nil)
	var pre struct{ Clean bool }
	mustTool(t, cs, "merge_preflight", map[string]any{"workspace": "loop"}, &pre)
	if !pre.Clean {
		t.Fatal("merge_preflight not clean after following the advice")
	}
	mustTool(t, cs, "promote", map[string]any{"workspace": "loop"}, nil)
	if got := s2.Blob(t, "shop", "main", "app.txt"); got != "one\nTWO (agent, after base)\nthree\n" {
		t.Fatalf("base after promote: %q", got)
	}
}
