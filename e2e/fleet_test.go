package e2e

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep/internal/e2ekit"
)

// TestFleetBounds is issue 28's "done when" for keys, on the built
// binary: a key over its workspace quota gets 429 with Retry-After and a
// message naming the quota and its setting; a key scoped to one
// workspace cannot touch another (API and git push, 403); an expired key
// gets 401 saying it expired.
func TestFleetBounds(t *testing.T) {
	s := startServer(t, serverOpts{Args: []string{"--quota-workspaces", "2"}})
	s.CreateRepo(t, "shop")
	tip := s.Push(t, s.AdminKey, "shop", zeroOID, map[string]string{"README": "shop\n"}).Commit
	agent := s.CreateKey(t, "agent", "agent")

	// 1. The workspace quota.
	s.forkTip(t, agent.Secret, "shop", "w1")
	s.forkTip(t, agent.Secret, "shop", "w2")
	r := s.Call(t, "POST", "/api/v1/repos/shop/forks", agent.Secret, map[string]string{"name": "w3"}, "")
	e := e2ekit.RequireError(t, "fork over the quota", r, http.StatusTooManyRequests, "rate_limited")
	if r.Header.Get("Retry-After") == "" || !strings.Contains(e.Error.Message, "workspace quota") || !strings.Contains(e.Error.Message, "2") {
		t.Fatalf("429 over the quota: Retry-After %q, message %q: want both, naming the quota", r.Header.Get("Retry-After"), e.Error.Message)
	}

	// 2. A key scoped to w1 works there and nowhere else.
	var sub e2ekit.Key
	s.MustJSON(t, "POST", "/api/v1/keys", agent.Secret, map[string]any{"name": "sub", "role": "agent", "ttl": "1h",
		"scope": map[string]string{"workspace": "w1"}}, http.StatusCreated, &sub)
	s.Push(t, sub.Secret, "w1", tip, map[string]string{"README": "shop\n", "a.txt": "mine\n"})
	for _, c := range []struct{ method, path string }{
		{"GET", "/api/v1/repos/w2"},
		{"GET", "/api/v1/repos/w2/refs"},
		{"DELETE", "/api/v1/repos/w2"},
		{"POST", "/api/v1/repos/shop/forks"},
	} {
		r := s.Call(t, c.method, c.path, sub.Secret, map[string]string{"name": "w9"}, "")
		e2ekit.RequireError(t, "scoped key "+c.method+" "+c.path, r, http.StatusForbidden, "permission_denied")
	}
	r = s.PushRaw(t, sub.Secret, "w2", e2ekit.PushQuery("main", tip), e2ekit.TarOf(t, map[string]string{"README": "theirs\n"}))
	e2ekit.RequireError(t, "scoped key pushing into w2", r, http.StatusForbidden, "permission_denied")
	dir := t.TempDir()
	e2ekit.Git(t, dir, "init", "-q")
	e2ekit.Git(t, dir, "commit", "-q", "--allow-empty", "-m", "x")
	if out, err := e2ekit.GitCmd(t, dir, "push", "-q", s.GitURL("w2", sub.Secret), "HEAD:refs/heads/other"); err == nil || !strings.Contains(out, "403") {
		t.Fatalf("git push into another workspace with a scoped key: %v\n%s", err, out)
	}
	if refs := s.Refs(t, s.AdminKey, "w2"); len(refs) != 1 || refs["refs/heads/main"] != tip {
		t.Fatalf("w2's refs moved: %v", refs)
	}

	// 3. An expired key: minted for a millisecond, then 401 saying so.
	// (The wait below is for the clock to pass the expiry, not a timing
	// assertion: it only bounds how long the test may hang.)
	var short e2ekit.Key
	s.MustJSON(t, "POST", "/api/v1/keys", s.AdminKey, map[string]any{"name": "short", "role": "ci", "ttl": "1ms"}, http.StatusCreated, &short)
	deadline := time.Now().Add(10 * time.Second)
	for {
		r = s.Call(t, "GET", "/api/v1/whoami", short.Secret, nil, "")
		if r.Status == http.StatusUnauthorized || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if e := e2ekit.RequireError(t, "expired key", r, http.StatusUnauthorized, "unauthenticated"); !strings.Contains(e.Error.Message, "expired") {
		t.Fatalf("401 of an expired key: %q, want it to say expired", e.Error.Message)
	}
	s.MustJSON(t, "GET", "/api/v1/whoami", agent.Secret, nil, http.StatusOK, nil)
}
