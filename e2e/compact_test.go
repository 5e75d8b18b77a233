package e2e

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep/internal/e2ekit"
)

// TestPacksAreCompacted: every push adds a pack; past --compact-packs the
// network is folded into one in the background, and nothing is lost: every
// commit still reads, git fsck is clean, a clone has the whole history.
func TestPacksAreCompacted(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOpts{Args: []string{"--compact-packs", "4"}})
	s.CreateRepo(t, "r")
	var commits []string
	expect := ""
	for i := 0; i < 12; i++ {
		p := s.Push(t, s.AdminKey, "r", expect, map[string]string{"f.txt": fmt.Sprintf("v%d\n", i), "const.txt": "same\n"})
		commits = append(commits, p.Commit)
		expect = p.Commit
	}
	packs := func() int {
		m, _ := filepath.Glob(filepath.Join(s.Data, "networks", "r.git", "objects", "pack", "*.pack"))
		return len(m)
	}
	deadline := time.Now().Add(60 * time.Second)
	for packs() > 4 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := packs(); n > 4 {
		t.Fatalf("%d packs on disk after 12 pushes with --compact-packs 4", n)
	}
	for _, c := range commits {
		if got := s.Commit(t, "r", c); got.Commit != c {
			t.Fatalf("commit %s unreadable after compaction", c)
		}
	}
	e2ekit.Git(t, filepath.Join(s.Data, "networks", "r.git"), "fsck", "--strict")
	dir := t.TempDir()
	e2ekit.Git(t, dir, "clone", "-q", s.GitURL("r", s.AdminKey), "c")
	if out := e2ekit.Git(t, filepath.Join(dir, "c"), "rev-list", "--count", "HEAD"); out != "12\n" && out != "12" {
		t.Fatalf("clone has %q commits, want 12", out)
	}
	// Pushing goes on after a compaction.
	s.Push(t, s.AdminKey, "r", expect, map[string]string{"f.txt": "after\n"})
}
