package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockstep-hq/lockstep/internal/e2ekit"
)

// TestStorageQuotaGitPush: with --quota-storage-bytes, an agent's git
// push into its workspace lands until the bytes its writes added reach
// the quota; the next push is refused before its pack is read, and git
// prints the server's message naming the setting; `lockstep whoami`
// shows the count against the quota.
func TestStorageQuotaGitPush(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOpts{Args: []string{"--quota-storage-bytes", "4000"}})
	admin := s.AdminKey
	if cr := s.CLI(t, admin, "", "repo", "create", "app"); cr.Code != 0 {
		t.Fatalf("repo create: %s", cr)
	}
	cr := s.CLI(t, admin, "", "keys", "create", "--name", "ag", "--role", "agent", "--quiet")
	if cr.Code != 0 {
		t.Fatalf("keys create: %s", cr)
	}
	agent := strings.TrimSpace(cr.Stdout)
	if cr := s.CLI(t, agent, "", "fork", "app", "ws"); cr.Code != 0 {
		t.Fatalf("fork: %s", cr)
	}
	dir := s.clone(t, "ws", agent)
	commit := func(name string) {
		t.Helper()
		b := make([]byte, 6000) // incompressible: the pack is bigger than the quota
		rand.Read(b)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(hex.EncodeToString(b)), 0o644); err != nil {
			t.Fatal(err)
		}
		e2ekit.Git(t, dir, "add", "-A")
		e2ekit.Git(t, dir, "commit", "-q", "-m", name)
	}
	commit("one.txt")
	e2ekit.Git(t, dir, "push", "-q", "origin", "HEAD:main")
	who := s.CLI(t, agent, "", "whoami")
	if who.Code != 0 || !strings.Contains(who.Stdout, "bytes written by active workspaces of 4000") {
		t.Fatalf("whoami after the first push: %s", who)
	}
	commit("two.txt")
	out, err := e2ekit.GitCmd(t, dir, "push", "origin", "HEAD:main")
	if err == nil || !strings.Contains(out, "storage quota") || !strings.Contains(out, "quota-storage-bytes") {
		t.Fatalf("push over the storage quota: err %v, output %s; want refused naming quota-storage-bytes", err, out)
	}
}

// TestKeyQuotaCLI: `lockstep keys quota` sets a key's own storage and
// runs quotas, a flag not given keeps the key's current override,
// "default" clears one (the server-wide setting applies), a negative
// value is refused naming the flag; `lockstep whoami` shows each limit
// and where it comes from.
func TestKeyQuotaCLI(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOpts{Args: []string{"--quota-storage-bytes", "4000", "--quota-runs", "3"}})
	admin := s.AdminKey
	cr := s.CLI(t, admin, "", "keys", "create", "--name", "ag", "--role", "agent", "--quiet")
	if cr.Code != 0 {
		t.Fatalf("keys create: %s", cr)
	}
	agent := strings.TrimSpace(cr.Stdout)
	who := s.CLI(t, agent, "", "whoami", "--json")
	var k struct{ ID string }
	if who.Code != 0 || json.Unmarshal([]byte(who.Stdout), &k) != nil || k.ID == "" {
		t.Fatalf("whoami --json: %s", who)
	}
	whoami := func(want ...string) {
		t.Helper()
		w := s.CLI(t, agent, "", "whoami")
		for _, s := range want {
			if w.Code != 0 || !strings.Contains(w.Stdout, s) {
				t.Fatalf("whoami lacks %q: %s", s, w)
			}
		}
	}
	whoami("of 4000 (server-wide)", "of 3 (server-wide)")
	if cr := s.CLI(t, admin, "", "keys", "quota", k.ID, "--runs", "1"); cr.Code != 0 {
		t.Fatalf("keys quota --runs 1: %s", cr)
	}
	whoami("of 4000 (server-wide)", "of 1 (this key's own quota)")
	if cr := s.CLI(t, admin, "", "keys", "quota", k.ID, "--storage-bytes", "0"); cr.Code != 0 {
		t.Fatalf("keys quota --storage-bytes 0: %s", cr)
	}
	whoami("of unlimited (this key's own quota)", "of 1 (this key's own quota)")
	cr = s.CLI(t, admin, "", "keys", "quota", k.ID, "--runs", "-1")
	if cr.Code == 0 || !strings.Contains(cr.Stderr, "--runs") {
		t.Fatalf("keys quota --runs -1: %s; want refused naming --runs", cr)
	}
	whoami("of unlimited (this key's own quota)", "of 1 (this key's own quota)")
	if cr := s.CLI(t, admin, "", "keys", "quota", k.ID, "--runs", "default"); cr.Code != 0 {
		t.Fatalf("keys quota --runs default: %s", cr)
	}
	whoami("of unlimited (this key's own quota)", "of 3 (server-wide)")
}
