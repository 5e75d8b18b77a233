package e2e

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep/internal/e2ekit"
)

// TestDataDirIsPrivate checks the README's claim (Security, "Secrets at
// rest") on a data directory after API pushes, a git push, a fork and a
// background compaction (git repack): every directory is 0700 and every
// file 0600, or 0400 for the read-only pack and object files git and the
// server write.
func TestDataDirIsPrivate(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOpts{Args: []string{"--compact-packs", "3"}})
	s.CreateRepo(t, "r")
	expect := ""
	for i := 0; i < 6; i++ {
		p := s.Push(t, s.AdminKey, "r", expect, map[string]string{"f.txt": fmt.Sprintf("v%d\n", i)})
		expect = p.Commit
	}
	dir := filepath.Join(t.TempDir(), "c")
	e2ekit.Git(t, "", "clone", "-q", s.GitURL("r", s.AdminKey), dir)
	for i := 0; i < 3; i++ {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("g%d.txt", i)), []byte(fmt.Sprintf("git %d\n", i)), 0o644); err != nil {
			t.Fatal(err)
		}
		e2ekit.Git(t, dir, "add", ".")
		e2ekit.Git(t, dir, "commit", "-q", "-m", fmt.Sprintf("git %d", i))
		e2ekit.Git(t, dir, "push", "-q", "origin", "HEAD:main")
	}
	s.forkTip(t, s.AdminKey, "r", "ws")
	packs := func() int {
		m, _ := filepath.Glob(filepath.Join(s.Data, "networks", "r.git", "objects", "pack", "*.pack"))
		return len(m)
	}
	deadline := time.Now().Add(90 * time.Second)
	for packs() > 3 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := packs(); n > 3 {
		t.Fatalf("%d packs: no compaction ran", n)
	}
	files := 0
	err := filepath.WalkDir(s.Data, func(p string, d fs.DirEntry, err error) error {
		if os.IsNotExist(err) {
			return nil // removed while walking (a temporary file)
		}
		if err != nil {
			return err
		}
		info, err := d.Info()
		if os.IsNotExist(err) {
			return nil
		}
		if err != nil {
			return err
		}
		perm := info.Mode().Perm()
		rel, _ := filepath.Rel(s.Data, p)
		switch {
		case d.IsDir():
			if perm != 0o700 {
				t.Errorf("directory %s is %04o, want 0700", rel, perm)
			}
		case d.Type().IsRegular():
			files++
			if perm != 0o600 && perm != 0o400 {
				t.Errorf("file %s is %04o, want 0600 (or 0400)", rel, perm)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 10 {
		t.Fatalf("only %d files in the data directory", files)
	}
}
