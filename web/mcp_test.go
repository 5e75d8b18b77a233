package web_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/agentmcp"
	"github.com/lockstep-hq/lockstep/auth"
	"github.com/lockstep-hq/lockstep/gate"
	"github.com/lockstep-hq/lockstep/gitstore"
	"github.com/lockstep-hq/lockstep/repositories"
	"github.com/lockstep-hq/lockstep/sqlstore"
	"github.com/lockstep-hq/lockstep/telemetry"
	"github.com/lockstep-hq/lockstep/web"
	"github.com/lockstep-hq/lockstep/workspaces"
)

// mcpFixture is a real server (SQLite, git on disk) with /mcp.
type mcpFixture struct {
	*fixture
	mcp     *agentmcp.Handler
	keys    *auth.Service
	current atomic.Pointer[http.Handler]
	build   func() http.Handler // a new server instance on the same data (a restart)
}

func mcpServer(t *testing.T, cfg web.Config, o agentmcp.HTTPOptions) *mcpFixture {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	db, err := sqlstore.Open(ctx, filepath.Join(dir, "m.db"), sqlstore.Options{Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	keys := auth.New(db, nil)
	_, admin, _ := keys.Create(ctx, auth.System, "admin", lockstep.RoleAdmin)
	_, agent, _ := keys.Create(ctx, auth.System, "agent", lockstep.RoleAgent)
	f := &mcpFixture{keys: keys}
	var repos []*repositories.Service
	t.Cleanup(func() {
		for _, r := range repos {
			r.Close()
		}
	})
	f.build = func() http.Handler {
		m := telemetry.NewMetrics()
		r := repositories.New(repositories.Config{Objects: gitstore.Local{}, DataDir: dir}, db, nil, m, nil)
		repos = append(repos, r)
		s := &web.Server{Config: cfg, Store: db, Keys: keys, Metrics: m, Repos: r, Workspaces: workspaces.New(db, r, nil, nil, m, nil),
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Gate: gate.New(gate.Config{}, db, r, nil, m, nil),
			MCP: func(api http.Handler) http.Handler { f.mcp = agentmcp.HTTPHandler(api, o); return f.mcp }}
		return s.Handler()
	}
	h := f.build()
	f.current.Store(&h)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { (*f.current.Load()).ServeHTTP(w, r) }))
	t.Cleanup(srv.Close)
	f.fixture = &fixture{srv: srv, handler: h, admin: admin, agent: agent}
	return f
}

// restart replaces the server behind the URL with a new instance on the
// same data: what a client sees of a restart or of another replica.
func (f *mcpFixture) restart() {
	h := f.build()
	f.current.Store(&h)
}

type bearerRT struct{ key string }

func (b bearerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return http.DefaultTransport.RoundTrip(r)
}

func (f *mcpFixture) connect(t *testing.T, key string) *mcp.ClientSession {
	t.Helper()
	cs, err := f.tryConnect(key)
	if err != nil {
		t.Fatalf("connect MCP: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func (f *mcpFixture) tryConnect(key string) (*mcp.ClientSession, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := mcp.NewClient(&mcp.Implementation{Name: "web-test", Version: "1"}, nil)
	return c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: f.srv.URL + "/mcp",
		HTTPClient: &http.Client{Transport: bearerRT{key}}, DisableStandaloneSSE: true, MaxRetries: -1}, nil)
}

// call calls a tool: its text, and whether it is a tool error.
func call(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) (string, bool) {
	t.Helper()
	res := callResult(t, cs, name, args)
	var sb strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			sb.WriteString(tc.Text)
		}
	}
	return sb.String(), res.IsError
}

func callResult(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: protocol error: %v", name, err)
	}
	return res
}

func mustCall(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any, out any) string {
	t.Helper()
	text, isErr := call(t, cs, name, args)
	if isErr {
		t.Fatalf("%s: tool error:\n%s", name, text)
	}
	if out != nil {
		if err := json.Unmarshal([]byte(text), out); err != nil {
			t.Fatalf("%s: not JSON: %v\n%s", name, err, text)
		}
	}
	return text
}

func mustCallError(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any, code string) string {
	t.Helper()
	text, isErr := call(t, cs, name, args)
	if !isErr || !strings.HasPrefix(text, "error "+code+":") {
		t.Fatalf("%s: want tool error %s, got (error %v):\n%s", name, code, isErr, text)
	}
	return text
}

