package e2e

import (
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/lockstep-hq/lockstep/internal/e2ekit"
)

// TestPolicyRules: every built-in rule refuses on its own, and a promote
// that breaks several lists every unmet rule in one 412.
func TestPolicyRules(t *testing.T) {
	onBothBackends(t, testPolicyRules)
}

func testPolicyRules(t *testing.T, postgres bool) {
	s := startGateServer(t, serverOpts{Postgres: postgres})
	s.CreateRepo(t, "base")
	files := map[string]string{"README": "hello\n", "shared.txt": "one\ntwo\nthree\n", "secrets/.keep": "\n"}
	base0 := s.push(t, s.AdminKey, "base", zeroOID, files).Commit
	var p struct {
		Branch            string   `json:"branch"`
		RequiredChecks    []string `json:"required_checks"`
		MaxChangedFiles   int      `json:"max_changed_files"`
		MaxChangedLines   int      `json:"max_changed_lines"`
		ProtectedPaths    []string `json:"protected_paths"`
		RequireCleanMerge *bool    `json:"require_clean_merge"`
	}
	s.MustJSON(t, "PUT", "/api/v1/repos/base/gate", s.AdminKey, map[string]any{
		"max_changed_files": 2, "max_changed_lines": 6, "protected_paths": []string{"secrets/**"}, "require_clean_merge": true,
	}, http.StatusOK, &p)
	s.MustJSON(t, "GET", "/api/v1/repos/base/gate", s.AdminKey, nil, http.StatusOK, &p)
	if p.Branch != "main" || p.MaxChangedFiles != 2 || p.MaxChangedLines != 6 || !reflect.DeepEqual(p.ProtectedPaths, []string{"secrets/**"}) ||
		p.RequireCleanMerge == nil || !*p.RequireCleanMerge || p.RequiredChecks == nil {
		t.Fatalf("gate read back: %+v", p)
	}
	agent := s.CreateKey(t, "agent", "agent")
	for _, ws := range []string{"ws-files", "ws-lines", "ws-secret", "ws-conflict", "ws-all", "ws-ok", "ws-unprotect"} {
		s.forkTip(t, agent.Secret, "base", ws)
	}
	s.push(t, agent.Secret, "ws-files", base0, with(files, map[string]string{"a": "a\n", "b": "b\n", "c": "c\n"}))
	s.push(t, agent.Secret, "ws-lines", base0, with(files, map[string]string{"long.txt": strings.Repeat("line\n", 7)}))
	s.push(t, agent.Secret, "ws-secret", base0, with(files, map[string]string{"secrets/deep/token": "hunter2\n"}))
	s.push(t, agent.Secret, "ws-conflict", base0, with(files, map[string]string{"shared.txt": "one\nTWO by the agent\nthree\n"}))
	s.push(t, agent.Secret, "ws-all", base0, with(files, map[string]string{
		"shared.txt": "one\nTWO by another agent\nthree\n", "secrets/key.pem": strings.Repeat("k\n", 8), "x": "x\n"}))
	s.push(t, agent.Secret, "ws-unprotect", base0, with(files, map[string]string{"secrets/.keep": ""})) // deleting is touching
	ok := s.push(t, agent.Secret, "ws-ok", base0, with(files, map[string]string{"notes.txt": "fine\n"})).Commit

	// main moves under ws-conflict and ws-all (admin edits the same line).
	main1 := s.push(t, s.AdminKey, "base", base0, with(files, map[string]string{"shared.txt": "one\n2 on main\nthree\n"})).Commit

	for ws, want := range map[string][]string{
		"ws-files":     {"max_changed_files"},
		"ws-lines":     {"max_changed_lines"},
		"ws-secret":    {"protected_path"},
		"ws-unprotect": {"protected_path"},
		"ws-conflict":  {"clean_merge"},
		"ws-all":       {"clean_merge", "max_changed_files", "max_changed_lines", "protected_path"},
	} {
		reasons := s.promoteRefused(t, agent.Secret, ws, nil)
		if got := rules(reasons); !reflect.DeepEqual(got, want) {
			t.Errorf("promote %s: rules %v, want %v (%+v)", ws, got, want, reasons)
		}
		for _, r := range reasons {
			if r.Message == "" {
				t.Errorf("promote %s: reason without a message: %+v", ws, r)
			}
			switch r.Rule {
			case "protected_path":
				if !strings.HasPrefix(r.Path, "secrets/") {
					t.Errorf("promote %s: protected_path reason without the path: %+v", ws, r)
				}
			case "clean_merge":
				if !strings.Contains(r.Message, "shared.txt") {
					t.Errorf("promote %s: clean_merge reason does not name shared.txt: %+v", ws, r)
				}
			}
		}
	}
	if h := s.Head(t, "base"); h != main1 {
		t.Fatalf("main moved after refused promotes: %s", h)
	}
	// The evaluation is readable without promoting.
	var ev struct {
		Passed       bool     `json:"passed"`
		ChangedFiles int      `json:"changed_files"`
		Reasons      []reason `json:"reasons"`
	}
	s.MustJSON(t, "GET", "/api/v1/repos/ws-all/gate/evaluate", s.AdminKey, nil, http.StatusOK, &ev)
	if ev.Passed || ev.ChangedFiles != 3 || len(ev.Reasons) != 4 {
		t.Errorf("evaluate ws-all: %+v", ev)
	}

	// Within every limit: lands as a merge on top of main1.
	res := s.promote(t, agent.Secret, "ws-ok")
	c := s.Commit(t, "base", res.Commit)
	if len(c.Parents) != 2 || c.Parents[0] != main1 || c.Parents[1] != ok {
		t.Fatalf("ws-ok landed as %+v", c)
	}

	// Without require_clean_merge the gate passes a conflicting workspace,
	// but the merge itself still refuses to write conflicts into main.
	s.setGate(t, "base", map[string]any{"require_clean_merge": false})
	r := s.Call(t, "POST", "/api/v1/repos/ws-conflict/promote", agent.Secret, nil, "")
	e := e2ekit.RequireError(t, "promote ws-conflict without clean-merge rule", r, http.StatusConflict, "merge_conflict")
	if _, ok := e.Error.Details["conflicts"]; !ok {
		t.Errorf("merge_conflict without details.conflicts: %s", r)
	}
	if h := s.Head(t, "base"); h != res.Commit {
		t.Fatalf("main moved after a conflicting promote: %s", h)
	}
}

