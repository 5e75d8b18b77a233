package e2e

import (
	"fmt"
	"testing"

	"github.com/lockstep-hq/lockstep/internal/e2ekit"
)

// TestGitTagChainPeeled: a tag of a tag of … (deeper than any small
// bound) is advertised peeled to the object at the end of the chain, as
// git peels it: ls-remote over both protocols lists what a plain git
// repository holding the same refs lists.
func TestGitTagChainPeeled(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOpts{})
	agent := s.CreateKey(t, "agent", "agent")
	s.CreateRepo(t, "tchain")
	s.Push(t, s.AdminKey, "tchain", zeroOID, map[string]string{"a.txt": "a\n"})
	s.fork(t, agent.Secret, "tchain", "ws-tchain")
	dir := s.clone(t, "ws-tchain", agent.Secret)
	prev := "HEAD"
	for i := 1; i <= 15; i++ {
		name := fmt.Sprintf("n%02d", i)
		e2ekit.Git(t, dir, "-c", "advice.nestedTag=false", "tag", "-a", name, "-m", name, prev)
		prev = name
	}
	e2ekit.Git(t, dir, "push", "-q", "--tags", "origin")
	want := e2ekit.Git(t, dir, "ls-remote", ".", "refs/tags/*")
	for _, v := range []string{"2", "0"} {
		got := e2ekit.Git(t, dir, "-c", "protocol.version="+v, "ls-remote", "origin", "refs/tags/*")
		if got != want {
			t.Errorf("ls-remote (protocol v%s):\n%s\nwant (git's own peeling):\n%s", v, got, want)
		}
	}
}