// seed creates the base repository shop with files and a workspace ws of
// the agent; it returns the workspace's tip.
func (f *mcpFixture) seed(t *testing.T, cs *mcp.ClientSession, files map[string]string) string {
	t.Helper()
	if code, m, _ := f.do(t, "POST", "/api/v1/repos", f.admin, `{"name":"shop"}`); code != http.StatusCreated {
		t.Fatalf("create: %d %v", code, m)
	}
	var edits []map[string]any
	for p, c := range files {
		edits = append(edits, map[string]any{"op": "write", "path": p, "content": c})
	}
	b, _ := json.Marshal(map[string]any{"edits": edits, "message": "seed", "expect_oid": lockstep.ZeroOID})
	if code, m := f.post(t, "/api/v1/repos/shop/edits", f.admin, b); code != http.StatusOK && code != http.StatusCreated {
		t.Fatalf("seed: %d %v", code, m)
	}
	mustCall(t, cs, "workspace_create", map[string]any{"repo": "shop", "name": "ws"}, nil)
	return f.tip(t, "ws")
}

// post sends a JSON body of any size as admin or another key.
func (f *mcpFixture) post(t *testing.T, path, key string, body []byte) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest("POST", f.srv.URL+path, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	json.NewDecoder(resp.Body).Decode(&m)
	return resp.StatusCode, m
}

// tip is the oid of a repository's main.
func (f *mcpFixture) tip(t *testing.T, repo string) string {
	t.Helper()
	code, m, _ := f.do(t, "GET", "/api/v1/repos/"+repo+"/refs", f.admin, "")
	if code != http.StatusOK {
		t.Fatalf("refs of %s: %d %v", repo, code, m)
	}
	refs, _ := m["refs"].([]any)
	for _, r := range refs {
		r := r.(map[string]any)
		if r["name"] == "refs/heads/main" {
			return r["oid"].(string)
		}
	}
	t.Fatalf("%s has no main: %v", repo, m)
	return ""
}

// holdUploadSlot holds the only upload slot with a tar upload whose body
// stalls, until the returned function is called.
func (f *mcpFixture) holdUploadSlot(t *testing.T) (release func()) {
	t.Helper()
	if code, m, _ := f.do(t, "POST", "/api/v1/repos", f.admin, `{"name":"holder"}`); code != http.StatusCreated {
		t.Fatalf("create: %d %v", code, m)
	}
	tarBytes := oneFileTar(t, "a.txt", "hello\n")
	pr, pw := io.Pipe()
	req, _ := http.NewRequest("PUT", f.srv.URL+"/api/v1/repos/holder/worktree?branch=main&expect_oid="+lockstep.ZeroOID, pr)
	req.Header.Set("Authorization", "Bearer "+f.admin)
	req.Header.Set("Content-Type", "application/x-tar")
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	pw.Write(tarBytes[:512])
	held := false
	for i := 0; i < 3000 && !held; i++ {
		held = uploadsInProgress(t, f.fixture) == 1
		if !held {
			time.Sleep(10 * time.Millisecond)
		}
	}
	if !held {
		pw.Close()
		t.Fatal("the holder upload never held the slot")
	}
	var once atomic.Bool
	release = func() {
		if once.CompareAndSwap(false, true) {
			pw.Write(tarBytes[512:])
			pw.Close()
			<-done
		}
	}
	t.Cleanup(release)
	return release
}

