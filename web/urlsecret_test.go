package web_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/agentmcp"
	"github.com/lockstep-hq/lockstep/auth"
	"github.com/lockstep-hq/lockstep/delivery"
	"github.com/lockstep-hq/lockstep/effects"
	"github.com/lockstep-hq/lockstep/gate"
	"github.com/lockstep-hq/lockstep/gitstore"
	"github.com/lockstep-hq/lockstep/internal/testenv"
	"github.com/lockstep-hq/lockstep/repositories"
	"github.com/lockstep-hq/lockstep/sqlstore"
	"github.com/lockstep-hq/lockstep/telemetry"
	"github.com/lockstep-hq/lockstep/web"
	"github.com/lockstep-hq/lockstep/workspaces"
)

// TestTargetURLTokensNeverShown: a token in the query of an effect's URL
// or a hook's URL is in no API answer (staged, listed, read, replayed
// for an Idempotency-Key), no MCP tool result, no refusal (answer or
// request log line), and nowhere in the SQLite files: the answers show
// the query's names with redacted values.
func TestTargetURLTokensNeverShown(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	dbPath := filepath.Join(dir, "m.db")
	db, err := sqlstore.Open(ctx, dbPath, sqlstore.Options{Migrate: true, SecretKey: bytes.Repeat([]byte{1}, 32)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	keys := auth.New(db, nil)
	_, admin, _ := keys.Create(ctx, auth.System, "admin", lockstep.RoleAdmin)
	_, agent, _ := keys.Create(ctx, auth.System, "agent", lockstep.RoleAgent)
	m := telemetry.NewMetrics()
	var logs testenv.SyncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	repos := repositories.New(repositories.Config{Objects: gitstore.Local{}, DataDir: dir}, db, logger, m, nil)
	t.Cleanup(func() { repos.Close() })
	allow, _ := delivery.ParseAllowList("127.0.0.1")
	s := &web.Server{Store: db, Keys: keys, Metrics: m, Repos: repos, Workspaces: workspaces.New(db, repos, nil, nil, m, nil), Logger: logger,
		Gate:    gate.New(gate.Config{HookAllowHosts: allow}, db, repos, logger, m, nil),
		Effects: effects.New(effects.Config{AllowHosts: allow}, db, repos, logger, m, nil),
		MCP:     func(api http.Handler) http.Handler { return agentmcp.HTTPHandler(api, agentmcp.HTTPOptions{}) }}
	h := s.Handler()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	f := &fixture{srv: srv, handler: h, admin: admin, agent: agent, db: db}

	const tok = "t0k3n-in-the-query"
	leaks := func(what, s string) {
		t.Helper()
		if strings.Contains(s, tok) {
			t.Errorf("BUG: %s shows the token: %s", what, s)
		}
	}
	raw := func(method, path, key, idem, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		if idem != "" {
			req.Header.Set("Idempotency-Key", idem)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	if code, _, _ := f.do(t, "POST", "/api/v1/repos", admin, `{"name":"app"}`); code != 201 {
		t.Fatalf("create repo: %d", code)
	}
	if code, body, _ := f.do(t, "POST", "/api/v1/repos/app/forks", agent, `{"name":"ws-1"}`); code != 201 {
		t.Fatalf("fork: %d %v", code, body)
	}

	// An effect, staged twice with one Idempotency-Key (the second answer
	// is the stored one).
	stage := `{"method":"POST","url":"http://127.0.0.1:9/hook?token=` + tok + `&x=1","compensation":{"method":"DELETE","url":"http://127.0.0.1:9/undo?token=` + tok + `"}}`
	for i := 0; i < 2; i++ {
		code, body := raw("POST", "/api/v1/repos/ws-1/effects", agent, "stage-1", stage)
		if code != 201 || !strings.Contains(body, "hook?token=[redacted]") || !strings.Contains(body, "undo?token=[redacted]") {
			t.Fatalf("stage (%d): %d %s", i, code, body)
		}
		leaks("the staging answer", body)
	}
	code, body := raw("GET", "/api/v1/repos/ws-1/effects", agent, "", "")
	if code != 200 || !strings.Contains(body, "token=[redacted]") {
		t.Fatalf("list: %d %s", code, body)
	}
	leaks("the effect list", body)

	cs := (&mcpFixture{fixture: f}).connect(t, agent)
	text := mustCall(t, cs, "effect_list", map[string]any{"workspace": "ws-1"}, nil)
	leaks("MCP effect_list", text)
	if !strings.Contains(text, "token=[redacted]") {
		t.Errorf("MCP effect_list: %s", text)
	}
	text = mustCallError(t, cs, "effect_stage", map[string]any{"workspace": "ws-1", "method": "POST", "url": "http://10.0.0.7/x?token=" + tok}, lockstep.EINVALID)
	leaks("MCP effect_stage's refusal", text)

	// Refused through the API: the answer and the request's log line.
	for _, u := range []string{"http://10.0.0.7/x?token=" + tok, "ftp://h.example/?token=" + tok} {
		code, body := raw("POST", "/api/v1/repos/ws-1/effects", agent, "", `{"method":"POST","url":"`+u+`"}`)
		if code != 400 {
			t.Fatalf("refused effect: %d %s", code, body)
		}
		leaks("a refused effect's answer", body)
		code, body = raw("POST", "/api/v1/repos/app/hooks", admin, "", `{"url":"`+u+`","secret":"hook-signing-secret-0123"}`)
		if code != 400 {
			t.Fatalf("refused hook: %d %s", code, body)
		}
		leaks("a refused hook's answer", body)
	}

	// A hook, registered with an Idempotency-Key, then listed.
	for i := 0; i < 2; i++ {
		code, body := raw("POST", "/api/v1/repos/app/hooks", admin, "hook-1", `{"url":"http://127.0.0.1:9/gate?token=`+tok+`","secret":"hook-signing-secret-0123","events":["push"]}`)
		if code != 201 || !strings.Contains(body, "gate?token=[redacted]") {
			t.Fatalf("hook create (%d): %d %s", i, code, body)
		}
		leaks("the hook registration's answer", body)
	}
	code, body = raw("GET", "/api/v1/repos/app/hooks", admin, "", "")
	if code != 200 || !strings.Contains(body, "gate?token=[redacted]") {
		t.Fatalf("hooks: %d %s", code, body)
	}
	leaks("the hook list", body)

	if !strings.Contains(logs.String(), "private address") {
		t.Fatalf("the request log should record the refusals:\n%s", logs.String())
	}
	leaks("the server log", logs.String())
	for _, p := range []string{dbPath, dbPath + "-wal"} {
		b, err := os.ReadFile(p)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(tok)) {
			t.Errorf("BUG: %s holds the token", filepath.Base(p))
		}
	}
}
