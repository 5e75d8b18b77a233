package e2e

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/lockstep-hq/lockstep/internal/e2ekit"
)

// TestPromoteThroughGate: nothing reaches the base's main until the gate
// passes on the exact commit; a check on another commit does not count;
// protected paths are refused whatever the checks say.
func TestPromoteThroughGate(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOpts{})
	agent := s.CreateKey(t, "agent-a", "agent")
	other := s.CreateKey(t, "agent-b", "agent")
	ci := s.CreateKey(t, "ci", "ci")
	s.CreateRepo(t, "gated")
	v0 := s.Push(t, s.AdminKey, "gated", zeroOID, map[string]string{"app.txt": "v0\n", "deploy/prod.yaml": "replicas: 3\n"})
	s.MustJSON(t, "PUT", "/api/v1/repos/gated/gate", s.AdminKey,
		map[string]any{"branch": "main", "required_checks": []string{"ci/test"}, "protected_paths": []string{"deploy/**"}}, http.StatusOK, nil)
	e2ekit.WantError(t, s.Call(t, "PUT", "/api/v1/repos/gated/gate", agent.Secret, map[string]any{"required_checks": []string{}}, ""), 403, "permission_denied")

	s.fork(t, agent.Secret, "gated", "ws")
	c1 := s.Push(t, agent.Secret, "ws", v0.Commit, map[string]string{"app.txt": "v1 by the agent\n", "deploy/prod.yaml": "replicas: 3\n"})

	promote := func(key string) *e2ekit.Response {
		t.Helper()
		return s.Call(t, "POST", "/api/v1/repos/ws/promote", key, map[string]string{}, "")
	}
	e := e2ekit.WantError(t, promote(agent.Secret), 412, "gate_failed")
	if reasons, _ := e.Error.Details["reasons"].([]any); len(reasons) == 0 {
		t.Errorf("gate_failed without reasons: %v", e.Error.Details)
	}
	// A check counts only for the commit it names.
	s.MustJSON(t, "POST", "/api/v1/repos/gated/commits/"+v0.Commit+"/checks", ci.Secret, map[string]string{"name": "ci/test", "status": "success"}, http.StatusCreated, nil)
	e2ekit.WantError(t, promote(agent.Secret), 412, "gate_failed")
	e2ekit.WantError(t, s.Call(t, "POST", "/api/v1/repos/ws/commits/"+c1.Commit+"/checks", agent.Secret, map[string]string{"name": "ci/test", "status": "success"}, ""), 403, "permission_denied")
	s.MustJSON(t, "POST", "/api/v1/repos/ws/commits/"+c1.Commit+"/checks", ci.Secret, map[string]string{"name": "ci/test", "status": "failure"}, http.StatusCreated, nil)
	e2ekit.WantError(t, promote(agent.Secret), 412, "gate_failed")
	if got := s.Head(t, "gated"); got != v0.Commit {
		t.Fatalf("refused promotes moved main to %s", got)
	}

	s.MustJSON(t, "POST", "/api/v1/repos/ws/commits/"+c1.Commit+"/checks", ci.Secret, map[string]string{"name": "ci/test", "status": "success"}, http.StatusCreated, nil)
	e2ekit.WantError(t, promote(other.Secret), 403, "permission_denied")
	var res struct {
		Commit string `json:"commit"`
		Into   string `json:"into"`
	}
	s.MustJSON(t, "POST", "/api/v1/repos/ws/promote", agent.Secret, map[string]string{}, http.StatusOK, &res)
	if got := s.Head(t, "gated"); got != res.Commit || got == v0.Commit {
		t.Fatalf("after promote main = %s, answer %+v", got, res)
	}
	if got := s.Blob(t, "gated", "main", "app.txt"); got != "v1 by the agent\n" {
		t.Errorf("promoted app.txt = %q", got)
	}
	var ok int
	for _, e := range s.Oplog(t, url.Values{"op": {"promote"}}) {
		if e.Result == "ok" {
			ok++
		}
	}
	if ok != 1 {
		t.Errorf("%d successful promote entries in the oplog, want 1", ok)
	}

	// A change to a protected path is refused even with green checks.
	s.fork(t, agent.Secret, "gated", "ws2")
	c2 := s.Push(t, agent.Secret, "ws2", res.Commit, map[string]string{"app.txt": "v1 by the agent\n", "deploy/prod.yaml": "replicas: 300\n"})
	s.MustJSON(t, "POST", "/api/v1/repos/ws2/commits/"+c2.Commit+"/checks", ci.Secret, map[string]string{"name": "ci/test", "status": "success"}, http.StatusCreated, nil)
	e2ekit.WantError(t, s.Call(t, "POST", "/api/v1/repos/ws2/promote", agent.Secret, map[string]string{}, ""), 412, "gate_failed")
	if got := s.Head(t, "gated"); got != res.Commit {
		t.Errorf("a protected-path change reached main: %s", got)
	}
}
