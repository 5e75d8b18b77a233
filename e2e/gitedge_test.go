package e2e

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockstep-hq/lockstep/internal/e2ekit"
)

// TestGitEdgeCases: what plain git clients can send, beyond the happy
// path: empty repositories, new and deleted branches, other ref namespaces, trees git
// itself would never check out safely, oversized packs, no credentials.
func TestGitEdgeCases(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOpts{Args: []string{"--max-upload-bytes", "262144"}})
	s.CreateRepo(t, "edge")

	// An empty repository clones, and the first git push creates main.
	dir := filepath.Join(t.TempDir(), "edge")
	if out, err := e2ekit.GitCmd(t, "", "clone", s.GitURL("edge", s.AdminKey), dir); err != nil {
		t.Fatalf("clone of an empty repository: %v\n%s", err, out)
	}
	writeFile(t, filepath.Join(dir, "a.txt"), "a\n")
	e2ekit.Git(t, dir, "add", ".")
	e2ekit.Git(t, dir, "commit", "-q", "-m", "first")
	first := e2ekit.Git(t, dir, "rev-parse", "HEAD")
	e2ekit.Git(t, dir, "push", "-q", "origin", "main")
	if got := s.Head(t, "edge"); got != first {
		t.Fatalf("main after the first git push %s, want %s", got, first)
	}

	// An API push is visible to git fetch (the on-disk mirror follows).
	api := s.Push(t, s.AdminKey, "edge", first, map[string]string{"a.txt": "a\n", "b.txt": "from the API\n"})
	e2ekit.Git(t, dir, "fetch", "-q", "origin")
	if got := e2ekit.Git(t, dir, "rev-parse", "origin/main"); got != api.Commit {
		t.Errorf("git fetch after an API push: origin/main %s, want %s", got, api.Commit)
	}
	e2ekit.Git(t, dir, "reset", "-q", "--hard", "origin/main")

	// New branch, then delete it; main cannot be deleted.
	e2ekit.Git(t, dir, "push", "-q", "origin", "HEAD:feature/x")
	if got := s.Refs(t, s.AdminKey, "edge")["refs/heads/feature/x"]; got != api.Commit {
		t.Errorf("refs/heads/feature/x = %q, want %s", got, api.Commit)
	}
	e2ekit.Git(t, dir, "push", "-q", "origin", ":feature/x")
	if _, ok := s.Refs(t, s.AdminKey, "edge")["refs/heads/feature/x"]; ok {
		t.Errorf("feature/x still exists after a delete push")
	}
	if out, err := e2ekit.GitCmd(t, dir, "push", "origin", ":main"); err == nil {
		t.Errorf("deleting main over git succeeded:\n%s", out)
	}
	// Only branches and tags are pushed: another namespace is refused.
	if out, err := e2ekit.GitCmd(t, dir, "push", "origin", "HEAD:refs/notes/x"); err == nil {
		t.Errorf("pushing refs/notes/x succeeded:\n%s", out)
	}
	if _, ok := s.Refs(t, s.AdminKey, "edge")["refs/notes/x"]; ok {
		t.Errorf("refs/notes/x was stored")
	}
	ops := s.Oplog(t, url.Values{"repo": {"edge"}, "op": {"git.push"}})
	var moves []string
	for _, e := range ops {
		for _, m := range e.Refs {
			moves = append(moves, fmt.Sprintf("%s %s→%s", m.Ref, short(m.Old), short(m.New)))
		}
	}
	want := []string{"refs/heads/main 000000000000→" + short(first), "refs/heads/feature/x 000000000000→" + short(api.Commit),
		"refs/heads/feature/x " + short(api.Commit) + "→000000000000"}
	if fmt.Sprint(moves) != fmt.Sprint(want) {
		t.Errorf("git.push ref moves in the oplog:\n got %v\nwant %v", moves, want)
	}

	// --atomic: one refused ref (outside refs/heads and refs/tags) refuses
	// the whole push; without it the branch lands and only that ref is
	// refused.
	writeFile(t, filepath.Join(dir, "c.txt"), "c\n")
	e2ekit.Git(t, dir, "add", "c.txt")
	e2ekit.Git(t, dir, "commit", "-q", "-m", "c")
	cur := s.Head(t, "edge")
	if out, err := e2ekit.GitCmd(t, dir, "push", "--atomic", "origin", "main", "HEAD:refs/notes/x"); err == nil {
		t.Errorf("atomic push of a branch and refs/notes/x succeeded:\n%s", out)
	}
	if got := s.Head(t, "edge"); got != cur {
		t.Errorf("a refused atomic push moved main to %s", got)
	}
	if out, err := e2ekit.GitCmd(t, dir, "push", "origin", "main", "HEAD:refs/notes/x"); err == nil {
		t.Errorf("non-atomic push with refs/notes/x reported success:\n%s", out)
	}
	if got, want := s.Head(t, "edge"), e2ekit.Git(t, dir, "rev-parse", "HEAD"); got != want {
		t.Errorf("non-atomic push: main = %s, want %s (the branch part applies)", got, want)
	}

	// The server itself compares the client's old oid (git's own
	// fast-forward check happens in the client, which a racing or buggy
	// client skips): a hand-made receive-pack request naming a stale old
	// value is refused and logged.
	stale := s.Head(t, "edge")
	writeFile(t, filepath.Join(dir, "d.txt"), "d\n")
	e2ekit.Git(t, dir, "add", "d.txt")
	e2ekit.Git(t, dir, "commit", "-q", "-m", "d")
	mine := e2ekit.Git(t, dir, "rev-parse", "HEAD")
	moved := s.Push(t, s.AdminKey, "edge", stale, map[string]string{"moved.txt": "moved by someone else\n"})
	pack, err := e2ekit.GitRunBytes(dir, mine+"\n^"+stale+"\n", "pack-objects", "--stdout", "--revs", "-q")
	if err != nil {
		t.Fatalf("pack-objects: %v", err)
	}
	var body bytes.Buffer
	line := stale + " " + mine + " refs/heads/main\x00report-status\n"
	fmt.Fprintf(&body, "%04x%s0000", len(line)+4, line)
	body.Write(pack)
	req, _ := http.NewRequest("POST", s.URL+"/git/edge.git/git-receive-pack", &body)
	req.SetBasicAuth("x", s.AdminKey)
	req.Header.Set("Content-Type", "application/x-git-receive-pack-request")
	resp, err := e2ekit.HTTPClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	report, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(report), "unpack ok") || !strings.Contains(string(report), "ng refs/heads/main") {
		t.Errorf("receive-pack with a stale old oid answered %d %q", resp.StatusCode, report)
	}
	if got := s.Head(t, "edge"); got != moved.Commit {
		t.Errorf("a stale receive-pack command moved main to %s", got)
	}
	var refused bool
	for _, e := range s.Oplog(t, url.Values{"repo": {"edge"}, "op": {"git.push"}}) {
		refused = refused || e.Result == "ref_conflict"
	}
	if !refused {
		t.Errorf("the refused git push is not in the oplog")
	}
	e2ekit.Git(t, dir, "fetch", "-q", "origin")
	e2ekit.Git(t, dir, "reset", "-q", "--hard", "origin/main")

	// Trees that would be dangerous to check out are refused by the same
	// rules as tar uploads, whatever the client built.
	main := s.Head(t, "edge")
	blob := gitStdin(t, dir, "a\n", "hash-object", "-w", "--stdin")
	bad := []struct {
		name string
		tree func() string
	}{
		{".git entry", func() string {
			return mktree(t, dir, fmt.Sprintf("100644 blob %s\t.git\n", blob))
		}},
		{"nested .git directory", func() string {
			inner := mktree(t, dir, fmt.Sprintf("100644 blob %s\tconfig\n", blob))
			return mktree(t, dir, fmt.Sprintf("040000 tree %s\t.git\n", inner))
		}},
		{"symlink leaving the tree", func() string {
			target := gitStdin(t, dir, "../../../etc/passwd", "hash-object", "-w", "--stdin")
			return mktree(t, dir, fmt.Sprintf("120000 blob %s\tevil\n", target))
		}},
		{"absolute symlink", func() string {
			target := gitStdin(t, dir, "/etc/shadow", "hash-object", "-w", "--stdin")
			return mktree(t, dir, fmt.Sprintf("120000 blob %s\tevil\n", target))
		}},
	}
	for _, b := range bad {
		t.Run(b.name, func(t *testing.T) {
			tree := b.tree()
			c := e2ekit.Git(t, dir, "commit-tree", tree, "-p", main, "-m", b.name)
			out, err := e2ekit.GitCmd(t, dir, "push", "origin", c+":refs/heads/main")
			if err == nil {
				t.Errorf("push of a commit with a %s succeeded:\n%s", b.name, out)
			}
			if got := s.Head(t, "edge"); got != main {
				t.Errorf("main moved to %s", got)
			}
			if out, err := e2ekit.GitCmd(t, "", "--git-dir="+s.networkDir("edge"), "cat-file", "-e", c); err == nil {
				t.Errorf("the refused commit %s was stored %s", c, out)
			}
		})
	}

	// A push over --max-upload-bytes is refused, nothing moves.
	writeFile(t, filepath.Join(dir, "big.bin"), randomText(99, 400_000))
	e2ekit.Git(t, dir, "add", "big.bin")
	e2ekit.Git(t, dir, "commit", "-q", "-m", "big")
	if out, err := e2ekit.GitCmd(t, dir, "push", "origin", "main"); err == nil {
		t.Errorf("a 400 KB push past --max-upload-bytes 256 KiB succeeded:\n%s", out)
	}
	if got := s.Head(t, "edge"); got != main {
		t.Errorf("main moved to %s after an oversized push", got)
	}

	// No credentials: git fails at once (no prompt), nothing is served.
	noauth := fmt.Sprintf("http://%s/git/edge.git", s.HostPort)
	if out, err := e2ekit.GitCmd(t, "", "clone", noauth, filepath.Join(t.TempDir(), "x")); err == nil {
		t.Errorf("clone without a key succeeded:\n%s", out)
	}
	if out, err := e2ekit.GitCmd(t, "", "clone", s.GitURL("ghost", s.AdminKey), filepath.Join(t.TempDir(), "y")); err == nil {
		t.Errorf("clone of an unknown repository succeeded:\n%s", out)
	}
	if v := s.Verify(t); !v.OK {
		t.Errorf("oplog verify: %+v", v)
	}
}

func short(oid string) string { return oid[:min(12, len(oid))] }

// mktree writes a tree from `git ls-tree` formatted lines.
func mktree(t testing.TB, dir, lines string) string {
	t.Helper()
	return gitStdin(t, dir, lines, "mktree")
}

// gitStdin runs git with stdin and returns trimmed output.
func gitStdin(t testing.TB, dir, stdin string, args ...string) string {
	t.Helper()
	out, err := e2ekit.GitRun(dir, stdin, args...)
	if err != nil {
		t.Fatalf("git %v < stdin: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(out)
}
