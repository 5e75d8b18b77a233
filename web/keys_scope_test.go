package web_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/agentmcp"
	"github.com/lockstep-hq/lockstep/auth"
	"github.com/lockstep-hq/lockstep/checkpoints"
	"github.com/lockstep-hq/lockstep/gate"
	"github.com/lockstep-hq/lockstep/gitstore"
	"github.com/lockstep-hq/lockstep/repositories"
	"github.com/lockstep-hq/lockstep/sqlstore"
	"github.com/lockstep-hq/lockstep/telemetry"
	"github.com/lockstep-hq/lockstep/web"
	"github.com/lockstep-hq/lockstep/workspaces"
)

// clock is a settable time for the key service (expiry without sleeps).
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// mustServerWith is mustServer with a configuration and the key
// service's clock.
func mustServerWith(t *testing.T, cfg web.Config, now func() time.Time) *fixture {
	t.Helper()
	return mustServerTweak(t, cfg, now, nil)
}

// mustServerTweak is mustServerWith with tweak applied to the server
// before its handler is built (nil: none).
func mustServerTweak(t *testing.T, cfg web.Config, now func() time.Time, tweak func(s *web.Server, db *sqlstore.DB)) *fixture {
	t.Helper()
	dir := t.TempDir()
	return mustServerOn(t, filepath.Join(dir, "m.db"), dir, cfg, now, tweak, nil)
}