// Issue 21 item 3: an MCP request that may carry file contents takes an
// upload slot (--max-concurrent-uploads) before its body is read, like an
// upload; the in-process edits call it makes runs under that slot; a
// small request whose write meets no free slot gets a tool error at once,
// not in-process retries.
func TestMCPWritesTakeUploadSlots(t *testing.T) {
	f := mcpServer(t, web.Config{MaxConcurrentUploads: 1, MaxJSONBytes: 4096}, agentmcp.HTTPOptions{})
	cs := f.connect(t, f.agent)
	tip := f.seed(t, cs, map[string]string{"a.txt": "a\n"})

	release := f.holdUploadSlot(t)
	// A large MCP request is refused before its body is read: the body
	// below never finishes, and the answer comes anyway.
	pr, pw := io.Pipe()
	defer pw.Close()
	req, _ := http.NewRequest("POST", f.srv.URL+"/mcp", pr)
	req.ContentLength = 1 << 20
	req.Header.Set("Authorization", "Bearer "+f.agent)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	go pw.Write([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"file_write","arguments":{"content":"`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	json.NewDecoder(resp.Body).Decode(&m)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || errCode(m) != "unavailable" || resp.Header.Get("Retry-After") == "" ||
		!strings.Contains(errMessage(m), "max-concurrent-uploads") {
		t.Fatalf("large MCP write while no upload slot is free: %d %v Retry-After %q, want 503 unavailable", resp.StatusCode, m, resp.Header.Get("Retry-After"))
	}

	// A small write meets the full slots on the edits route: one tool
	// error, one attempt.
	edits503 := func() float64 {
		return metricValue(t, f.fixture, `lockstep_http_requests_total{method="POST",route="/api/v1/repos/:repo/edits",status="503"}`)
	}
	before := edits503()
	text := mustCallError(t, cs, "file_write", map[string]any{"workspace": "ws", "path": "b.txt", "content": "small\n", "expect_oid": tip}, "unavailable")
	if !strings.Contains(text, "max-concurrent-uploads") {
		t.Fatalf("refusal does not name the setting:\n%s", text)
	}
	if n := edits503() - before; n != 1 {
		t.Fatalf("the in-process edits call was attempted %v times, want 1 (no retries)", n)
	}
	if got := f.tip(t, "ws"); got != tip {
		t.Fatalf("a refused write moved the workspace: %s → %s", tip, got)
	}

	// With the slot free, a large write holds the slot for its MCP request
	// and its in-process edits call runs under it (with one slot in all).
	release()
	big := strings.Repeat("0123456789abcdef\n", 1<<12) // 68 KiB, over --max-json-bytes
	var out struct {
		Commit string `json:"commit"`
	}
	mustCall(t, cs, "file_write", map[string]any{"workspace": "ws", "path": "big.txt", "content": big, "expect_oid": tip}, &out)
	if out.Commit == "" || f.tip(t, "ws") != out.Commit {
		t.Fatalf("large write: commit %q, tip %s", out.Commit, f.tip(t, "ws"))
	}
	got := mustCall(t, cs, "file_read", map[string]any{"workspace": "ws", "path": "big.txt"}, nil)
	if got != big {
		t.Fatalf("read back %d bytes, want %d", len(got), len(big))
	}
	if n := uploadsInProgress(t, f.fixture); n != 0 {
		t.Fatalf("%v upload slots held after the calls ended", n)
	}
}

// Issue 21 item 7: the file resource has file_read's cap and stops
// reading at it; file_read reads line ranges within it.
func TestMCPFileReadsBounded(t *testing.T) {
	f := mcpServer(t, web.Config{}, agentmcp.HTTPOptions{MaxReadBytes: 1024})
	cs := f.connect(t, f.agent)
	var sb strings.Builder
	for i := 1; i <= 2000; i++ {
		fmt.Fprintf(&sb, "line %d\n", i)
	}
	f.seed(t, cs, map[string]string{"big.txt": sb.String(), "small.txt": "small\n"})
	ctx := context.Background()

	_, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "lockstep://ws/files/big.txt"})
	if err == nil || !strings.Contains(err.Error(), "at most 1024 bytes") {
		t.Fatalf("resource of a file over the cap: %v, want a refusal naming the cap", err)
	}
	res, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "lockstep://ws/files/small.txt"})
	if err != nil || len(res.Contents) != 1 || res.Contents[0].Text != "small\n" {
		t.Fatalf("resource of a small file: %v %+v", err, res)
	}
	text := mustCallError(t, cs, "file_read", map[string]any{"workspace": "ws", "path": "big.txt"}, "too_large")
	if !strings.Contains(text, "start_line") {
		t.Fatalf("refusal does not point to line ranges:\n%s", text)
	}
	got := mustCall(t, cs, "file_read", map[string]any{"workspace": "ws", "path": "big.txt", "start_line": 1500, "end_line": 1502}, nil)
	if got != "line 1500\nline 1501\nline 1502\n" {
		t.Fatalf("lines 1500-1502: %q", got)
	}
	mustCallError(t, cs, "file_read", map[string]any{"workspace": "ws", "path": "big.txt", "start_line": 10, "end_line": 1000}, "too_large")
}

