package repositories

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/gitobj"
	"github.com/lockstep-hq/lockstep/gitstore"
)

// commitCounter counts the commits read through a network.
type commitCounter struct {
	gitobj.Reader
	reads int
}

func (c *commitCounter) Commit(h gitobj.Hash) (*gitobj.CommitInfo, error) {
	c.reads++
	return c.Reader.Commit(h)
}

// TestCheckGitObjectReadsCommitOnce: checking a pushed branch or tag
// reads its commit once and returns what the ref update records (the
// peeled commit and its tree), as the separate peel did.
func TestCheckGitObjectReadsCommitOnce(t *testing.T) {
	dir := t.TempDir()
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
		cmd.Env = append(cmd.Environ(), "GIT_AUTHOR_NAME=a", "GIT_AUTHOR_EMAIL=a@x", "GIT_COMMITTER_NAME=a", "GIT_COMMITTER_EMAIL=a@x")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git("init", "-q", "-b", "main")
	git("commit", "-q", "--allow-empty", "-m", "one")
	commit := git("rev-parse", "HEAD")
	tree := git("rev-parse", "HEAD^{tree}")
	git("tag", "-a", "-m", "v1", "v1")
	tag := git("rev-parse", "v1")
	st, err := gitstore.Local{}.Open(dir+"/.git", gitobj.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, c := range []RefCommand{
		{Ref: "refs/heads/main", Old: lockstep.ZeroOID, New: commit},
		{Ref: "refs/tags/v1", Old: lockstep.ZeroOID, New: tag},
	} {
		n := &commitCounter{Reader: st}
		gotCommit, gotTree, err := checkGitObject(n, c, map[gitobj.Hash]gitobj.Hash{})
		if err != nil {
			t.Fatalf("%s: %v", c.Ref, err)
		}
		if gotCommit != commit || gotTree != tree {
			t.Fatalf("%s: commit %s tree %s, want %s %s", c.Ref, gotCommit, gotTree, commit, tree)
		}
		if n.reads != 1 {
			t.Fatalf("%s: %d commit reads, want 1", c.Ref, n.reads)
		}
	}
}
