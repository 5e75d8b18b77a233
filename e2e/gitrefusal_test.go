package e2e

import (
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockstep-hq/lockstep/internal/e2ekit"
)

// TestGitPushRefusalReasons: a refused git push tells the user why in
// git's own words (a per-ref "[remote rejected] … (reason)", a
// "fatal: remote error: reason", or "remote: reason" before an HTTP
// failure), never only "HTTP 413" or "error: 400"; and a push refused
// before its pack was read leaves no object behind.
func TestGitPushRefusalReasons(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOpts{})
	agent := s.CreateKey(t, "agent", "agent")
	rev := s.CreateKey(t, "rev", "reviewer")
	s.CreateRepo(t, "rr")
	s.Push(t, s.AdminKey, "rr", zeroOID, map[string]string{"a.txt": "a\n"})

	commit := func(dir, name string) string {
		writeFile(t, filepath.Join(dir, name), name+"\n")
		e2ekit.Git(t, dir, "add", name)
		e2ekit.Git(t, dir, "commit", "-q", "-m", name)
		return e2ekit.Git(t, dir, "rev-parse", "HEAD")
	}
	stored := func(oid string) bool {
		_, err := e2ekit.GitCmd(t, "", "--git-dir="+s.networkDir("rr"), "cat-file", "-e", oid)
		return err == nil
	}

	// An agent pushing to its workspace after it was marked failed: the
	// store's reason, per ref, and the pack was never stored.
	s.fork(t, agent.Secret, "rr", "ws-failed")
	dir := s.clone(t, "ws-failed", agent.Secret)
	s.MustJSON(t, "POST", "/api/v1/repos/ws-failed/status", rev.Secret, map[string]any{"status": "failed", "reason": "tests never pass"}, http.StatusOK, nil)
	c := commit(dir, "late.txt")
	out, err := e2ekit.GitCmd(t, dir, "push", "origin", "main")
	if err == nil {
		t.Fatalf("push to a failed workspace succeeded:\n%s", out)
	}
	want := " ! [remote rejected] main -> main (workspace ws-failed is failed: its refs are kept for review and never move again; create a new workspace to continue)"
	if !strings.Contains(out, want) {
		t.Errorf("push to a failed workspace: git printed\n%s\nwant the line\n%s", out, want)
	}
	if strings.Contains(out, "error: 400") || strings.Contains(out, "RPC failed") {
		t.Errorf("push to a failed workspace shows an HTTP error:\n%s", out)
	}
	if stored(c) {
		t.Errorf("the refused push's commit %s was stored", c)
	}

	// A reviewer's push: the advertisement stays a 403 (git stops, asks
	// for nothing), with the reason printed as "remote: …".
	rdir := s.clone(t, "rr", rev.Secret)
	rc := commit(rdir, "reviewer.txt")
	out, err = e2ekit.GitCmd(t, rdir, "push", "origin", "main")
	if err == nil {
		t.Fatalf("a reviewer's push succeeded:\n%s", out)
	}
	if want := "remote: role reviewer may not write repositories\n"; !strings.Contains(out, want) {
		t.Errorf("reviewer push: git printed\n%s\nwant %q", out, want)
	}
	if !strings.Contains(out, "The requested URL returned error: 403") {
		t.Errorf("reviewer push: want git's 403 line:\n%s", out)
	}
	if stored(rc) {
		t.Errorf("the reviewer's commit %s was stored", rc)
	}
	// Non-git clients still get the JSON envelope.
	e2ekit.WantError(t, s.Call(t, "GET", "/git/rr.git/info/refs?service=git-receive-pack", rev.Secret, nil, ""), 403, "permission_denied")

	// An agent pushing to a base repository: refused per ref, nothing stored.
	adir := s.clone(t, "rr", agent.Secret)
	ac := commit(adir, "agent.txt")
	out, err = e2ekit.GitCmd(t, adir, "push", "origin", "main")
	if err == nil {
		t.Fatalf("an agent's push to a base succeeded:\n%s", out)
	}
	if want := "remote: an agent key may not write base repository rr: fork a workspace and promote it\n"; !strings.Contains(out, want) {
		t.Errorf("agent push to a base: git printed\n%s\nwant %q", out, want)
	}
	if stored(ac) {
		t.Errorf("the agent's commit %s was stored", ac)
	}

	// Over 1000 ref updates in one push: git's "remote error", not HTTP 413.
	var stdin strings.Builder
	for i := range 1001 {
		fmt.Fprintf(&stdin, "create refs/heads/many/b%04d %s\n", i, c)
	}
	if out, err := e2ekit.GitRun(dir, stdin.String(), "update-ref", "--stdin"); err != nil {
		t.Fatalf("update-ref: %v\n%s", err, out)
	}
	s.fork(t, agent.Secret, "rr", "ws-many")
	e2ekit.Git(t, dir, "remote", "add", "many", s.GitURL("ws-many", agent.Secret))
	out, err = e2ekit.GitCmd(t, dir, "push", "many", "refs/heads/many/*:refs/heads/many/*")
	if err == nil {
		t.Fatalf("a push of 1001 refs succeeded:\n%s", out)
	}
	if want := "fatal: remote error: more than 1000 ref updates in one push: push them in several pushes"; !strings.Contains(out, want) {
		t.Errorf("1001-ref push: git printed\n%s\nwant %q", out, want)
	}
	if strings.Contains(out, "413") {
		t.Errorf("1001-ref push shows an HTTP status:\n%s", out)
	}
	for name := range s.Refs(t, s.AdminKey, "ws-many") {
		if strings.HasPrefix(name, "refs/heads/many/") {
			t.Fatalf("%s was created by a refused push", name)
		}
	}
	if ops := s.Oplog(t, url.Values{"repo": {"ws-failed"}, "op": {"git.push"}}); len(ops) != 0 {
		t.Errorf("refused pushes logged as moves: %+v", ops)
	}
}
