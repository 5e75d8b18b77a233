package web_test

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/auth"
	"github.com/lockstep-hq/lockstep/checkpoints"
	"github.com/lockstep-hq/lockstep/gate"
	"github.com/lockstep-hq/lockstep/gitstore"
	"github.com/lockstep-hq/lockstep/internal/testenv"
	"github.com/lockstep-hq/lockstep/repositories"
	"github.com/lockstep-hq/lockstep/sqlstore"
	"github.com/lockstep-hq/lockstep/telemetry"
	"github.com/lockstep-hq/lockstep/web"
	"github.com/lockstep-hq/lockstep/workspaces"
)

const (
	evilName    = `<img src=x onerror=alert(1)>.txt`
	evilMessage = `<script>alert(1)</script> tidy the parser`
)

// uiWorld is a server with real SQLite, forks, gate and checkpoints
// services, filled through the HTTP API the way an admin, an agent and CI
// would: a base repository with a gate policy, a workspace with a good
// attempt, a checkpoint, a failing attempt with a failed check, a refused
// (stale) push and a checkpoint restore after the failed run.
type uiWorld struct {
	srv                        *httptest.Server
	handler                    http.Handler
	admin, agent, reviewer, ci string
	revoked                    string
	baseHead                   string // the base's first commit
	good, failing              string // the workspace's attempts
	checkpoint                 string
}

func mustUIWorld(t *testing.T, opts ...func(*web.Server)) *uiWorld {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	db, err := sqlstore.Open(ctx, filepath.Join(dir, "m.db"), sqlstore.Options{Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	keys := auth.New(db, nil)
	w := &uiWorld{}
	mk := func(name, role string) string {
		_, secret, err := keys.Create(ctx, auth.System, name, role)
		if err != nil {
			t.Fatal(err)
		}
		return secret
	}
	w.admin, w.agent, w.reviewer, w.ci = mk("admin", lockstep.RoleAdmin), mk("agent-7", lockstep.RoleAgent), mk("rita", lockstep.RoleReviewer), mk("ci", lockstep.RoleCI)
	gone, revokedSecret, _ := keys.Create(ctx, auth.System, "gone", lockstep.RoleReviewer)
	admin, _ := keys.Authenticate(ctx, w.admin)
	if err := keys.Revoke(ctx, admin, gone.ID); err != nil {
		t.Fatal(err)
	}
	w.revoked = revokedSecret
	m := telemetry.NewMetrics()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	repos := repositories.New(repositories.Config{Objects: gitstore.Local{}, DataDir: dir}, db, logger, m, nil)
	t.Cleanup(func() { repos.Close() })
	s := &web.Server{Store: db, Keys: keys, Metrics: m, Repos: repos, Workspaces: workspaces.New(db, repos, nil, nil, m, nil), Logger: logger,
		Gate: gate.New(gate.Config{}, db, repos, logger, m, nil), Checkpoints: checkpoints.New(db, repos, nil, logger, m, nil)}
	for _, o := range opts {
		o(s)
	}
	w.handler = s.Handler()
	w.srv = httptest.NewServer(w.handler)
	t.Cleanup(w.srv.Close)

	w.api(t, "POST", "/api/v1/repos", w.admin, `{"name":"app"}`, 201)
	w.api(t, "POST", "/api/v1/repos", w.admin, `{"name":"empty"}`, 201)
	w.baseHead = w.push(t, "app", w.admin, lockstep.ZeroOID, "initial import", map[string]string{
		"README.md": "# app\n", "main.go": "package main\n\nfunc main() {\n\tprintln(\"hello\")\n}\n", "logo.png": "\x89PNG\x00\x01\x02"}, 201)
	w.api(t, "PUT", "/api/v1/repos/app/gate", w.admin, `{"branch":"main","required_checks":["ci/test"],"protected_paths":["deploy/**"]}`, 200)
	w.api(t, "POST", "/api/v1/repos/app/hooks", w.admin, `{"url":"https://ci.example.com/hook?token=s3cret","secret":"hooksecret-0123456789","events":["push"]}`, 201)
	w.api(t, "POST", "/api/v1/repos/app/forks", w.agent, `{"name":"task-1"}`, 201)
	w.good = w.push(t, "task-1", w.agent, w.baseHead, evilMessage, map[string]string{
		"README.md": "# app\n", "main.go": "package main\n\nfunc main() {\n\tprintln(\"hello, world\")\n}\n", evilName: "<b>bold</b>\n", "logo.png": "\x89PNG\x00\x01\x02"}, 201)
	w.api(t, "POST", "/api/v1/repos/task-1/commits/"+w.good+"/checks", w.ci, `{"name":"ci/test","status":"success","summary":"ok 12 tests"}`, 201)
	cp := w.api(t, "POST", "/api/v1/repos/task-1/checkpoints", w.agent, `{"label":"before refactor","fs_snapshot":"overlay:7f3a"}`, 201)
	w.checkpoint = cp["id"].(string)
	w.failing = w.push(t, "task-1", w.agent, w.good, "refactor main (breaks the build)", map[string]string{
		"README.md": "# app\n", "main.go": "package main\n\nfunc main() {\n\tprintln(\"hello, world\"\n}\n", evilName: "<b>bold</b>\n", "logo.png": "\x89PNG\x00\x01\x02"}, 201)
	w.api(t, "POST", "/api/v1/repos/task-1/commits/"+w.failing+"/checks", w.ci, `{"name":"ci/test","status":"failure","summary":"main.go:4: syntax error: unexpected newline"}`, 201)
	// A stale write, refused and logged.
	w.push(t, "task-1", w.agent, w.good, "stale push", map[string]string{"README.md": "x\n"}, 409)
	w.api(t, "POST", "/api/v1/repos/task-1/checkpoints/"+w.checkpoint+"/restore", w.agent,
		`{"expect_oid":"`+w.failing+`","failure":{"command":["go","test","./..."],"exit_code":1}}`, 200)
	return w
}

func (w *uiWorld) api(t *testing.T, method, path, key, body string, want int) map[string]any {
	t.Helper()
	req, _ := http.NewRequest(method, w.srv.URL+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	return w.send(t, req, want)
}

func (w *uiWorld) send(t *testing.T, req *http.Request, want int) map[string]any {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("%s %s: %d %s, want %d", req.Method, req.URL.Path, resp.StatusCode, b, want)
	}
	var m map[string]any
	json.Unmarshal(b, &m)
	return m
}

// push uploads files as a tar to repo's main branch and returns the commit.
func (w *uiWorld) push(t *testing.T, repoName, key, expect, msg string, files map[string]string, want int) string {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for name, content := range files {
		tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg})
		tw.Write([]byte(content))
	}
	tw.Close()
	q := url.Values{"branch": {"main"}, "expect_oid": {expect}, "message": {msg}}
	req, _ := http.NewRequest("PUT", w.srv.URL+"/api/v1/repos/"+repoName+"/worktree?"+q.Encode(), &buf)
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/x-tar")
	m := w.send(t, req, want)
	c, _ := m["commit"].(string)
	return c
}