// Issue 21 item 16: a NUL (or another control character) in a resource
// URI is a clean JSON-RPC error, and the session goes on answering. (The
// Go SDK client itself refuses such a URI when it negotiates the newest
// protocol, stateless; the raw request is what another client may send.)
func TestMCPResourceURIWithNUL(t *testing.T) {
	for _, stateful := range []bool{false, true} {
		t.Run(fmt.Sprintf("stateful=%v", stateful), func(t *testing.T) {
			f := mcpServer(t, web.Config{}, agentmcp.HTTPOptions{Stateful: stateful})
			cs := f.connect(t, f.agent)
			f.seed(t, cs, map[string]string{"a.txt": "a\n"})
			ctx := context.Background()
			for i, uri := range []string{"lockstep://ws/files/a\x00.txt", "lockstep://ws\x00/files/a.txt", "lockstep://ws/files/\x00", "lockstep://ws/oplog?before=\x00", "lockstep://\xff/files/a"} {
				if stateful {
					_, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri})
					var je *jsonrpc.Error
					if !errors.As(err, &je) || je.Code != jsonrpc.CodeInvalidParams {
						t.Fatalf("resources/read %q: %v, want a JSON-RPC invalid-params error", uri, err)
					}
				}
				body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 100 + i, "method": "resources/read", "params": map[string]any{"uri": uri}})
				req, _ := http.NewRequest("POST", f.srv.URL+"/mcp", bytes.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+f.agent)
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Accept", "application/json, text/event-stream")
				req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
				if stateful {
					req.Header.Set("Mcp-Session-Id", cs.ID())
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				var rpc struct {
					ID    int `json:"id"`
					Error *struct {
						Code int `json:"code"`
					} `json:"error"`
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err := json.Unmarshal(b, &rpc); err != nil || rpc.ID != 100+i || rpc.Error == nil || rpc.Error.Code != jsonrpc.CodeInvalidParams {
					t.Fatalf("raw resources/read %q: %d %q, want a JSON-RPC invalid-params error", uri, resp.StatusCode, b)
				}
				res, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "lockstep://ws/files/a.txt"})
				if err != nil || len(res.Contents) != 1 || res.Contents[0].Text != "a\n" {
					t.Fatalf("after %q: resources/read %v %+v", uri, err, res)
				}
				if got := mustCall(t, cs, "file_read", map[string]any{"workspace": "ws", "path": "a.txt"}, nil); got != "a\n" {
					t.Fatalf("after %q: file_read %q", uri, got)
				}
			}
		})
	}
}

// Issue 24 item 4: MCP writes need expect_oid or force=true; the refusal
// names the tip to pass.
func TestMCPWritesNeedExpectOID(t *testing.T) {
	f := mcpServer(t, web.Config{}, agentmcp.HTTPOptions{})
	cs := f.connect(t, f.agent)
	tip := f.seed(t, cs, map[string]string{"a.txt": "a\n", "run.sh": "#!/bin/sh\necho hi\n"})
	for _, tc := range []struct {
		tool string
		args map[string]any
	}{
		{"file_write", map[string]any{"workspace": "ws", "path": "a.txt", "content": "b\n"}},
		{"files_edit", map[string]any{"workspace": "ws", "edits": []map[string]any{{"op": "write", "path": "a.txt", "content": "b\n"}}}},
		{"file_delete", map[string]any{"workspace": "ws", "path": "a.txt"}},
		{"file_replace", map[string]any{"workspace": "ws", "path": "a.txt", "old": "a", "new": "b"}},
		{"rollback", map[string]any{"workspace": "ws", "to": tip}},
		{"checkpoint_restore", map[string]any{"workspace": "ws", "id": "cp-x"}},
	} {
		text := mustCallError(t, cs, tc.tool, tc.args, "precondition_required")
		if !strings.Contains(text, "expect_oid="+tip) || !strings.Contains(text, "force") {
			t.Fatalf("%s without expect_oid: the refusal does not name the tip %s and force:\n%s", tc.tool, tip, text)
		}
	}
	if got := f.tip(t, "ws"); got != tip {
		t.Fatalf("a refused write moved the workspace: %s → %s", tip, got)
	}
	var out struct {
		Commit string `json:"commit"`
	}
	mustCall(t, cs, "file_write", map[string]any{"workspace": "ws", "path": "a.txt", "content": "b\n", "expect_oid": tip}, &out)
	mustCallError(t, cs, "file_write", map[string]any{"workspace": "ws", "path": "a.txt", "content": "c\n", "expect_oid": tip}, "ref_conflict")
	mustCall(t, cs, "file_write", map[string]any{"workspace": "ws", "path": "a.txt", "content": "c\n", "force": true}, &out)
	// file_replace reads at expect_oid and keeps the file's mode.
	code, m, _ := f.do(t, "GET", "/api/v1/repos/ws/tree/HEAD", f.admin, "")
	if code != http.StatusOK {
		t.Fatal(code, m)
	}
	mustCall(t, cs, "file_replace", map[string]any{"workspace": "ws", "path": "a.txt", "old": "c", "new": "d", "expect_oid": out.Commit}, &out)
	if got := mustCall(t, cs, "file_read", map[string]any{"workspace": "ws", "path": "a.txt"}, nil); got != "d\n" {
		t.Fatalf("after file_replace: %q", got)
	}
	mustCallError(t, cs, "file_replace", map[string]any{"workspace": "ws", "path": "a.txt", "old": "zzz", "new": "d", "expect_oid": out.Commit}, "not_found")
}

