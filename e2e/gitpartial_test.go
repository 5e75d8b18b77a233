package e2e

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockstep-hq/lockstep/internal/e2ekit"
)

// TestPartialCloneEveryProtocol: `git clone --filter=blob:none` works over
// protocol v2 and v0 and with a scoped key (always served v0). v0's
// upload-pack advertised filter but refuses a later want of a blob the
// refs do not name, so a v0 partial clone "succeeded" and its checkout
// then failed ("Server does not allow request for unadvertised object").
// v0 no longer advertises filter: git says so and clones everything.
func TestPartialCloneEveryProtocol(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOpts{})
	s.CreateRepo(t, "pc")
	first := s.Push(t, s.AdminKey, "pc", zeroOID, map[string]string{"a.txt": "one\n", "dir/b.txt": "bee\n"}).Commit
	s.Push(t, s.AdminKey, "pc", first, map[string]string{"a.txt": "two\n", "dir/b.txt": "bee\n"})
	agent := s.CreateKey(t, "agent", "agent")
	s.forkTip(t, agent.Secret, "pc", "pc-w")
	var sub e2ekit.Key
	s.MustJSON(t, "POST", "/api/v1/keys", agent.Secret, map[string]any{"name": "sub", "role": "agent", "ttl": "1h",
		"scope": map[string]string{"workspace": "pc-w"}}, http.StatusCreated, &sub)

	for _, c := range []struct{ name, repo, key, version string }{
		{"v2", "pc", s.AdminKey, "2"},
		{"v0", "pc", s.AdminKey, "0"},
		{"scoped", "pc-w", sub.Secret, "2"},
	} {
		dir := t.TempDir()
		out, err := e2ekit.GitCmd(t, dir, "-c", "protocol.version="+c.version, "clone", "-q", "--filter=blob:none", s.GitURL(c.repo, c.key), "c")
		if err != nil {
			t.Errorf("%s: partial clone: %v\n%s", c.name, err, out)
			continue
		}
		if b, err := os.ReadFile(filepath.Join(dir, "c", "a.txt")); err != nil || string(b) != "two\n" {
			t.Errorf("%s: a.txt = %q, %v; want the checkout", c.name, b, err)
		}
		// The history's blobs: fetched on demand (v2) or already there.
		log := e2ekit.Git(t, filepath.Join(dir, "c"), "-c", "protocol.version="+c.version, "log", "-p", "--format=%H")
		if !strings.Contains(log, "-one") || !strings.Contains(log, "+two") {
			t.Errorf("%s: log -p lacks the first version of a.txt:\n%s", c.name, log)
		}
	}
}

// TestShallowExcludeEveryProtocol: `git clone --shallow-exclude=REF`
// sends "deepen-not REF", which git upload-pack resolves among the
// refs outside any namespace: in a repository's namespace it found none
// and died ("ambiguous deepen-not"), and git printed only "expected
// 'packfile'" (v2) or "the remote end hung up unexpectedly" (v0). The
// name is now resolved in the repository's namespace only, and a name
// that is no ref of it is refused with a reason git prints.
func TestShallowExcludeEveryProtocol(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOpts{})
	s.CreateRepo(t, "se")
	c1 := s.Push(t, s.AdminKey, "se", zeroOID, map[string]string{"a.txt": "1\n"}).Commit
	c2 := s.Push(t, s.AdminKey, "se", c1, map[string]string{"a.txt": "2\n"}).Commit
	c3 := s.Push(t, s.AdminKey, "se", c2, map[string]string{"a.txt": "3\n"}).Commit
	dir := s.clone(t, "se", s.AdminKey)
	e2ekit.Git(t, dir, "tag", "old", c1)
	e2ekit.Git(t, dir, "branch", "side", c1)
	e2ekit.Git(t, dir, "push", "-q", "origin", "old", "side")
	s.forkTip(t, s.AdminKey, "se", "se-w")
	for _, v := range []string{"2", "0"} {
		for _, exclude := range []string{"old", "refs/tags/old", "side"} {
			d := t.TempDir()
			out, err := e2ekit.GitCmd(t, d, "-c", "protocol.version="+v, "clone", "-q", "--single-branch", "--branch", "main", "--shallow-exclude="+exclude, s.GitURL("se", s.AdminKey), "c")
			if err != nil {
				t.Errorf("v%s --shallow-exclude=%s: %v\n%s", v, exclude, err, out)
				continue
			}
			if got := e2ekit.Git(t, filepath.Join(d, "c"), "log", "--format=%H"); got != c3+"\n"+c2 {
				t.Errorf("v%s --shallow-exclude=%s: history %q, want %s and %s", v, exclude, got, c3, c2)
			}
		}
		// No such ref, and a ref of another repository of the fork
		// network (git would resolve it in the shared store: a scoped
		// key would learn which workspaces and refs exist).
		for _, exclude := range []string{"nosuch", "refs/namespaces/se-w/refs/heads/main"} {
			d := t.TempDir()
			out, err := e2ekit.GitCmd(t, d, "-c", "protocol.version="+v, "clone", "-q", "--shallow-exclude="+exclude, s.GitURL("se", s.AdminKey), "c")
			if err == nil || !strings.Contains(out, "remote error: deepen-not "+exclude+": no single branch or tag of se") {
				t.Errorf("v%s --shallow-exclude=%s: %v, want git to print the server's reason:\n%s", v, exclude, err, out)
			}
		}
	}
}

// TestScopedKeyGitRefusalSaysWhy: a scoped key's git fetch or push of a
// repository outside its scope is refused 403 before anything is read; to
// a git client the reason comes as text/plain, which git prints as
// "remote: <reason>" (it came as JSON, and git printed only "The
// requested URL returned error: 403").
func TestScopedKeyGitRefusalSaysWhy(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOpts{})
	s.CreateRepo(t, "sk")
	s.Push(t, s.AdminKey, "sk", zeroOID, map[string]string{"a.txt": "a\n"})
	agent := s.CreateKey(t, "agent", "agent")
	s.forkTip(t, agent.Secret, "sk", "sk-mine")
	s.forkTip(t, agent.Secret, "sk", "sk-other")
	var sub e2ekit.Key
	s.MustJSON(t, "POST", "/api/v1/keys", agent.Secret, map[string]any{"name": "sub", "role": "agent", "ttl": "1h",
		"scope": map[string]string{"workspace": "sk-mine"}}, http.StatusCreated, &sub)
	dir := t.TempDir()
	e2ekit.Git(t, dir, "clone", "-q", s.GitURL("sk-mine", sub.Secret), "c")
	for _, args := range [][]string{
		{"ls-remote", s.GitURL("sk-other", sub.Secret)},
		{"-C", "c", "push", s.GitURL("sk-other", sub.Secret), "HEAD:refs/heads/x"},
	} {
		out, err := e2ekit.GitCmd(t, dir, args...)
		if err == nil || !strings.Contains(out, "remote: key sub is scoped to") || !strings.Contains(out, "sk-other") {
			t.Errorf("git %s with a key scoped to sk-mine: %v, want the reason as a remote: line:\n%s", args[0], err, out)
		}
	}
}
