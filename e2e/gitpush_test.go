package e2e

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep/internal/e2ekit"
)

// TestGitPushGated: an agent works with plain git (clone the workspace,
// commit, push over smart HTTP); the push raises a signed hook for the
// exact commit, CI's check on that commit gates the promote, and the
// landed main is what git pushed.
func TestGitPushGated(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, false, 0)
	s := startGateServer(t, serverOpts{})
	s.CreateRepo(t, "base")
	base0 := s.push(t, s.AdminKey, "base", zeroOID, map[string]string{"README": "hi\n"}).Commit
	s.setGate(t, "base", map[string]any{"required_checks": []string{"tests"}})
	hookID := s.createHook(t, "base", rcv.srv.URL, []string{"push"})
	ci := s.CreateKey(t, "ci", "ci")
	agent := s.CreateKey(t, "agent", "agent")
	s.forkTip(t, agent.Secret, "base", "ws")

	dir := filepath.Join(t.TempDir(), "ws")
	e2ekit.Git(t, "", "clone", "-q", s.GitURL("ws", agent.Secret), dir)
	if err := os.WriteFile(filepath.Join(dir, "feature.txt"), []byte("from git\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e2ekit.Git(t, dir, "add", "feature.txt")
	e2ekit.Git(t, dir, "commit", "-q", "-m", "feature from git")
	pushed := e2ekit.Git(t, dir, "rev-parse", "HEAD")
	e2ekit.Git(t, dir, "push", "-q", "origin", "HEAD:main")
	if h := s.Head(t, "ws"); h != pushed {
		t.Fatalf("ws main %s after git push, want %s", h, pushed)
	}
	// An agent cannot push to the base branch with git either.
	e2ekit.Git(t, dir, "remote", "add", "base", s.GitURL("base", agent.Secret))
	if out, err := e2ekit.GitRun(dir, "", "push", "-q", "base", "HEAD:main"); err == nil {
		t.Fatalf("an agent pushed to base's main with git:\n%s", out)
	}
	if h := s.Head(t, "base"); h != base0 {
		t.Fatalf("base main moved: %s", h)
	}

	eventually(t, 30*time.Second, "the git push's delivery", func() bool {
		ds := s.deliveries(t, "base", hookID)
		return len(ds) == 1 && ds[0].Status == "succeeded"
	})
	calls, bad := rcv.snapshot()
	if bad != 0 || len(calls) != 1 || calls[0].Body["commit"] != pushed || calls[0].Body["workspace"] != "ws" {
		t.Fatalf("receiver: %d bad, calls %+v", bad, calls)
	}
	s.promoteRefused(t, agent.Secret, "ws", nil)
	s.postCheck(t, ci.Secret, "ws", pushed, "tests", "success")
	if res := s.promote(t, agent.Secret, "ws"); res.Commit != pushed {
		t.Fatalf("promote landed %s, want the fast-forward to %s", res.Commit, pushed)
	}
	e2ekit.Git(t, dir, "fetch", "-q", "base")
	if got := e2ekit.Git(t, dir, "rev-parse", "base/main"); got != pushed {
		t.Fatalf("git fetch base: main %s, want %s", got, pushed)
	}
}

// TestGitTagPushHookEvent: a tag pushed with git raises the same signed
// push event as a branch, naming the tag, its object and the commit it
// peels to.
func TestGitTagPushHookEvent(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, false, 0)
	s := startGateServer(t, serverOpts{})
	s.CreateRepo(t, "tbase")
	base0 := s.push(t, s.AdminKey, "tbase", zeroOID, map[string]string{"README": "hi\n"}).Commit
	hookID := s.createHook(t, "tbase", rcv.srv.URL, []string{"push"})
	agent := s.CreateKey(t, "agent", "agent")
	s.fork(t, agent.Secret, "tbase", "tws")
	dir := filepath.Join(t.TempDir(), "tws")
	e2ekit.Git(t, "", "clone", "-q", s.GitURL("tws", agent.Secret), dir)
	e2ekit.Git(t, dir, "tag", "-a", "v1", "-m", "release")
	tagObj := e2ekit.Git(t, dir, "rev-parse", "v1")
	e2ekit.Git(t, dir, "push", "-q", "origin", "v1")
	eventually(t, 30*time.Second, "the tag push's delivery", func() bool {
		ds := s.deliveries(t, "tbase", hookID)
		return len(ds) == 1 && ds[0].Status == "succeeded"
	})
	calls, bad := rcv.snapshot()
	if bad != 0 || len(calls) != 1 {
		t.Fatalf("receiver: %d bad, calls %+v", bad, calls)
	}
	b := calls[0].Body
	if b["event"] != "push" || b["tag"] != "v1" || b["ref"] != "refs/tags/v1" || b["object"] != tagObj || b["commit"] != base0 || b["branch"] != "" || b["workspace"] != "tws" {
		t.Fatalf("tag push event: %+v, want tag v1 (object %s) peeled to %s", b, tagObj, base0)
	}
}