// TestBadInput: each mistake is a clear 4xx with the contract's code.
func TestBadInput(t *testing.T) {
	t.Parallel()
	s := startGateServer(t, serverOpts{})
	s.CreateRepo(t, "base")
	base0 := s.push(t, s.AdminKey, "base", zeroOID, map[string]string{"README": "hi\n"}).Commit
	ci := s.CreateKey(t, "ci", "ci")
	agent := s.CreateKey(t, "agent", "agent")
	other := s.CreateKey(t, "other-agent", "agent")
	s.forkTip(t, agent.Secret, "base", "ws")
	tip := s.push(t, agent.Secret, "ws", base0, map[string]string{"README": "hi\n", "x": "x\n"}).Commit
	unknown := strings.Repeat("ab", 20)

	hook := func(url, secret string) map[string]any {
		return map[string]any{"url": url, "secret": secret, "events": []string{"push"}}
	}
	cases := []struct {
		name         string
		method, path string
		key          string
		body         any
		status       int
		code         string
	}{
		{"check status done", "POST", "/api/v1/repos/ws/commits/" + tip + "/checks", ci.Secret, map[string]string{"name": "tests", "status": "done"}, 400, "invalid_argument"},
		{"check for an unknown commit", "POST", "/api/v1/repos/ws/commits/" + unknown + "/checks", ci.Secret, map[string]string{"name": "tests", "status": "success"}, 404, "not_found"},
		{"check not an oid", "POST", "/api/v1/repos/ws/commits/main/checks", ci.Secret, map[string]string{"name": "tests", "status": "success"}, 400, "invalid_argument"},
		{"check without a name", "POST", "/api/v1/repos/ws/commits/" + tip + "/checks", ci.Secret, map[string]string{"status": "success"}, 400, "invalid_argument"},
		{"check summary over 64 KiB", "POST", "/api/v1/repos/ws/commits/" + tip + "/checks", ci.Secret, map[string]string{"name": "tests", "status": "failure", "summary": strings.Repeat("x", 65<<10)}, 413, "too_large"},
		{"check details_url not http", "POST", "/api/v1/repos/ws/commits/" + tip + "/checks", ci.Secret, map[string]string{"name": "tests", "status": "success", "details_url": "javascript:alert(1)"}, 400, "invalid_argument"},
		{"check posted by an agent", "POST", "/api/v1/repos/ws/commits/" + tip + "/checks", agent.Secret, map[string]string{"name": "tests", "status": "success"}, 403, "permission_denied"},
		{"check without a key", "POST", "/api/v1/repos/ws/commits/" + tip + "/checks", "", map[string]string{"name": "tests", "status": "success"}, 401, "unauthenticated"},
		{"hook url ftp", "POST", "/api/v1/repos/base/hooks", s.AdminKey, hook("ftp://x", hookSecret), 400, "invalid_argument"},
		{"hook url relative", "POST", "/api/v1/repos/base/hooks", s.AdminKey, hook("/hook", hookSecret), 400, "invalid_argument"},
		{"hook secret too short", "POST", "/api/v1/repos/base/hooks", s.AdminKey, hook("http://127.0.0.1:9/h", "short"), 400, "invalid_argument"},
		{"hook unknown event", "POST", "/api/v1/repos/base/hooks", s.AdminKey, map[string]any{"url": "http://127.0.0.1:9/h", "secret": hookSecret, "events": []string{"deploy"}}, 400, "invalid_argument"},
		{"hook by an agent", "POST", "/api/v1/repos/base/hooks", agent.Secret, hook("http://127.0.0.1:9/h", hookSecret), 403, "permission_denied"},
		{"deliveries of an unknown hook", "GET", "/api/v1/repos/base/hooks/hook_nope/deliveries", s.AdminKey, nil, 404, "not_found"},
		{"promote a base repository", "POST", "/api/v1/repos/base/promote", s.AdminKey, map[string]any{}, 400, "invalid_argument"},
		{"promote by another agent", "POST", "/api/v1/repos/ws/promote", other.Secret, map[string]any{}, 403, "permission_denied"},
		{"promote by ci", "POST", "/api/v1/repos/ws/promote", ci.Secret, map[string]any{}, 403, "permission_denied"},
		{"promote bad mode", "POST", "/api/v1/repos/ws/promote", agent.Secret, map[string]any{"mode": "rebase"}, 400, "invalid_argument"},
		{"promote bad commit", "POST", "/api/v1/repos/ws/promote", agent.Secret, map[string]any{"commit": "xyz"}, 400, "invalid_argument"},
		{"promote unknown workspace", "POST", "/api/v1/repos/nope/promote", s.AdminKey, map[string]any{}, 404, "not_found"},
		{"promote unknown field", "POST", "/api/v1/repos/ws/promote", agent.Secret, map[string]any{"force": true}, 400, "invalid_argument"},
		{"policy glob does not parse", "PUT", "/api/v1/repos/base/gate", s.AdminKey, map[string]any{"protected_paths": []string{"["}}, 400, "invalid_argument"},
		{"policy negative limit", "PUT", "/api/v1/repos/base/gate", s.AdminKey, map[string]any{"max_changed_files": -1}, 400, "invalid_argument"},
		{"policy unknown field", "PUT", "/api/v1/repos/base/gate", s.AdminKey, map[string]any{"required_check": []string{"tests"}}, 400, "invalid_argument"},
		{"policy bad promote mode", "PUT", "/api/v1/repos/base/gate", s.AdminKey, map[string]any{"promote_mode": "rebase"}, 400, "invalid_argument"},
		{"policy set by an agent", "PUT", "/api/v1/repos/base/gate", agent.Secret, map[string]any{"required_checks": []string{}}, 403, "permission_denied"},
		{"policy set by ci", "PUT", "/api/v1/repos/base/gate", ci.Secret, map[string]any{"required_checks": []string{}}, 403, "permission_denied"},
		{"policy of an unknown repo", "PUT", "/api/v1/repos/nope/gate", s.AdminKey, map[string]any{}, 404, "not_found"},
	}
	for _, c := range cases {
		r := s.Call(t, c.method, c.path, c.key, c.body, "")
		if r.Status != c.status {
			t.Errorf("%s: want %d %s, got %s", c.name, c.status, c.code, r)
			continue
		}
		var e e2ekit.Envelope
		r.Decode(t, &e)
		if e.Error.Code != c.code || e.Error.Message == "" {
			t.Errorf("%s: want code %s with a message, got %s", c.name, c.code, r)
		}
	}
	// Nothing of that changed anything.
	if cs := s.checks(t, "ws", tip); len(cs.History) != 0 {
		t.Errorf("refused checks were stored: %+v", cs)
	}
	if h := s.Head(t, "base"); h != base0 {
		t.Errorf("main moved: %s", h)
	}
	var hooks struct {
		Hooks []any `json:"hooks"`
	}
	s.MustJSON(t, "GET", "/api/v1/repos/base/hooks", s.AdminKey, nil, http.StatusOK, &hooks)
	if len(hooks.Hooks) != 0 {
		t.Errorf("refused hooks were stored: %+v", hooks)
	}
	// A promoted workspace cannot be promoted again.
	s.setGate(t, "base", map[string]any{})
	s.promote(t, agent.Secret, "ws")
	e2ekit.RequireError(t, "promote a promoted workspace", s.Call(t, "POST", "/api/v1/repos/ws/promote", agent.Secret, map[string]any{}, ""), 400, "invalid_argument")
}

