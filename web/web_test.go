package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

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

type fixture struct {
	srv          *httptest.Server
	handler      http.Handler
	admin, agent string
	db           *sqlstore.DB
}

func mustServer(t *testing.T) *fixture {
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
	m := telemetry.NewMetrics()
	repos := repositories.New(repositories.Config{Objects: gitstore.Local{}, DataDir: dir}, db, nil, m, nil)
	t.Cleanup(func() { repos.Close() })
	s := &web.Server{Config: web.Config{MaxJSONBytes: 256}, Store: db, Keys: keys, Metrics: m, Repos: repos, Workspaces: workspaces.New(db, repos, nil, nil, m, nil), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Gate: gate.New(gate.Config{}, db, repos, nil, m, nil),
		MCP:  func(api http.Handler) http.Handler { return agentmcp.HTTPHandler(api, agentmcp.HTTPOptions{}) }}
	h := s.Handler()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &fixture{srv: srv, handler: h, admin: admin, agent: agent, db: db}
}

func (f *fixture) do(t *testing.T, method, path, key, body string) (int, map[string]any, http.Header) {
	t.Helper()
	req, _ := http.NewRequest(method, f.srv.URL+path, strings.NewReader(body))
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if len(b) == 0 && resp.StatusCode == http.StatusNoContent {
		return resp.StatusCode, nil, resp.Header
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s %s: body is not JSON (%q)", method, path, b)
	}
	return resp.StatusCode, m, resp.Header
}

func errCode(m map[string]any) string {
	e, _ := m["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

// TestErrorEnvelope: every failure is the JSON envelope with the status of
// the contract's table, never gin's plain text.
func TestErrorEnvelope(t *testing.T) {
	f := mustServer(t)
	revoked := func() string {
		_, m, _ := f.do(t, "POST", "/api/v1/keys", f.admin, `{"name":"gone","role":"ci"}`)
		f.do(t, "DELETE", "/api/v1/keys/"+m["id"].(string), f.admin, "")
		return m["secret"].(string)
	}()
	cases := []struct {
		name, method, path, key, body string
		status                        int
		code                          string
	}{
		{"no key", "GET", "/api/v1/repos", "", "", 401, lockstep.EUNAUTH},
		{"unknown key", "GET", "/api/v1/repos", "lsk_12345678_nope", "", 401, lockstep.EUNAUTH},
		{"revoked key", "GET", "/api/v1/repos", revoked, "", 401, lockstep.EUNAUTH},
		{"agent on admin route", "POST", "/api/v1/keys", f.agent, `{"name":"x","role":"agent"}`, 403, lockstep.EFORBIDDEN},
		{"malformed JSON", "POST", "/api/v1/repos", f.admin, `{"name":`, 400, lockstep.EINVALID},
		{"unknown field", "POST", "/api/v1/repos", f.admin, `{"name":"a","colour":"red"}`, 400, lockstep.EINVALID},
		{"wrong type", "POST", "/api/v1/repos", f.admin, `{"name":5}`, 400, lockstep.EINVALID},
		{"empty body", "POST", "/api/v1/repos", f.admin, ``, 400, lockstep.EINVALID},
		{"trailing data", "POST", "/api/v1/repos", f.admin, `{"name":"a"} {}`, 400, lockstep.EINVALID},
		{"oversized", "POST", "/api/v1/repos", f.admin, `{"name":"` + strings.Repeat("a", 300) + `"}`, 413, lockstep.ETOOLARGE},
		{"bad name", "POST", "/api/v1/repos", f.admin, `{"name":"Bad Name"}`, 400, lockstep.EINVALID},
		{"unknown repo", "GET", "/api/v1/repos/nope", f.admin, "", 404, lockstep.ENOTFOUND},
		{"unknown route", "GET", "/api/v1/nothing", f.admin, "", 404, lockstep.ENOTFOUND},
		{"wrong method", "PATCH", "/api/v1/repos", f.admin, "", 405, lockstep.EINVALID},
		{"agent creating a base repo", "POST", "/api/v1/repos", f.agent, `{"name":"mine"}`, 403, lockstep.EFORBIDDEN},
		{"bad oplog limit", "GET", "/api/v1/oplog?limit=-1", f.admin, "", 400, lockstep.EINVALID},
		{"bad oplog order", "GET", "/api/v1/oplog?order=newest", f.admin, "", 400, lockstep.EINVALID},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, m, _ := f.do(t, c.method, c.path, c.key, c.body)
			if status != c.status || errCode(m) != c.code {
				t.Fatalf("got %d %v, want %d %s", status, m, c.status, c.code)
			}
			if msg, _ := m["error"].(map[string]any)["message"].(string); msg == "" {
				t.Fatal("empty error message")
			}
		})
	}
}

func TestHealthAndRequestID(t *testing.T) {
	f := mustServer(t)
	status, m, h := f.do(t, "GET", "/readyz", "", "")
	if status != 200 || m["ready"] != true {
		t.Fatalf("readyz: %d %v", status, m)
	}
	if h.Get("X-Request-Id") == "" {
		t.Fatal("no request id")
	}
	resp, err := http.Get(f.srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), "lockstep_http_requests_total") {
		t.Fatal("metrics lack lockstep_http_requests_total")
	}
}

// TestUnknownUIPathIsAnHTMLPage: browsers get a page, API clients the
// JSON envelope.
func TestUnknownUIPathIsAnHTMLPage(t *testing.T) {
	f := mustServer(t)
	resp, err := http.Get(f.srv.URL + "/ui/no/such/page")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 404 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") || !strings.Contains(string(b), "no page /ui/no/such/page") {
		t.Fatalf("got %d %s: %.300s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	status, m, _ := f.do(t, "GET", "/api/v1/no/such", f.admin, "")
	if status != 404 || errCode(m) != lockstep.ENOTFOUND {
		t.Fatalf("API 404: %d %v", status, m)
	}
}

// TestOplogOrderDesc: ?order=desc lists newest first and pages back with
// after; the default stays oldest first (API users keep their order).
func TestOplogOrderDesc(t *testing.T) {
	f := mustServer(t)
	for _, n := range []string{"a1", "a2", "a3"} {
		if st, m, _ := f.do(t, "POST", "/api/v1/repos", f.admin, `{"name":"`+n+`"}`); st != 201 {
			t.Fatalf("create %s: %d %v", n, st, m)
		}
	}
	seqs := func(path string) []float64 {
		st, m, _ := f.do(t, "GET", path, f.admin, "")
		if st != 200 {
			t.Fatalf("%s: %d %v", path, st, m)
		}
		var out []float64
		for _, e := range m["entries"].([]any) {
			out = append(out, e.(map[string]any)["seq"].(float64))
		}
		return out
	}
	asc, desc := seqs("/api/v1/oplog"), seqs("/api/v1/oplog?order=desc&limit=2")
	if len(asc) < 3 || asc[0] > asc[1] {
		t.Fatalf("default order: %v", asc)
	}
	if len(desc) != 2 || desc[0] != asc[len(asc)-1] || desc[1] != asc[len(asc)-2] {
		t.Fatalf("order=desc: %v, all ascending %v", desc, asc)
	}
	if next := seqs("/api/v1/oplog?order=desc&limit=2&after=" + fmt.Sprint(int(desc[1]))); len(next) == 0 || next[0] != asc[len(asc)-3] {
		t.Fatalf("order=desc page 2: %v", next)
	}
}