// mustServerOn is a server on the metadata store at dsn with its git data
// in dir. With of, it is another replica beside of's server (the same dsn
// and dir) and takes of's keys; else it creates an admin and an agent key.
func mustServerOn(t *testing.T, dsn, dir string, cfg web.Config, now func() time.Time, tweak func(s *web.Server, db *sqlstore.DB), of *fixture) *fixture {
	t.Helper()
	ctx := context.Background()
	db, err := sqlstore.Open(ctx, dsn, sqlstore.Options{Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	keys := auth.New(db, now)
	var admin, agent string
	if of != nil {
		admin, agent = of.admin, of.agent
	} else {
		_, admin, _ = keys.Create(ctx, auth.System, "admin", lockstep.RoleAdmin)
		_, agent, _ = keys.Create(ctx, auth.System, "agent", lockstep.RoleAgent)
	}
	m := telemetry.NewMetrics()
	repos := repositories.New(repositories.Config{Objects: gitstore.Local{}, DataDir: dir}, db, nil, m, nil)
	t.Cleanup(func() { repos.Close() })
	if cfg.MaxJSONBytes == 0 {
		cfg.MaxJSONBytes = 4096
	}
	s := &web.Server{Config: cfg, Store: db, Keys: keys, Metrics: m, Repos: repos, Workspaces: workspaces.New(db, repos, nil, nil, m, nil), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Gate: gate.New(gate.Config{}, db, repos, nil, m, nil),
		MCP:  func(api http.Handler) http.Handler { return agentmcp.HTTPHandler(api, agentmcp.HTTPOptions{}) }}
	if tweak != nil {
		tweak(s, db)
	}
	h := s.Handler()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &fixture{srv: srv, handler: h, admin: admin, agent: agent, db: db}
}

func (f *fixture) want(t *testing.T, method, path, key, body string, status int) map[string]any {
	t.Helper()
	got, m, _ := f.do(t, method, path, key, body)
	if got != status {
		t.Fatalf("%s %s: %d %v, want %d", method, path, got, m, status)
	}
	return m
}

// TestMintedKeyScopeExpiryAndCascade: an agent mints a key scoped to one
// of its workspaces with a TTL; the key works there, gets 403 on another
// workspace (API and git push), its operations name its parent in the
// oplog, the parent's revocation revokes it and its own children, and an
// expired key gets 401 saying so.
func TestMintedKeyScopeExpiryAndCascade(t *testing.T) {
	clk := &clock{t: time.Now()}
	f := mustServerWith(t, web.Config{}, clk.now)
	f.want(t, "POST", "/api/v1/repos", f.admin, `{"name":"app"}`, 201)
	f.want(t, "POST", "/api/v1/repos/app/forks", f.agent, `{"name":"ws1"}`, 201)
	f.want(t, "POST", "/api/v1/repos/app/forks", f.agent, `{"name":"ws2"}`, 201)
	f.want(t, "POST", "/api/v1/repos/app/forks", f.admin, `{"name":"theirs"}`, 201)
	agentID := f.want(t, "GET", "/api/v1/whoami", f.agent, "", 200)["id"].(string)

	// Minting rules of an agent key.
	for _, bad := range []struct {
		body   string
		status int
	}{
		{`{"name":"s","role":"agent","ttl":"1h","scope":{"workspace":"theirs"}}`, 403}, // not its workspace
		{`{"name":"s","role":"reviewer","ttl":"1h","scope":{"workspace":"ws1"}}`, 403}, // agents mint agents
		{`{"name":"s","role":"agent","ttl":"48h","scope":{"workspace":"ws1"}}`, 400},   // over the max TTL
		{`{"name":"s","role":"agent","scope":{"workspace":"ws1"}}`, 400},               // no TTL
		{`{"name":"s","role":"agent","ttl":"1h"}`, 403},                                // no scope
		{`{"name":"s","role":"agent","ttl":"soon","scope":{"workspace":"ws1"}}`, 400},  // bad TTL
		{`{"name":"s","role":"agent","ttl":"1h","scope":{"workspace":"ws1","base":"app"}}`, 400},
	} {
		f.want(t, "POST", "/api/v1/keys", f.agent, bad.body, bad.status)
	}
	sub := f.want(t, "POST", "/api/v1/keys", f.agent, `{"name":"sub","role":"agent","ttl":"1h","scope":{"workspace":"ws1"}}`, 201)
	subKey, subID := sub["secret"].(string), sub["id"].(string)
	who := f.want(t, "GET", "/api/v1/whoami", subKey, "", 200)
	if who["parent_key_id"] != agentID || who["expires_at"] == nil {
		t.Fatalf("whoami of the minted key: %v", who)
	}
	// A child of the child, scoped within it.
	subsub := f.want(t, "POST", "/api/v1/keys", subKey, `{"name":"subsub","role":"agent","ttl":"30m","scope":{"workspace":"ws1"}}`, 201)["secret"].(string)
	f.want(t, "POST", "/api/v1/keys", subKey, `{"name":"x","role":"agent","ttl":"30m","scope":{"workspace":"ws2"}}`, 403)

	// In scope: its workspace. Out of scope: every other one, any route.
	f.want(t, "GET", "/api/v1/repos/ws1", subKey, "", 200)
	for _, r := range []struct{ method, path, body string }{
		{"GET", "/api/v1/repos/ws2", ""},
		{"GET", "/api/v1/repos/ws2/refs", ""},
		{"POST", "/api/v1/repos/ws2/rollback", `{"to":"HEAD"}`},
		{"DELETE", "/api/v1/repos/ws2", ""},
		{"POST", "/api/v1/repos/app/forks", `{"name":"ws3"}`},
		{"GET", "/git/ws2.git/info/refs?service=git-receive-pack", ""},
	} {
		status, m, _ := f.do(t, r.method, r.path, subKey, r.body)
		if status != 403 || errCode(m) != lockstep.EFORBIDDEN {
			t.Fatalf("scoped key %s %s: %d %v, want 403", r.method, r.path, status, m)
		}
	}

	// git push: into its workspace, yes; into another, refused.
	g := gitT{t: t, home: t.TempDir()}
	dir := t.TempDir()
	g.must(dir, nil, "init", "-q")
	g.must(dir, nil, "commit", "-q", "--allow-empty", "-m", "first")
	u, _ := url.Parse(f.srv.URL)
	u.User = url.UserPassword("x", subKey)
	g.must(dir, nil, "push", "-q", u.String()+"/git/ws1.git", "HEAD:refs/heads/main")
	if out, err := g.run(dir, nil, "push", "-q", u.String()+"/git/ws2.git", "HEAD:refs/heads/main"); err == nil || !strings.Contains(out, "403") {
		t.Fatalf("git push into another workspace with a scoped key: err %v\n%s", err, out)
	}
	// Its operations carry its id and its parent's.
	ops, err := f.db.ListOps(context.Background(), lockstep.OpFilter{KeyID: subID, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	pushed := false
	for _, e := range ops {
		if e.Repo == "ws1" && e.Op != "key.create" {
			pushed = true
			if e.Details["parent_key_id"] != agentID {
				t.Fatalf("entry %s of the minted key: details %v, want parent_key_id %s", e.Op, e.Details, agentID)
			}
		}
	}
	if !pushed {
		t.Fatalf("no entry of the minted key's push: %+v", ops)
	}
	if v := f.want(t, "GET", "/api/v1/oplog/verify", f.admin, "", 200); v["ok"] != true {
		t.Fatalf("oplog verify: %v", v)
	}

	// Revoking the agent revokes its children, transitively.
	f.want(t, "DELETE", "/api/v1/keys/"+agentID, f.admin, "", 204)
	for _, k := range []string{subKey, subsub} {
		if status, m, _ := f.do(t, "GET", "/api/v1/whoami", k, ""); status != 401 || errCode(m) != lockstep.EUNAUTH {
			t.Fatalf("minted key after its parent's revocation: %d %v, want 401", status, m)
		}
	}

	// Expiry: an admin mints a 1h key; an hour later it gets 401.
	short := f.want(t, "POST", "/api/v1/keys", f.admin, `{"name":"short","role":"ci","ttl":"1h"}`, 201)["secret"].(string)
	f.want(t, "GET", "/api/v1/whoami", short, "", 200)
	clk.add(time.Hour)
	status, m, _ := f.do(t, "GET", "/api/v1/whoami", short, "")
	if status != 401 || errCode(m) != lockstep.EUNAUTH || !strings.Contains(m["error"].(map[string]any)["message"].(string), "expired") {
		t.Fatalf("expired key: %d %v, want 401 saying expired", status, m)
	}
	f.want(t, "GET", "/api/v1/whoami", f.admin, "", 200)
}

// TestTaskScopedKey: a key scoped to a task of a base forks that base for
// the task only and acts on the task's workspaces, no other.
func TestTaskScopedKey(t *testing.T) {
	f := mustServerWith(t, web.Config{}, nil)
	f.want(t, "POST", "/api/v1/repos", f.admin, `{"name":"app"}`, 201)
	f.want(t, "POST", "/api/v1/repos/app/forks", f.agent, `{"name":"other"}`, 201)
	f.want(t, "POST", "/api/v1/keys", f.admin, `{"name":"t","role":"admin","scope":{"base":"app","task":"t1"}}`, 400)
	k := f.want(t, "POST", "/api/v1/keys", f.admin, `{"name":"t","role":"agent","ttl":"1h","scope":{"base":"app","task":"t1"}}`, 201)["secret"].(string)
	f.want(t, "GET", "/api/v1/repos/app", k, "", 200)
	if m := f.want(t, "POST", "/api/v1/repos/app/forks", k, `{"name":"a1"}`, 201); m["task"] != "t1" {
		t.Fatalf("fork by a task-scoped key: %v, want task t1", m)
	}
	f.want(t, "POST", "/api/v1/repos/app/forks", k, `{"name":"a2","task":"t2"}`, 403)
	f.want(t, "GET", "/api/v1/repos/a1/refs", k, "", 200)
	f.want(t, "GET", "/api/v1/repos/other", k, "", 403)
	f.want(t, "DELETE", "/api/v1/repos/other", k, "", 403)
	// Its list of repositories is its scope: the base and a1, not other.
	var names []string
	for _, r := range f.want(t, "GET", "/api/v1/repos", k, "", 200)["repos"].([]any) {
		names = append(names, r.(map[string]any)["name"].(string))
	}
	if strings.Join(names, ",") != "a1,app" && strings.Join(names, ",") != "app,a1" {
		t.Fatalf("a task-scoped key lists %v, want app and a1 only", names)
	}
	if n := len(f.want(t, "GET", "/api/v1/repos", f.admin, "", 200)["repos"].([]any)); n != 3 {
		t.Fatalf("the admin lists %d repositories, want 3", n)
	}
	f.want(t, "DELETE", "/api/v1/repos/a1", k, "", 200)
}

// TestWorkspaceQuotaAndRateLimit: a key over its workspace quota gets
// 429 naming the limit, with Retry-After; an admin lifts it per key;
// a key over its request rate gets 429 too.
func TestWorkspaceQuotaAndRateLimit(t *testing.T) {
	f := mustServerWith(t, web.Config{QuotaWorkspaces: 2}, nil)
	f.want(t, "POST", "/api/v1/repos", f.admin, `{"name":"app"}`, 201)
	f.want(t, "POST", "/api/v1/repos/app/forks", f.agent, `{"name":"w1"}`, 201)
	f.want(t, "POST", "/api/v1/repos/app/forks", f.agent, `{"name":"w2"}`, 201)
	status, m, h := f.do(t, "POST", "/api/v1/repos/app/forks", f.agent, `{"name":"w3"}`)
	if status != 429 || errCode(m) != lockstep.ERATELIMITED || h.Get("Retry-After") == "" ||
		!strings.Contains(m["error"].(map[string]any)["message"].(string), "workspace quota") {
		t.Fatalf("fork over the quota: %d %v %v, want 429 naming the workspace quota with Retry-After", status, m, h)
	}
	who := f.want(t, "GET", "/api/v1/whoami", f.agent, "", 200)
	if lim, _ := who["limits"].(map[string]any); lim["workspaces"] != float64(2) || lim["workspaces_active"] != float64(2) {
		t.Fatalf("whoami limits: %v", who["limits"])
	}
	// An abandoned workspace no longer counts.
	f.want(t, "DELETE", "/api/v1/repos/w1", f.agent, "", 200)
	f.want(t, "POST", "/api/v1/repos/app/forks", f.agent, `{"name":"w3"}`, 201)
	f.want(t, "POST", "/api/v1/repos/app/forks", f.agent, `{"name":"w4"}`, 429)
	// A per-key override: 0 is unlimited.
	agentID := who["id"].(string)
	f.want(t, "PUT", "/api/v1/keys/"+agentID+"/quota", f.agent, `{"workspaces":0}`, 403)
	f.want(t, "PUT", "/api/v1/keys/"+agentID+"/quota", f.admin, `{"workspaces":-1}`, 400)
	f.want(t, "PUT", "/api/v1/keys/"+agentID+"/quota", f.admin, `{"workspaces":0}`, 204)
	f.want(t, "POST", "/api/v1/repos/app/forks", f.agent, `{"name":"w4"}`, 201)

	// Requests per second: a bucket of 2 that refills once in ~17 minutes.
	r := mustServerWith(t, web.Config{RateLimitRPS: 0.001, RateLimitBurst: 2}, nil)
	r.want(t, "GET", "/api/v1/whoami", r.agent, "", 200)
	r.want(t, "GET", "/api/v1/whoami", r.agent, "", 200)
	status, m, h = r.do(t, "GET", "/api/v1/whoami", r.agent, "")
	if status != 429 || errCode(m) != lockstep.ERATELIMITED || h.Get("Retry-After") == "" ||
		!strings.Contains(m["error"].(map[string]any)["message"].(string), "rate limit") {
		t.Fatalf("over the rate: %d %v %v", status, m, h)
	}
	r.want(t, "GET", "/api/v1/whoami", r.admin, "", 200) // per key

	// git prints a text/plain reason ("remote: rate limit: …"); a JSON
	// one it did not show, only "The requested URL returned error: 429".
	g := gitT{t: t, home: t.TempDir()}
	u, _ := url.Parse(r.srv.URL)
	u.User = url.UserPassword("x", r.agent)
	out, err := g.run(t.TempDir(), nil, "ls-remote", u.String()+"/git/app.git")
	if err == nil || !strings.Contains(out, "rate limit: key agent may make") {
		t.Fatalf("git over the rate: %v\n%s", err, out)
	}
}

// TestWorkspacePurge: DELETE ?purge=true (owner or admin) abandons the
// workspace and deletes its refs, from the store and from the git mirror,
// in one oplog entry; the oplog keeps every entry; without purge DELETE
// only abandons.
func TestWorkspacePurge(t *testing.T) {
	f := mustServerWith(t, web.Config{}, nil)
	f.want(t, "POST", "/api/v1/repos", f.admin, `{"name":"app"}`, 201)
	f.want(t, "POST", "/api/v1/repos/app/forks", f.agent, `{"name":"ws1"}`, 201)
	f.want(t, "POST", "/api/v1/repos/app/forks", f.agent, `{"name":"ws2"}`, 201)
	other := f.want(t, "POST", "/api/v1/keys", f.admin, `{"name":"other","role":"agent"}`, 201)["secret"].(string)

	g := gitT{t: t, home: t.TempDir()}
	dir := t.TempDir()
	g.must(dir, nil, "init", "-q")
	g.must(dir, nil, "commit", "-q", "--allow-empty", "-m", "first")
	u, _ := url.Parse(f.srv.URL)
	u.User = url.UserPassword("x", f.agent)
	for _, ws := range []string{"ws1", "ws2"} {
		g.must(dir, nil, "push", "-q", u.String()+"/git/"+ws+".git", "HEAD:refs/heads/main", "HEAD:refs/heads/feature")
	}
	if out := g.must(dir, nil, "ls-remote", u.String()+"/git/ws1.git"); !strings.Contains(out, "refs/heads/feature") {
		t.Fatalf("ls-remote before the purge: %q", out)
	}

	f.want(t, "DELETE", "/api/v1/repos/ws1?purge=true", other, "", 403)
	f.want(t, "DELETE", "/api/v1/repos/app?purge=true", f.admin, "", 400)
	f.want(t, "DELETE", "/api/v1/repos/ws1?purge=maybe", f.agent, "", 400)
	if m := f.want(t, "DELETE", "/api/v1/repos/ws1?purge=true", f.agent, "", 200); m["status"] != string(lockstep.StatusAbandoned) {
		t.Fatalf("purged workspace: %v", m)
	}
	if refs := f.want(t, "GET", "/api/v1/repos/ws1/refs", f.agent, "", 200); len(refs["refs"].([]any)) != 0 {
		t.Fatalf("refs after the purge: %v", refs)
	}
	if out := g.must(dir, nil, "ls-remote", u.String()+"/git/ws1.git"); strings.Contains(out, "refs/heads") {
		t.Fatalf("the git mirror still advertises ws1's refs after the purge: %q", out)
	}
	// Without purge: abandoned, refs kept.
	f.want(t, "DELETE", "/api/v1/repos/ws2", f.agent, "", 200)
	if refs := f.want(t, "GET", "/api/v1/repos/ws2/refs", f.agent, "", 200); len(refs["refs"].([]any)) != 2 {
		t.Fatalf("refs of an abandoned (not purged) workspace: %v", refs)
	}
	// An abandoned workspace can be purged later, by an admin too.
	f.want(t, "DELETE", "/api/v1/repos/ws2?purge=true", f.admin, "", 200)

	ctx := context.Background()
	for _, ws := range []string{"ws1", "ws2"} {
		ops, err := f.db.ListOps(ctx, lockstep.OpFilter{Repo: ws, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		var purge *lockstep.OpEntry
		pushes := 0
		for _, e := range ops {
			switch e.Op {
			case "workspace.purge":
				purge = e
			case "fork", "workspace.abandoned":
			default:
				pushes++
			}
		}
		if purge == nil || len(purge.Refs) != 2 || purge.Refs[0].New != lockstep.ZeroOID || pushes == 0 {
			t.Fatalf("%s oplog after the purge: %+v (the push entries stay, the purge names the deleted refs)", ws, ops)
		}
	}
	if v := f.want(t, "GET", "/api/v1/oplog/verify", f.admin, "", 200); v["ok"] != true {
		t.Fatalf("oplog verify: %v", v)
	}
}

// TestScopedKeyOverMCP: MCP tools run with the caller's key through the
// API, so a key scoped to one workspace reads it and is refused another.
func TestScopedKeyOverMCP(t *testing.T) {
	f := mcpServer(t, web.Config{MaxJSONBytes: 1 << 20}, agentmcp.HTTPOptions{})
	cs := f.connect(t, f.agent)
	f.seed(t, cs, map[string]string{"a.txt": "hello\n"})
	mustCall(t, cs, "workspace_create", map[string]any{"repo": "shop", "name": "ws2"}, nil)
	sub := f.want(t, "POST", "/api/v1/keys", f.agent, `{"name":"sub","role":"agent","ttl":"1h","scope":{"workspace":"ws"}}`, 201)["secret"].(string)
	scs := f.connect(t, sub)
	if got := mustCall(t, scs, "file_read", map[string]any{"workspace": "ws", "path": "a.txt"}, nil); !strings.Contains(got, "hello") {
		t.Fatalf("file_read in scope: %q", got)
	}
	mustCallError(t, scs, "file_read", map[string]any{"workspace": "ws2", "path": "a.txt"}, lockstep.EFORBIDDEN)
	mustCallError(t, scs, "workspace_status", map[string]any{"workspace": "ws2"}, lockstep.EFORBIDDEN)
}

// TestUploadQuotaPerKey: with --quota-uploads 1 a key's second upload
// while its first is in progress answers 429 rate_limited naming the
// quota, with Retry-After; whoami shows the usage; an admin key is not
// bound by it; the count drops when the upload ends.
func TestUploadQuotaPerKey(t *testing.T) {
	f := mustServerWith(t, web.Config{QuotaUploads: 1}, nil)
	f.want(t, "POST", "/api/v1/repos", f.admin, `{"name":"app"}`, 201)
	f.want(t, "POST", "/api/v1/repos/app/forks", f.agent, `{"name":"ws"}`, 201)
	limits := func() map[string]any {
		l, _ := f.want(t, "GET", "/api/v1/whoami", f.agent, "", 200)["limits"].(map[string]any)
		return l
	}
	if l := limits(); l["uploads"] != float64(1) || l["uploads_active"] != float64(0) {
		t.Fatalf("whoami limits before any upload: %v", l)
	}
	tarBytes := oneFileTar(t, "a.txt", "hello\n")
	pw, first := slowUpload(t, f, f.agent, "/api/v1/repos/ws/worktree?branch=b1&expect_oid="+lockstep.ZeroOID, tarBytes[:512])
	// Wait (not a timing assertion) until the first upload is counted.
	held := false
	for i := 0; i < 3000 && !held; i++ {
		if held = limits()["uploads_active"] == float64(1); !held {
			time.Sleep(10 * time.Millisecond)
		}
	}
	if !held {
		t.Fatal("the first upload was never counted (whoami uploads_active never 1)")
	}
	status, m, h := f.do(t, "POST", "/api/v1/repos/ws/objects", f.agent, "")
	if status != 429 || errCode(m) != lockstep.ERATELIMITED || h.Get("Retry-After") == "" ||
		!strings.Contains(errMessage(m), "upload quota") || !strings.Contains(errMessage(m), "quota-uploads") {
		t.Fatalf("second upload of the key: %d %v %v, want 429 naming the upload quota with Retry-After", status, m, h)
	}
	// An admin is not bound by the per-key quota (400: an empty pack).
	f.want(t, "POST", "/api/v1/repos/ws/objects", f.admin, "", 400)
	pw.Write(tarBytes[512:])
	pw.Close()
	if code := <-first; code != http.StatusCreated {
		t.Fatalf("first upload: %d", code)
	}
	if l := limits(); l["uploads_active"] != float64(0) {
		t.Fatalf("whoami limits after the upload: %v", l)
	}
	f.want(t, "POST", "/api/v1/repos/ws/objects", f.agent, "", 400)
}

// TestUsage: GET /repos/{repo}/usage (admins) counts the network's
// objects on disk, the same for the base and its workspaces, and grows
// with a push; a non-admin key is refused before anything is read.
func TestUsage(t *testing.T) {
	f := mustServerWith(t, web.Config{}, nil)
	f.want(t, "POST", "/api/v1/repos", f.admin, `{"name":"app"}`, 201)
	f.want(t, "POST", "/api/v1/repos/app/forks", f.agent, `{"name":"ws"}`, 201)
	disk := func(repo string) map[string]any {
		u := f.want(t, "GET", "/api/v1/repos/"+repo+"/usage", f.admin, "", 200)
		if u["network"] != "app" || u["workspaces"] != float64(1) || u["bucket"] != nil {
			t.Fatalf("usage of %s: %v", repo, u)
		}
		return u["disk"].(map[string]any)
	}
	before := disk("app")
	req, _ := http.NewRequest("PUT", f.srv.URL+"/api/v1/repos/ws/worktree?branch=b1&expect_oid="+lockstep.ZeroOID,
		strings.NewReader(string(oneFileTar(t, "big.txt", strings.Repeat("lockstep ", 4096)))))
	req.Header.Set("Authorization", "Bearer "+f.agent)
	req.Header.Set("Content-Type", "application/x-tar")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 201 {
		t.Fatalf("push: %d", resp.StatusCode)
	}
	after, ws := disk("app"), disk("ws")
	if after["total_bytes"].(float64) <= before["total_bytes"].(float64) || after["pack_bytes"].(float64)+after["loose_bytes"].(float64) == 0 {
		t.Fatalf("disk usage did not grow with a push: before %v, after %v", before, after)
	}
	if after["total_bytes"] != ws["total_bytes"] {
		t.Fatalf("base and workspace share a network: %v vs %v", after, ws)
	}
	status, m, _ := f.do(t, "GET", "/api/v1/repos/app/usage", f.agent, "")
	if status != 403 || errCode(m) != lockstep.EFORBIDDEN {
		t.Fatalf("usage with an agent key: %d %v, want 403", status, m)
	}
	f.want(t, "GET", "/api/v1/repos/nope/usage", f.admin, "", 404)
}

// TestScopedKeyReadsByCommitID: a fork network stores every workspace's
// objects together, so a commit id is no way around a key's scope: a key
// scoped to ws1 reads ws1's commits by id (full or abbreviated), not
// another workspace's, over the API (blob, commit, compare, rollback
// source) or git (protocol v2 fetches any object by id; a scoped key is
// served v0, which gives out only what its refs reach).
func TestScopedKeyReadsByCommitID(t *testing.T) {
	f := mustServerTweak(t, web.Config{}, nil, func(s *web.Server, db *sqlstore.DB) {
		s.Checkpoints = checkpoints.New(db, s.Repos, nil, s.Logger, s.Metrics, nil)
	})
	sub := scopedWorkspaces(t, f)
	g := gitT{t: t, home: t.TempDir()}
	u, _ := url.Parse(f.srv.URL)
	push := func(key, repo, file, content string) (mid, tip string) {
		t.Helper()
		return pushThree(t, g, u, key, repo, file, content)
	}
	mineMid, mine := push(sub, "ws1", "mine.txt", "mine\n")
	_, theirs := push(f.admin, "theirs", "secret.txt", "their secret\n")

	// get answers a GET's status and body (a blob is not JSON).
	get := func(path, key string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", f.srv.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// Its own commits, by id: yes.
	for _, p := range []string{"/blob/" + mine + "/mine.txt", "/blob/" + mine[:8] + "/mine.txt", "/commits/" + mine, "/commits/" + mineMid} {
		if status, body := get("/api/v1/repos/ws1"+p, sub); status != 200 {
			t.Fatalf("scoped key GET ws1%s: %d, want 200\n%s", p, status, body)
		}
	}
	// Another workspace's, through its own workspace: not found.
	for _, r := range []struct{ method, path, body string }{
		{"GET", "/api/v1/repos/ws1/blob/" + theirs + "/secret.txt", ""},
		{"GET", "/api/v1/repos/ws1/blob/" + theirs[:8] + "/secret.txt", ""},
		{"GET", "/api/v1/repos/ws1/tree/" + theirs, ""},
		{"GET", "/api/v1/repos/ws1/commits/" + theirs, ""},
		{"GET", "/api/v1/repos/ws1/commits?ref=" + theirs, ""},
		{"GET", "/api/v1/repos/ws1/compare?base=main&head=" + theirs, ""},
		{"GET", "/api/v1/repos/ws1/archive/" + theirs, ""},
		{"POST", "/api/v1/repos/ws1/rollback", `{"branch":"main","to":"` + theirs + `","force":true}`},
	} {
		req, _ := http.NewRequest(r.method, f.srv.URL+r.path, strings.NewReader(r.body))
		req.Header.Set("Authorization", "Bearer "+sub)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 404 || strings.Contains(string(b), "their secret") {
			t.Errorf("scoped key %s %s: %d %s, want 404", r.method, r.path, resp.StatusCode, b)
		}
	}
	// An unscoped key still reads the network's commits (reads are open).
	if status, body := get("/api/v1/repos/ws1/blob/"+theirs+"/secret.txt", f.agent); status != 200 || body != "their secret\n" {
		t.Fatalf("agent key GET ws1/blob/<their commit>: %d %q, want 200", status, body)
	}

	// git: a fetch of their commit by id through ws1, in protocol v2.
	dir := t.TempDir()
	g.must(dir, nil, "init", "-q")
	pu := *u
	pu.User = url.UserPassword("x", sub)
	out, err := g.run(dir, nil, "-c", "protocol.version=2", "fetch", "-q", pu.String()+"/git/ws1.git", theirs)
	if err == nil {
		t.Fatalf("git fetch of another workspace's commit by id with a scoped key succeeded\n%s", out)
	}
	if _, err := g.run(dir, nil, "cat-file", "-e", theirs); err == nil {
		t.Fatalf("the scoped key's clone holds %s", theirs)
	}
	// Its own commit by id, in protocol v2: yes.
	g.must(dir, nil, "-c", "protocol.version=2", "fetch", "-q", pu.String()+"/git/ws1.git", mine)

	// A checkpoint's commit is restored even when a force push left it
	// out of the branch's history.
	cp := f.want(t, "POST", "/api/v1/repos/ws1/checkpoints", sub, `{"label":"before"}`, 201)["id"].(string)
	_, forced := push(sub, "ws1", "other.txt", "other\n")
	if status, _ := get("/api/v1/repos/ws1/commits/"+mine, sub); status != 404 {
		t.Fatalf("scoped key reads %s after the force push: %d, want 404", mine, status)
	}
	if r := f.want(t, "POST", "/api/v1/repos/ws1/checkpoints/"+cp+"/restore", sub, `{"expect_oid":"`+forced+`"}`, 200); r["commit"] == forced {
		t.Fatalf("restore: %v", r)
	}
	if status, body := get("/api/v1/repos/ws1/blob/main/mine.txt", sub); status != 200 || body != "mine\n" {
		t.Fatalf("after the restore: %d %q", status, body)
	}
}

// scopedWorkspaces makes the scoped-key tests' world on f: base app, the
// agent's workspace ws1, the admin's workspace theirs; it returns a key
// the agent minted scoped to ws1.
func scopedWorkspaces(t *testing.T, f *fixture) string {
	t.Helper()
	f.want(t, "POST", "/api/v1/repos", f.admin, `{"name":"app"}`, 201)
	f.want(t, "POST", "/api/v1/repos/app/forks", f.agent, `{"name":"ws1"}`, 201)
	f.want(t, "POST", "/api/v1/repos/app/forks", f.admin, `{"name":"theirs"}`, 201)
	return f.want(t, "POST", "/api/v1/keys", f.agent, `{"name":"sub","role":"agent","ttl":"1h","scope":{"workspace":"ws1"}}`, 201)["secret"].(string)
}

// pushThree pushes, with key, three commits to repo's main on the server
// at base, all committed in the same second (an ancestor as new as its
// descendants must still count as reachable): an empty root, a child
// adding file, and its child; it returns the middle one and the tip.
func pushThree(t *testing.T, g gitT, base *url.URL, key, repo, file, content string) (mid, tip string) {
	t.Helper()
	dir := t.TempDir()
	g.must(dir, nil, "init", "-q")
	if err := os.WriteFile(filepath.Join(dir, file), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	g.must(dir, nil, "add", file)
	tree := g.must(dir, nil, "write-tree")
	who := "author A <a@example.com> 1767225600 +0000\ncommitter A <a@example.com> 1767225600 +0000\n"
	root := g.must(dir, []byte("tree 4b825dc642cb6eb9a060e54bf8d69288fbee4904\n"+who+"\nroot of "+repo+"\n"), "hash-object", "-t", "commit", "-w", "--stdin")
	mid = g.must(dir, []byte("tree "+tree+"\nparent "+root+"\n"+who+"\nwork of "+repo+"\n"), "hash-object", "-t", "commit", "-w", "--stdin")
	tip = g.must(dir, []byte("tree "+tree+"\nparent "+mid+"\n"+who+"\nmore work of "+repo+"\n"), "hash-object", "-t", "commit", "-w", "--stdin")
	pu := *base
	pu.User = url.UserPassword("x", key)
	g.must(dir, nil, "push", "-q", "--force", pu.String()+"/git/"+repo+".git", tip+":refs/heads/main")
	return mid, tip
}