// Issue 24 item 3: a conflict with a moved base is resolved through MCP
// by following the tools' own advice literally; preflight is then clean.
func TestMCPSyncAdviceLeadsToCleanPreflight(t *testing.T) {
	f := mcpServer(t, web.Config{}, agentmcp.HTTPOptions{})
	cs := f.connect(t, f.agent)
	tip := f.seed(t, cs, map[string]string{"app.txt": "one\ntwo\nthree\n"})
	var out struct {
		Commit string `json:"commit"`
	}
	mustCall(t, cs, "file_write", map[string]any{"workspace": "ws", "path": "app.txt", "content": "one\nTWO (agent)\nthree\n", "expect_oid": tip}, &out)
	// The base moves with a conflicting edit.
	b, _ := json.Marshal(map[string]any{"edits": []map[string]any{{"op": "write", "path": "app.txt", "content": "one\ntwo (base)\nthree\n"}}, "force": true})
	if code, m := f.post(t, "/api/v1/repos/shop/edits", f.admin, b); code != http.StatusOK && code != http.StatusCreated {
		t.Fatalf("base edit: %d %v", code, m)
	}
	var pre struct {
		Clean     bool             `json:"clean"`
		Conflicts []map[string]any `json:"conflicts"`
	}
	mustCall(t, cs, "merge_preflight", map[string]any{"workspace": "ws"}, &pre)
	if pre.Clean || len(pre.Conflicts) != 1 {
		t.Fatalf("preflight before: %+v", pre)
	}
	// sync without markers refuses with the advice.
	text := mustCallError(t, cs, "sync", map[string]any{"workspace": "ws", "expect_oid": out.Commit}, "merge_conflict")
	if !strings.Contains(text, `on_conflict="markers"`) || !strings.Contains(text, "resolved=true") {
		t.Fatalf("merge_conflict advice:\n%s", text)
	}
	// Step 1.
	res := callResult(t, cs, "sync", map[string]any{"workspace": "ws", "expect_oid": out.Commit, "on_conflict": "markers"})
	if res.IsError || len(res.Content) != 2 {
		t.Fatalf("sync with markers: %+v", res)
	}
	var synced struct {
		Clean   bool   `json:"clean"`
		SideRef string `json:"side_ref"`
		Commit  string `json:"commit"`
	}
	if err := json.Unmarshal([]byte(res.Content[0].(*mcp.TextContent).Text), &synced); err != nil || synced.Clean || synced.Commit == "" {
		t.Fatalf("sync with markers: %v %+v", err, synced)
	}
	next := res.Content[1].(*mcp.TextContent).Text
	side := "conflicts/main"
	if !strings.Contains(next, `rev="`+side+`"`) || !strings.Contains(next, `branch="`+side+`"`) || !strings.Contains(next, synced.Commit) {
		t.Fatalf("next step after markers:\n%s", next)
	}
	// Step 2: read with rev=conflicts/main, write the resolution there.
	conflicted := mustCall(t, cs, "file_read", map[string]any{"workspace": "ws", "path": "app.txt", "rev": side}, nil)
	if !strings.Contains(conflicted, "<<<<<<<") {
		t.Fatalf("no markers on %s:\n%s", side, conflicted)
	}
	mustCall(t, cs, "files_edit", map[string]any{"workspace": "ws", "branch": side, "expect_oid": synced.Commit,
		"edits": []map[string]any{{"op": "write", "path": "app.txt", "content": "one\nTWO (agent, after base)\nthree\n"}}}, &out)
	// Step 3.
	mustCall(t, cs, "sync", map[string]any{"workspace": "ws", "resolved": true}, nil)
	pre.Conflicts = nil
	mustCall(t, cs, "merge_preflight", map[string]any{"workspace": "ws"}, &pre)
	if !pre.Clean || len(pre.Conflicts) != 0 {
		t.Fatalf("preflight after following the advice: %+v", pre)
	}
	if got := mustCall(t, cs, "file_read", map[string]any{"workspace": "ws", "path": "app.txt"}, nil); got != "one\nTWO (agent, after base)\nthree\n" {
		t.Fatalf("workspace after sync: %q", got)
	}
	// Promote lands it.
	mustCall(t, cs, "promote", map[string]any{"workspace": "ws"}, nil)
}