// browser is a cookie-keeping client that does not follow redirects, so
// tests see them.
func (w *uiWorld) browser(t *testing.T) *http.Client {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func (w *uiWorld) get(t *testing.T, c *http.Client, path string) (int, string, http.Header) {
	t.Helper()
	resp, err := c.Get(w.srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([0-9a-f]{64})"`)

// login signs in through the form as a browser does and returns the
// signed-in client.
func (w *uiWorld) login(t *testing.T, key string) *http.Client {
	t.Helper()
	c := w.browser(t)
	_, body, _ := w.get(t, c, "/ui/login")
	tok := csrfRE.FindStringSubmatch(body)
	if tok == nil {
		t.Fatalf("login form has no CSRF token: %s", body)
	}
	resp, err := c.PostForm(w.srv.URL+"/ui/login", url.Values{"csrf": {tok[1]}, "key": {key}, "next": {"/ui/"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/ui/" {
		t.Fatalf("login: %d → %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	return c
}

func mustContain(t *testing.T, page, body string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(body, w) {
			t.Errorf("%s: missing %q", page, w)
		}
	}
}

func TestUILoginSession(t *testing.T) {
	w := mustUIWorld(t)
	c := w.browser(t)

	status, _, h := w.get(t, c, "/ui/repos/task-1")
	if status != http.StatusSeeOther || h.Get("Location") != "/ui/login?next=%2Fui%2Frepos%2Ftask-1" {
		t.Fatalf("no session: %d → %q, want the login page", status, h.Get("Location"))
	}
	status, body, h := w.get(t, c, "/ui/login?next=/ui/repos/task-1")
	if status != 200 || !strings.Contains(body, `type="password" name="key"`) || !strings.Contains(body, `value="/ui/repos/task-1"`) {
		t.Fatalf("login form: %d %s", status, body)
	}
	if csp := h.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "script-src 'self';") ||
		strings.Contains(csp, "unsafe") {
		t.Fatalf("CSP %q must forbid every script but the UI's own files", csp)
	}
	tok := csrfRE.FindStringSubmatch(body)[1]

	post := func(form url.Values) *http.Response {
		t.Helper()
		resp, err := c.PostForm(w.srv.URL+"/ui/login", form)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(b), w.reviewer) || strings.Contains(string(b), w.revoked) {
			t.Fatal("a page echoes the API key")
		}
		return resp
	}
	if resp := post(url.Values{"key": {w.reviewer}, "next": {"/ui/"}}); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("login without CSRF token: %d, want 403", resp.StatusCode)
	}
	if resp := post(url.Values{"csrf": {tok}, "key": {"lsk_12345678_wrong"}}); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("wrong key: %d, want 401", resp.StatusCode)
	}
	if resp := post(url.Values{"csrf": {tok}, "key": {w.revoked}}); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("revoked key: %d, want 401", resp.StatusCode)
	}
	resp := post(url.Values{"csrf": {tok}, "key": {w.reviewer}, "next": {"https://evil.example/"}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/ui/" {
		t.Fatalf("login with a foreign next: %d → %q, want /ui/", resp.StatusCode, resp.Header.Get("Location"))
	}
	var session *http.Cookie
	for _, ck := range resp.Cookies() {
		if ck.Name == "lockstep_session" {
			session = ck
		}
	}
	if session == nil || session.Value != w.reviewer || !session.HttpOnly || session.SameSite != http.SameSiteStrictMode || session.Path != "/ui" || session.Secure {
		t.Fatalf("session cookie %+v: want HttpOnly, SameSite=Strict, Path=/ui, not Secure over plain HTTP", session)
	}
	status, body, _ = w.get(t, c, "/ui/repos/task-1")
	if status != 200 || !strings.Contains(body, "rita") {
		t.Fatalf("after login: %d", status)
	}
	if strings.Contains(body, w.reviewer) {
		t.Fatal("the page renders the API key")
	}

	// A forged or revoked cookie goes back to the login page with a message.
	for _, secret := range []string{"lsk_12345678_forged", w.revoked} {
		req, _ := http.NewRequest("GET", w.srv.URL+"/ui/", nil)
		req.AddCookie(&http.Cookie{Name: "lockstep_session", Value: secret})
		r, err := w.browser(t).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		loc := r.Header.Get("Location")
		if r.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "/ui/login?") || !strings.Contains(loc, "reason=revoked") {
			t.Fatalf("bad cookie: %d → %q", r.StatusCode, loc)
		}
		_, lb, _ := w.get(t, w.browser(t), loc)
		mustContain(t, "login after a revoked key", lb, "unknown or has been revoked")
	}

	// Logout needs the session's CSRF token and clears the cookie.
	_, body, _ = w.get(t, c, "/ui/")
	tok = csrfRE.FindStringSubmatch(body)[1]
	r, _ := c.PostForm(w.srv.URL+"/ui/logout", url.Values{})
	r.Body.Close()
	if r.StatusCode != http.StatusForbidden {
		t.Fatalf("logout without token: %d, want 403", r.StatusCode)
	}
	r, _ = c.PostForm(w.srv.URL+"/ui/logout", url.Values{"csrf": {tok}})
	r.Body.Close()
	if r.StatusCode != http.StatusSeeOther {
		t.Fatalf("logout: %d", r.StatusCode)
	}
	if status, _, _ := w.get(t, c, "/ui/"); status != http.StatusSeeOther {
		t.Fatalf("after logout: %d, want a redirect to login", status)
	}
}

func TestUIPages(t *testing.T) {
	w := mustUIWorld(t)
	c := w.login(t, w.reviewer)
	page := func(path string) string {
		t.Helper()
		status, body, h := w.get(t, c, path)
		if status != 200 || !strings.HasPrefix(h.Get("Content-Type"), "text/html") {
			t.Fatalf("%s: %d %s\n%s", path, status, h.Get("Content-Type"), body)
		}
		return body
	}

	mustContain(t, "index", page("/ui/"), `href="/ui/repos/app"`, "1 active", w.baseHead[:10], `href="/ui/repos/empty"`)
	mustContain(t, "empty base", page("/ui/repos/empty"), "no commit yet", "No workspaces.", "No commits yet.")

	base := page("/ui/repos/app")
	mustContain(t, "base", base, "Gate policy", "<code>ci/test</code>", "<code>deploy/**</code>",
		`href="/ui/repos/task-1"`, "agent-7", `badge b-active`, "initial import",
		"https://ci.example.com/hook", "push") // the hook, latest delivery status
	for _, secret := range []string{"hunter2", "s3cret", "hooksecret-0123456789"} {
		if strings.Contains(base, secret) {
			t.Errorf("base page shows the hook secret %q", secret)
		}
	}

	ws := page("/ui/repos/task-1")
	mustContain(t, "workspace", ws, "workspace of", "agent-7",
		w.failing[:10], w.good[:10], "ci/test: failure", "ci/test: success", // attempts with their checks
		"checkpoint.restore", w.checkpoint, "overlay:7f3a", "before refactor", // checkpoints
		"Gate evaluation", "Blocked", "required_check", // the tip (the restore) has no ci/test result
		"compare?base=app%3Amain", "Mark failed")
	if i, j := strings.Index(ws, w.failing[:10]), strings.Index(ws, w.good[:10]); i < 0 || j < 0 || i > j {
		t.Error("attempts are not newest first")
	}

	commit := page("/ui/repos/task-1/commits/" + w.failing)
	mustContain(t, "commit", commit, "refactor main (breaks the build)", "syntax error: unexpected newline",
		`href="/ui/repos/task-1/commits/`+w.good+`"`, // parent link
		`href="/ui/repos/task-1/tree/`+w.failing+`"`, // files
		`<tr class="del">`, `<span class="s">&#34;hello, world&#34;</span><span class="p">)</span>`, `<tr class="add">`, `<span class="s">&#34;hello, world&#34;</span>`,
		"1</strong> file changed", "main.go")
	if page("/ui/repos/app/commits/"+w.baseHead) == "" || !strings.Contains(page("/ui/repos/app/commits/"+w.baseHead), `<span class="tag">binary</span>`) {
		t.Error("root commit page does not mark logo.png as binary")
	}

	cmp := page("/ui/repos/task-1/compare?base=app:main&head=main&from=merge-base")
	mustContain(t, "compare", cmp, "since its merge base", w.baseHead[:10])

	mustContain(t, "tree", page("/ui/repos/task-1/tree/"+w.good), "README.md", "main.go")
	mustContain(t, "blob", page("/ui/repos/task-1/blob/"+w.good+"/main.go"), "hello, world")

	oplog := page("/ui/oplog")
	if strings.Contains(oplog, "Chain verified") {
		t.Error("the oplog page verifies the whole chain on every view")
	}
	mustContain(t, "oplog verify", page("/ui/oplog/verify"), "Chain verified")
	mustContain(t, "oplog", oplog, `href="/ui/oplog/verify"`, "repo.create", "fork", "checkpoint.restored", "run.failed",
		`class="refused"`, "ref_conflict", // the stale push
		"follows <a href=\"#op_", "run.failed #")
	mustContain(t, "oplog filtered", page("/ui/oplog?repo=task-1&op=run.failed"), "run.failed", "exit_code")

	// Paging: 3 entries a page, newest first; older pages link on, and a
	// follows link to an entry on another page resolves to its page.
	p1 := page("/ui/oplog?limit=3")
	older := regexp.MustCompile(`href="(/ui/oplog\?[^"]*before=\d+[^"]*)"`).FindStringSubmatch(p1)
	if older == nil {
		t.Fatalf("no older link on page 1:\n%s", p1)
	}
	p2 := page(strings.ReplaceAll(older[1], "&amp;", "&"))
	seqs := regexp.MustCompile(`<td class="muted">(\d+)</td>`)
	if a, b := seqs.FindAllStringSubmatch(p1, -1), seqs.FindAllStringSubmatch(p2, -1); len(a) != 3 || len(b) == 0 || a[2][1] <= b[0][1] && len(a[2][1]) == len(b[0][1]) {
		t.Fatalf("pages overlap or are not newest first: %v then %v", a, b)
	}
	restore := page("/ui/oplog?op=checkpoint.restored")
	link := regexp.MustCompile(`follows <a href="(/ui/oplog/entries/[^"]+)"`).FindStringSubmatch(restore)
	if link == nil {
		t.Fatalf("filtered page has no cross-page follows link:\n%s", restore)
	}
	status, _, h := w.get(t, c, strings.ReplaceAll(link[1], "&amp;", "&"))
	if status != http.StatusSeeOther || !strings.Contains(h.Get("Location"), "#op_") {
		t.Fatalf("follows link: %d → %q", status, h.Get("Location"))
	}
}

func TestUIEscapesRepositoryContent(t *testing.T) {
	w := mustUIWorld(t)
	c := w.login(t, w.reviewer)
	for _, path := range []string{"/ui/repos/task-1", "/ui/repos/task-1/commits/" + w.good, "/ui/repos/task-1/tree/" + w.good,
		"/ui/repos/task-1/compare?base=app:main&head=main", "/ui/repos/app"} {
		_, body, _ := w.get(t, c, path)
		for _, raw := range []string{"<script>alert(1)</script>", "<img src=x onerror", "<b>bold</b>"} {
			if strings.Contains(body, raw) {
				t.Errorf("%s: repository content %q is not escaped", path, raw)
			}
		}
	}
	_, commit, _ := w.get(t, c, "/ui/repos/task-1/commits/"+w.good)
	mustContain(t, "commit", commit, "&lt;script&gt;alert(1)&lt;/script&gt; tidy the parser", "&lt;img src=x onerror=alert(1)&gt;.txt", "&lt;b&gt;bold&lt;/b&gt;")
}

func TestUIErrors(t *testing.T) {
	w := mustUIWorld(t)
	c := w.login(t, w.reviewer)
	for path, want := range map[string]int{
		"/ui/repos/nope": 404,
		"/ui/repos/app/commits/" + lockstep.ZeroOID: 404,
		"/ui/repos/app/compare?base=main":           400,
		"/ui/repos/Bad%20Name":                      400,
	} {
		status, body, h := w.get(t, c, path)
		if status != want || !strings.HasPrefix(h.Get("Content-Type"), "text/html") || !strings.Contains(body, `class="errmsg"`) {
			t.Errorf("%s: %d %s, want an HTML %d page", path, status, h.Get("Content-Type"), want)
		}
	}
	_, body, _ := w.get(t, c, "/ui/repos/nope")
	mustContain(t, "404 page", body, "404 · Not Found", "nope")

	// The address the server prints at start leads to the UI (it was a
	// 404 JSON answer); other unknown paths stay 404.
	if status, _, h := w.get(t, w.browser(t), "/"); status != http.StatusFound || h.Get("Location") != "/ui/" {
		t.Errorf("GET /: %d → %q; want 302 to /ui/", status, h.Get("Location"))
	}
	if status, _, _ := w.get(t, w.browser(t), "/nope"); status != http.StatusNotFound {
		t.Errorf("GET /nope: %d; want 404", status)
	}
}

func TestUIMarkFailed(t *testing.T) {
	w := mustUIWorld(t)
	agent := w.login(t, w.agent)
	if _, body, _ := w.get(t, agent, "/ui/repos/task-1"); strings.Contains(body, "Mark failed") {
		t.Error("an agent is offered the mark-failed form")
	}
	_, body, _ := w.get(t, agent, "/ui/oplog")
	if strings.Contains(body, "Chain verified") || strings.Contains(body, ">repo.create<") {
		t.Error("an agent sees the verify banner or other keys' operations")
	}
	tok := csrfRE.FindStringSubmatch(body)[1]
	if r, _ := agent.PostForm(w.srv.URL+"/ui/repos/task-1/fail", url.Values{"csrf": {tok}}); r.StatusCode != http.StatusForbidden {
		t.Fatalf("agent marking failed: %d, want 403", r.StatusCode)
	}

	rev := w.login(t, w.reviewer)
	_, body, _ = w.get(t, rev, "/ui/repos/task-1")
	tok = csrfRE.FindStringSubmatch(body)[1]
	if r, _ := rev.PostForm(w.srv.URL+"/ui/repos/task-1/fail", url.Values{"reason": {"loops"}}); r.StatusCode != http.StatusForbidden {
		t.Fatalf("mark failed without CSRF token: %d, want 403", r.StatusCode)
	}
	req, _ := http.NewRequest("POST", w.srv.URL+"/ui/repos/task-1/fail", strings.NewReader(url.Values{"csrf": {tok}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "https://evil.example")
	if r, _ := rev.Do(req); r.StatusCode != http.StatusForbidden {
		t.Fatalf("cross-origin mark failed: %d, want 403", r.StatusCode)
	}
	r, _ := rev.PostForm(w.srv.URL+"/ui/repos/task-1/fail", url.Values{"csrf": {tok}, "reason": {"loops on the parser"}})
	if r.StatusCode != http.StatusSeeOther {
		t.Fatalf("mark failed: %d", r.StatusCode)
	}
	m := w.api(t, "GET", "/api/v1/repos/task-1", w.reviewer, "", 200)
	if m["status"] != string(lockstep.StatusFailed) {
		t.Fatalf("status %v, want failed", m["status"])
	}
	_, body, _ = w.get(t, rev, "/ui/repos/task-1")
	mustContain(t, "failed workspace", body, `badge b-failed`, "it can no longer be promoted")
	_, body, _ = w.get(t, rev, "/ui/oplog?op=workspace.failed")
	mustContain(t, "oplog", body, "loops on the parser", "rita")
}

// TestUIChromium renders the pages in real headless Chromium: the login
// form, and (through a test-only wrapper that adds the session cookie, as
// --dump-dom cannot submit a form) the workspace and commit pages, whose
// DOM is checked and which are screenshotted into the test's temp dir
// (LOCKSTEP_UI_SHOTS=dir keeps them).
func TestUIChromium(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test")
	}
	chromium := testenv.Chromium(t)
	w := mustUIWorld(t)
	authed := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		r.Header.Set("Cookie", "lockstep_session="+w.reviewer)
		w.handler.ServeHTTP(rw, r)
	}))
	t.Cleanup(authed.Close)
	shots := t.TempDir()
	if d := os.Getenv("LOCKSTEP_UI_SHOTS"); d != "" {
		shots = d
	}

	run := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
			"--disable-sync", "--no-first-run", "--hide-scrollbars", "--user-data-dir=" + t.TempDir()}
		cmd := exec.CommandContext(ctx, chromium, append(base, args...)...)
		// Chromium's own scratch (org.chromium.Chromium.*) stays in the
		// test's temp dir, also when it is killed.
		cmd.Env = append(os.Environ(), "TMPDIR="+t.TempDir())
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			return "", &chromiumError{err, errb.String()}
		}
		return out.String(), nil
	}
	type job struct {
		name string
		args []string
		out  string
		err  error
	}
	jobs := []*job{
		{name: "login", args: []string{"--dump-dom", w.srv.URL + "/ui/login?next=/ui/repos/task-1"}},
		{name: "workspace", args: []string{"--dump-dom", authed.URL + "/ui/repos/task-1"}},
		{name: "commit", args: []string{"--dump-dom", authed.URL + "/ui/repos/task-1/commits/" + w.failing}},
		{name: "workspace.png", args: []string{"--screenshot=" + filepath.Join(shots, "workspace.png"), "--window-size=1280,900", authed.URL + "/ui/repos/task-1"}},
		{name: "commit.png", args: []string{"--screenshot=" + filepath.Join(shots, "commit.png"), "--window-size=1280,900", authed.URL + "/ui/repos/task-1/commits/" + w.failing}},
		{name: "base.png", args: []string{"--screenshot=" + filepath.Join(shots, "base.png"), "--window-size=1280,900", authed.URL + "/ui/repos/app"}},
		{name: "login.png", args: []string{"--screenshot=" + filepath.Join(shots, "login.png"), "--window-size=1280,900", w.srv.URL + "/ui/login?reason=revoked"}},
		{name: "oplog.png", args: []string{"--screenshot=" + filepath.Join(shots, "oplog.png"), "--window-size=1280,900", authed.URL + "/ui/oplog"}},
	}
	var wg sync.WaitGroup
	for _, j := range jobs {
		wg.Add(1)
		go func() { defer wg.Done(); j.out, j.err = run(j.args...) }()
	}
	wg.Wait()
	for _, j := range jobs {
		if j.err != nil {
			t.Errorf("chromium %s: %.300v", j.name, j.err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	mustContain(t, "chromium login", jobs[0].out, `<form method="post" action="/ui/login">`, `name="key"`)
	mustContain(t, "chromium workspace", jobs[1].out, "task-1", "ci/test: failure", `class="badge b-failure"`, w.failing[:10], "Blocked")
	mustContain(t, "chromium commit", jobs[2].out, `<tr class="del">`, `<tr class="add">`, "main.go", "syntax error")
	for _, dom := range []string{jobs[1].out, jobs[2].out} {
		// The only script is the UI's own live-update file (the
		// malicious commit message stays text).
		if strings.Count(dom, "<script") != strings.Count(dom, `<script src="/ui/live.js"></script>`) {
			t.Error("the rendered DOM contains a script element other than /ui/live.js")
		}
	}
	for _, name := range []string{"workspace.png", "commit.png", "oplog.png", "base.png", "login.png"} {
		fi, err := os.Stat(filepath.Join(shots, name))
		if err != nil || fi.Size() < 10_000 {
			t.Fatalf("screenshot %s: %v (%d bytes)", name, err, sizeOf(fi))
		}
	}
	t.Logf("screenshots in %s", shots)
}

type chromiumError struct {
	err    error
	stderr string
}

func (e *chromiumError) Error() string {
	s := e.stderr
	if len(s) > 2000 {
		s = s[len(s)-2000:]
	}
	return e.err.Error() + ": " + s
}

func sizeOf(fi os.FileInfo) int64 {
	if fi == nil {
		return 0
	}
	return fi.Size()
}

// TestUIStoragePanel: an admin sees the network's storage on the base
// repository's page (GET /repos/{repo}/usage); a reviewer does not.
func TestUIStoragePanel(t *testing.T) {
	w := mustUIWorld(t)
	for _, tc := range []struct {
		key  string
		want bool
	}{{w.admin, true}, {w.reviewer, false}} {
		status, body, _ := w.get(t, w.login(t, tc.key), "/ui/repos/app")
		if status != 200 {
			t.Fatalf("base page: %d\n%s", status, body)
		}
		if got := strings.Contains(body, "Storage · network <code>app</code>"); got != tc.want {
			t.Fatalf("storage panel shown: %v, want %v\n%s", got, tc.want, body)
		}
		if tc.want {
			mustContain(t, "storage panel", body, "On disk", "Packs", "Loose objects", "<dt>Workspaces</dt>", "<dt>Checkpoints</dt>",
				`<a href="?reclaimable=1">compute</a>`)
		}
	}
	// What GC would free: computed when asked (two dry runs), for admins.
	status, body, _ := w.get(t, w.login(t, w.admin), "/ui/repos/app?reclaimable=1")
	if status != 200 {
		t.Fatalf("base page with reclaimable: %d\n%s", status, body)
	}
	mustContain(t, "storage panel with reclaimable", body, "GC would free", "now (unreachable for over 336h0m0s)", "once every unreachable object is that old")
	if strings.Contains(body, `href="?reclaimable=1"`) {
		t.Fatalf("the computed panel still offers to compute:\n%s", body)
	}
	status, body, _ = w.get(t, w.login(t, w.reviewer), "/ui/repos/app?reclaimable=1")
	if status != 200 || strings.Contains(body, "GC would free") {
		t.Fatalf("a reviewer asking for reclaimable: %d, panel shown %v", status, strings.Contains(body, "GC would free"))
	}
}

// TestUIScopedKey: a key scoped to one workspace, signed in to the UI,
// sees that workspace's pages and no other repository's (every page that
// names a repository in its path answers 403), as on the API.
func TestUIScopedKey(t *testing.T) {
	w := mustUIWorld(t)
	w.api(t, "POST", "/api/v1/repos/app/forks", w.agent, `{"name":"task-2"}`, 201)
	sub := w.api(t, "POST", "/api/v1/keys", w.agent, `{"name":"sub","role":"agent","ttl":"1h","scope":{"workspace":"task-2"}}`, 201)["secret"].(string)
	c := w.login(t, sub)
	if status, body, _ := w.get(t, c, "/ui/repos/task-2/tree/main"); status != 200 {
		t.Fatalf("own workspace: %d\n%s", status, body)
	}
	for _, path := range []string{
		"/ui/repos/task-1",
		"/ui/repos/task-1/tree/main",
		"/ui/repos/task-1/blob/main/main.go",
		"/ui/repos/task-1/commits/" + w.failing,
		"/ui/repos/task-1/compare?base=main&head=main",
		"/ui/repos/app/blob/main/README.md",
		"/ui/repos/app/tasks/t",
	} {
		status, body, _ := w.get(t, c, path)
		if status != 403 || strings.Contains(body, "println") || strings.Contains(body, "# app") {
			t.Errorf("%s: %d, want 403\n%s", path, status, body)
		}
	}
	// Its index lists the base repositories of its scope: none (a
	// workspace scope does not cover its base), so not app and its
	// workspaces' counts.
	if status, body, _ := w.get(t, c, "/ui/"); status != 200 || strings.Contains(body, `href="/ui/repos/app"`) {
		t.Errorf("scoped key's index: %d, want 200 without app\n%s", status, body)
	}
}

// TestUIRunnerKey: a runner key may only register, take jobs and post
// their output and result; signed in to the UI it reads no page.
func TestUIRunnerKey(t *testing.T) {
	w := mustUIWorld(t)
	box := w.api(t, "POST", "/api/v1/keys", w.admin, `{"name":"box","role":"runner"}`, 201)["secret"].(string)
	c := w.login(t, box)
	for _, path := range []string{"/ui/", "/ui/repos/task-1/blob/main/main.go", "/ui/repos/app", "/ui/oplog", "/ui/runs"} {
		status, body, _ := w.get(t, c, path)
		if status != 403 || strings.Contains(body, "println") {
			t.Errorf("runner key %s: %d, want 403\n%s", path, status, body)
		}
	}
}

// TestUICookiesSecureBehindTLSProxy: behind a proxy that terminates TLS
// (X-Forwarded-Proto: https, or Forwarded: proto=https) the session and
// CSRF cookies are Secure, as they are when the server terminates TLS
// itself; before, they were sent without it, so a browser would also send
// the session (the raw key) over plain HTTP. A client that forges the
// header only makes its own cookies stricter.
func TestUICookiesSecureBehindTLSProxy(t *testing.T) {
	w := mustUIWorld(t)
	for _, hdr := range [][2]string{{"X-Forwarded-Proto", "https"}, {"Forwarded", "for=192.0.2.1;proto=https"}} {
		req, _ := http.NewRequest("GET", w.srv.URL+"/ui/login", nil)
		req.Header.Set(hdr[0], hdr[1])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		tok := csrfRE.FindStringSubmatch(string(body))
		var csrf *http.Cookie
		for _, ck := range resp.Cookies() {
			if ck.Name == "lockstep_csrf" {
				csrf = ck
			}
		}
		if tok == nil || csrf == nil || !csrf.Secure {
			t.Fatalf("%s: login form's CSRF cookie %+v, want it Secure", hdr[0], csrf)
		}
		form := url.Values{"csrf": {tok[1]}, "key": {w.reviewer}, "next": {"/ui/"}}
		req, _ = http.NewRequest("POST", w.srv.URL+"/ui/login", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set(hdr[0], hdr[1])
		req.AddCookie(&http.Cookie{Name: csrf.Name, Value: csrf.Value})
		c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, err = c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		var session *http.Cookie
		for _, ck := range resp.Cookies() {
			if ck.Name == "lockstep_session" {
				session = ck
			}
		}
		if resp.StatusCode != http.StatusSeeOther || session == nil || !session.Secure {
			t.Fatalf("%s: login %d, session cookie %+v; want 303 and a Secure cookie", hdr[0], resp.StatusCode, session)
		}
	}
}