// TestPromoteModes: squash lands one single-parent commit with the merged
// tree; fast_forward refuses diverged histories and leaves the workspace
// active; the gate's promote_mode is the default.
func TestPromoteModes(t *testing.T) {
	t.Parallel()
	s := startGateServer(t, serverOpts{})
	s.CreateRepo(t, "base")
	files := map[string]string{"README": "hi\n"}
	base0 := s.push(t, s.AdminKey, "base", zeroOID, files).Commit
	s.setGate(t, "base", map[string]any{"promote_mode": "squash"})
	agent := s.CreateKey(t, "agent", "agent")
	s.forkTip(t, agent.Secret, "base", "sq")
	s.forkTip(t, agent.Secret, "base", "ff")
	c1 := s.push(t, agent.Secret, "sq", base0, with(files, map[string]string{"a": "1\n"})).Commit
	c2 := s.push(t, agent.Secret, "sq", c1, with(files, map[string]string{"a": "2\n", "b": "b\n"})).Commit
	ffTip := s.push(t, agent.Secret, "ff", base0, with(files, map[string]string{"c": "c\n"})).Commit

	res := s.promote(t, agent.Secret, "sq") // the gate's mode: squash
	c := s.Commit(t, "base", res.Commit)
	if res.Commit == c2 || len(c.Parents) != 1 || c.Parents[0] != base0 || c.Tree != s.Commit(t, "sq", c2).Tree {
		t.Fatalf("squash landed %+v; want one commit on %s with the tree of %s", c, base0, c2)
	}

	r := s.Call(t, "POST", "/api/v1/repos/ff/promote", agent.Secret, map[string]any{"mode": "fast_forward"}, "")
	e2ekit.RequireError(t, "fast_forward of a diverged workspace", r, http.StatusBadRequest, "invalid_argument")
	if h := s.Head(t, "base"); h != res.Commit {
		t.Fatalf("main moved: %s", h)
	}
	var info struct {
		Status string `json:"status"`
	}
	s.MustJSON(t, "GET", "/api/v1/repos/ff", s.AdminKey, nil, http.StatusOK, &info)
	if info.Status != "active" {
		t.Fatalf("ff after a refused fast-forward: %s", info.Status)
	}
	merged := s.promote(t, agent.Secret, "ff") // squash again, on top
	if m := s.Commit(t, "base", merged.Commit); len(m.Parents) != 1 || m.Parents[0] != res.Commit || merged.Commit == ffTip {
		t.Fatalf("second squash: %+v", m)
	}
	if got := s.Blob(t, "base", "main", "c"); got != "c\n" {
		t.Fatalf("main's c: %q", got)
	}
}