// Issue 21 item 4: stateful MCP sessions are capped per key and in all
// (429 rate_limited with Retry-After), and idle ones expire.
func TestMCPSessionCaps(t *testing.T) {
	f := mcpServer(t, web.Config{}, agentmcp.HTTPOptions{Stateful: true, MaxSessions: 3, MaxSessionsPerKey: 2, SessionTimeout: time.Hour})
	ctx := context.Background()
	_, other, _ := f.keys.Create(ctx, auth.System, "agent-b", lockstep.RoleAgent)
	a1 := f.connect(t, f.agent)
	f.connect(t, f.agent)
	initialize := func(key string) (int, map[string]any, http.Header) {
		t.Helper()
		req, _ := http.NewRequest("POST", f.srv.URL+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		json.NewDecoder(resp.Body).Decode(&m)
		return resp.StatusCode, m, resp.Header
	}
	code, m, hdr := initialize(f.agent)
	if code != http.StatusTooManyRequests || errCode(m) != "rate_limited" || hdr.Get("Retry-After") == "" || !strings.Contains(errMessage(m), "--mcp-max-sessions-per-key") {
		t.Fatalf("third session of one key: %d %v Retry-After %q, want 429 rate_limited", code, m, hdr.Get("Retry-After"))
	}
	f.connect(t, other)
	code, m, _ = initialize(other)
	if code != http.StatusTooManyRequests || !strings.Contains(errMessage(m), "--mcp-max-sessions)") {
		t.Fatalf("fourth session in all: %d %v, want 429 naming --mcp-max-sessions", code, m)
	}
	// Closing a session frees its place.
	a1.Close()
	if code, m, _ := initialize(f.agent); code != http.StatusOK {
		t.Fatalf("a session after one was closed: %d %v", code, m)
	}
}

func TestMCPIdleSessionsExpire(t *testing.T) {
	f := mcpServer(t, web.Config{}, agentmcp.HTTPOptions{Stateful: true, MaxSessions: 1, SessionTimeout: 200 * time.Millisecond})
	f.connect(t, f.agent)
	var err error
	for i := 0; i < 600; i++ { // wait for the idle session to be closed
		var cs *mcp.ClientSession
		if cs, err = f.tryConnect(f.agent); err == nil {
			cs.Close()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no new session after the only one went idle: %v", err)
}

// Issue 24 item 5: by default /mcp keeps no session: a client goes on
// across a restart (or to another replica) without re-initializing.
func TestMCPSurvivesRestart(t *testing.T) {
	f := mcpServer(t, web.Config{}, agentmcp.HTTPOptions{})
	cs := f.connect(t, f.agent)
	tip := f.seed(t, cs, map[string]string{"a.txt": "a\n"})
	f.restart()
	mustCall(t, cs, "file_write", map[string]any{"workspace": "ws", "path": "a.txt", "content": "b\n", "expect_oid": tip}, nil)
	if got := mustCall(t, cs, "file_read", map[string]any{"workspace": "ws", "path": "a.txt"}, nil); got != "b\n" {
		t.Fatalf("after restart: %q", got)
	}
}

// trackedServer serves h and counts its connections with a request in
// progress (an open event stream keeps one active).
func trackedServer(h http.Handler) (*http.Server, func() int) {
	var mu sync.Mutex
	states := map[net.Conn]http.ConnState{}
	active := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, st := range states {
			if st == http.StateActive {
				n++
			}
		}
		return n
	}
	return &http.Server{Handler: h, ConnState: func(c net.Conn, st http.ConnState) {
		mu.Lock()
		states[c] = st
		mu.Unlock()
	}}, active
}

// openMCPStream serves h on a tracked server and connects an MCP client
// with key that initializes, lists the tools and opens its standalone
// event stream (a GET that stays active): it returns once that stream is
// open, with the server and its count of active connections.
func openMCPStream(t *testing.T, ctx context.Context, h http.Handler, key string) (*http.Server, *httptest.Server, func() int) {
	t.Helper()
	srv, active := trackedServer(h)
	ts := httptest.NewUnstartedServer(nil)
	ts.Config = srv
	ts.Start()
	c := mcp.NewClient(&mcp.Implementation{Name: "sse", Version: "1"}, nil)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: ts.URL + "/mcp", HTTPClient: &http.Client{Transport: bearerRT{key}}, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	if _, err := cs.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	for i := 0; active() < 1; i++ {
		if i > 3000 {
			t.Fatal("the client never opened its event stream")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return srv, ts, active
}

// Issue 24 item 5: Shutdown ends stateful sessions' open streams, so a
// graceful server shutdown does not wait for them.
func TestMCPShutdownEndsStreams(t *testing.T) {
	f := mcpServer(t, web.Config{}, agentmcp.HTTPOptions{Stateful: true})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv, _, _ := openMCPStream(t, ctx, *f.current.Load(), f.agent)
	srv.RegisterOnShutdown(f.mcp.Shutdown)
	sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer scancel()
	if err := srv.Shutdown(sctx); err != nil {
		t.Fatalf("graceful shutdown with an open MCP stream: %v", err)
	}
}

// Issue 24 item 7: 401s name the Bearer scheme; /mcp's own errors are the
// JSON error envelope.
func TestMCPErrorsAreJSON(t *testing.T) {
	f := mcpServer(t, web.Config{}, agentmcp.HTTPOptions{Stateful: true})
	for _, p := range []string{"/mcp", "/api/v1/repos"} {
		req, _ := http.NewRequest("POST", f.srv.URL+p, strings.NewReader(`{}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
			t.Fatalf("%s without a key: %d WWW-Authenticate %q", p, resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
		}
	}
	raw := func(method, key, sid, body string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(method, f.srv.URL+"/mcp", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if sid != "" {
			req.Header.Set("Mcp-Session-Id", sid)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
			t.Fatalf("%s /mcp: %d %s body %q is not the JSON envelope", method, resp.StatusCode, resp.Header.Get("Content-Type"), b)
		}
		return resp.StatusCode, m
	}
	list := `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`
	if code, m := raw("POST", f.agent, "nope", list); code != http.StatusNotFound || errCode(m) != "not_found" {
		t.Fatalf("unknown session: %d %v", code, m)
	}
	cs := f.connect(t, f.agent)
	_, other, _ := f.keys.Create(context.Background(), auth.System, "agent-b", lockstep.RoleAgent)
	if code, m := raw("POST", other, cs.ID(), list); code != http.StatusForbidden || errCode(m) != "permission_denied" {
		t.Fatalf("another key's session: %d %v", code, m)
	}
	if code, m := raw("GET", f.agent, "", ""); code != http.StatusBadRequest || errCode(m) != "invalid_argument" {
		t.Fatalf("GET without a session: %d %v", code, m)
	}
}

// Issue 24 item 7: the smaller tools: recursive tree, repositories, the
// oplog newest first with paging, structured content.
func TestMCPMoreTools(t *testing.T) {
	f := mcpServer(t, web.Config{}, agentmcp.HTTPOptions{})
	admin := f.connect(t, f.admin)
	cs := f.connect(t, f.agent)
	tip := f.seed(t, cs, map[string]string{"a.txt": "a\n", "src/b.go": "package b\n", "src/deep/c.go": "package c\n"})
	var tree struct {
		Files []struct {
			Path string `json:"path"`
		} `json:"files"`
		Truncated bool `json:"truncated"`
	}
	mustCall(t, cs, "file_tree", map[string]any{"workspace": "ws"}, &tree)
	var paths []string
	for _, f := range tree.Files {
		paths = append(paths, f.Path)
	}
	if strings.Join(paths, ",") != "a.txt,src/b.go,src/deep/c.go" || tree.Truncated {
		t.Fatalf("file_tree: %v %v", paths, tree.Truncated)
	}
	mustCall(t, cs, "file_tree", map[string]any{"workspace": "ws", "max_entries": 1}, &tree)
	if len(tree.Files) != 1 || !tree.Truncated {
		t.Fatalf("file_tree max 1: %+v", tree)
	}
	mustCall(t, admin, "repo_create", map[string]any{"name": "other"}, nil)
	mustCallError(t, cs, "repo_create", map[string]any{"name": "mine"}, "permission_denied")
	list := mustCall(t, admin, "repo_list", nil, nil)
	if !strings.Contains(list, `"other"`) || !strings.Contains(list, `"shop"`) {
		t.Fatalf("repo_list: %s", list)
	}
	// Three writes: the oplog lists the newest first, and pages back.
	for i := 0; i < 3; i++ {
		var out struct {
			Commit string `json:"commit"`
		}
		mustCall(t, cs, "file_write", map[string]any{"workspace": "ws", "path": "a.txt", "content": fmt.Sprint(i), "expect_oid": tip}, &out)
		tip = out.Commit
	}
	type page struct {
		Entries []struct {
			Seq int64 `json:"seq"`
		} `json:"entries"`
		NextBefore int64 `json:"next_before"`
	}
	var p1, p2 page
	mustCall(t, cs, "oplog", map[string]any{"workspace": "ws", "limit": 2}, &p1)
	if len(p1.Entries) != 2 || p1.Entries[0].Seq < p1.Entries[1].Seq || p1.NextBefore == 0 {
		t.Fatalf("oplog page 1: %+v", p1)
	}
	mustCall(t, cs, "oplog", map[string]any{"workspace": "ws", "limit": 2, "before": p1.NextBefore}, &p2)
	if len(p2.Entries) == 0 || p2.Entries[0].Seq >= p1.Entries[1].Seq {
		t.Fatalf("oplog page 2: %+v after %+v", p2, p1)
	}
	res, err := cs.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: "lockstep://ws/oplog"})
	if err != nil {
		t.Fatal(err)
	}
	var r page
	if err := json.Unmarshal([]byte(res.Contents[0].Text), &r); err != nil || len(r.Entries) == 0 || r.Entries[0].Seq != p1.Entries[0].Seq {
		t.Fatalf("oplog resource does not start with the newest entry: %v %+v", err, r)
	}
	if res, err = cs.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: fmt.Sprintf("lockstep://ws/oplog?before=%d&limit=1", p1.NextBefore)}); err != nil {
		t.Fatalf("oplog resource, paged: %v", err)
	}
	// Structured content: the JSON answer as an object.
	sres := callResult(t, cs, "workspace_status", map[string]any{"workspace": "ws"})
	if sc, ok := sres.StructuredContent.(map[string]any); !ok || sc["repository"] == nil {
		t.Fatalf("workspace_status structured content: %#v", sres.StructuredContent)
	}
	// No database branching configured: a clear error.
	text, isErr := call(t, cs, "database_info", map[string]any{"workspace": "ws"})
	if !isErr || !strings.HasPrefix(text, "error ") {
		t.Fatalf("database_info without branching: %v %s", isErr, text)
	}
}

// metricValue reads one sample from /metrics (0 when absent).
func metricValue(t *testing.T, f *fixture, series string) float64 {
	t.Helper()
	resp, err := http.Get(f.srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			var n float64
			fmt.Sscan(v, &n)
			return n
		}
	}
	return 0
}

// TestRunnerKeyOverMCP: /mcp answers a runner key 403 before its body is
// read, as every route but the runner protocol does.
func TestRunnerKeyOverMCP(t *testing.T) {
	f := mustServerWith(t, web.Config{}, nil)
	box := f.want(t, "POST", "/api/v1/keys", f.admin, `{"name":"box","role":"runner"}`, 201)["secret"].(string)
	req, _ := http.NewRequest("POST", f.srv.URL+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`))
	req.Header.Set("Authorization", "Bearer "+box)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 403 || !strings.Contains(string(b), lockstep.EFORBIDDEN) {
		t.Fatalf("runner key POST /mcp: %d %s, want 403", resp.StatusCode, b)
	}
}

// TestMCPStreamEndsWhenKeyRevoked: a stateful session's event stream (the
// client's standing GET) ends when its key is revoked, as /ui/events
// does; before, it ran on until the session's idle timeout.
func TestMCPStreamEndsWhenKeyRevoked(t *testing.T) {
	f := mcpServer(t, web.Config{}, agentmcp.HTTPOptions{Stateful: true, SessionTimeout: time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	k, secret, err := f.keys.Create(ctx, auth.System, "doomed", lockstep.RoleAgent)
	if err != nil {
		t.Fatal(err)
	}
	_, ts, activeConns := openMCPStream(t, ctx, *f.current.Load(), secret)
	defer ts.Close()
	if err := f.keys.Revoke(ctx, auth.System, k.ID); err != nil {
		t.Fatal(err)
	}
	// Bounded only so that a failure ends: the stream must end, not wait
	// for the hour-long session timeout.
	for i := 0; activeConns() > 0; i++ {
		if i > 3000 {
			t.Fatal("the event stream of a revoked key is still open after 30 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestMCPBadHeadersRefusedBeforeBody: a POST /mcp whose Accept lacks
// text/event-stream, or whose Content-Type is not JSON, is refused with
// the JSON envelope before a byte of its body is read (the stateless
// handler read up to 4 MiB looking for a progress token first); a good
// request on the same handler still works.
func TestMCPBadHeadersRefusedBeforeBody(t *testing.T) {
	for _, stateful := range []bool{false, true} {
		f := mcpServer(t, web.Config{}, agentmcp.HTTPOptions{Stateful: stateful})
		for _, tc := range []struct {
			ctype, accept string
			status        int
		}{
			{"application/json", "application/json", http.StatusBadRequest},
			{"application/json", "", http.StatusBadRequest},
			{"text/plain", "application/json, text/event-stream", http.StatusUnsupportedMediaType},
		} {
			body := &countingBody{max: 64 << 10}
			req := httptest.NewRequest("POST", "/mcp", body)
			req.Header.Set("Authorization", "Bearer "+f.agent)
			req.Header.Set("Content-Type", tc.ctype)
			if tc.accept != "" {
				req.Header.Set("Accept", tc.accept)
			}
			rec := httptest.NewRecorder()
			f.handler.ServeHTTP(rec, req)
			var m map[string]any
			json.Unmarshal(rec.Body.Bytes(), &m)
			if rec.Code != tc.status || errCode(m) != "invalid_argument" || body.n != 0 {
				t.Errorf("stateful=%v %s / %q: %d %s after reading %d body bytes, want %d invalid_argument with the body unread",
					stateful, tc.ctype, tc.accept, rec.Code, rec.Body.Bytes(), body.n, tc.status)
			}
		}
		cs := f.connect(t, f.agent)
		if _, err := cs.ListTools(context.Background(), nil); err != nil {
			t.Fatalf("stateful=%v: a well-formed session: %v", stateful, err)
		}
	}
}
