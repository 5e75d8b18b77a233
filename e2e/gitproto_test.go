package e2e

import (
	"strings"
	"testing"

	"github.com/lockstep-hq/lockstep/internal/e2ekit"
)

// TestLsRemoteListsHEADOnce: git 2.39's protocol v2 ls-refs, run in a
// namespace, lists the namespace's HEAD twice; the server keeps one (v0
// never repeated it).
func TestLsRemoteListsHEADOnce(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOpts{})
	s.CreateRepo(t, "lsr")
	head := s.Push(t, s.AdminKey, "lsr", zeroOID, map[string]string{"a.txt": "a\n"}).Commit
	for _, v := range []string{"2", "0"} {
		out := e2ekit.Git(t, t.TempDir(), "-c", "protocol.version="+v, "ls-remote", s.GitURL("lsr", s.AdminKey)) + "\n"
		if n := strings.Count(out, "\tHEAD\n"); n != 1 {
			t.Errorf("protocol v%s: HEAD listed %d times:\n%s", v, n, out)
		}
		if !strings.Contains(out, head+"\tHEAD\n") || !strings.Contains(out, head+"\trefs/heads/main\n") {
			t.Errorf("protocol v%s: want HEAD and main at %s:\n%s", v, head, out)
		}
	}
	// A clone and a fetch over v2 still work through the filter.
	dir := t.TempDir()
	e2ekit.Git(t, dir, "-c", "protocol.version=2", "clone", "-q", s.GitURL("lsr", s.AdminKey), "c")
	if got := strings.TrimSpace(e2ekit.Git(t, dir+"/c", "rev-parse", "HEAD")); got != head {
		t.Fatalf("clone HEAD %s, want %s", got, head)
	}
	e2ekit.Git(t, dir+"/c", "-c", "protocol.version=2", "fetch", "-q", "origin")
}
