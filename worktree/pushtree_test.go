package worktree_test

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/lockstep-hq/lockstep/worktree"
)

// A watched push of one file changed at depth 3 of a 20,000-file tree
// re-hashes that file and re-encodes only the 4 trees from its directory
// to the root (issue #26: O(changed × depth), not O(all trees)). It reads
// the package-wide counters: not parallel.
func TestWatchPushEncodesOnlyAncestors(t *testing.T) {
	dir := t.TempDir()
	n := 20_000
	if testing.Short() {
		n = 2_000
	}
	files := make([]string, n)
	for j := range n {
		files[j] = fmt.Sprintf("d%02d/s%02d/t%d/f%05d.txt", j%16, j/16%25, j/400%5, j)
		mustWrite(t, filepath.Join(dir, files[j]), []byte(fmt.Sprintf("file %d\n", j)), 0o644)
	}
	ageFiles(t, dir, files)
	cachePath := filepath.Join(t.TempDir(), "statcache")
	startWatch(t, dir)
	push := func() *worktree.Snapshot {
		t.Helper()
		c := openCache(t, cachePath)
		snap := mustScan(t, dir, worktree.ScanOptions{Cache: c, Watcher: worktree.WatchSocketPath(dir)})
		c.SetKnown(snap.Known())
		if err := c.Save(); err != nil {
			t.Fatal(err)
		}
		return snap
	}
	push() // no token yet: full scan
	if snap := push(); !snap.Watched {
		t.Fatal("second push did not use the watcher")
	}
	changed := files[n/2]
	mustWrite(t, filepath.Join(dir, changed), []byte("changed\n"), 0o644)
	ageFiles(t, dir, []string{changed})
	trees0 := worktree.TreesEncoded()
	snap := push()
	encoded := worktree.TreesEncoded() - trees0
	if !snap.Watched || snap.Hashed != 1 || snap.Files != n {
		t.Fatalf("watched push: Watched %v Hashed %d Files %d, want true 1 %d", snap.Watched, snap.Hashed, snap.Files, n)
	}
	if encoded != 4 {
		t.Fatalf("watched push of %s encoded %d trees, want 4 (its directory and its 3 ancestors)", changed, encoded)
	}
	if full := mustScan(t, dir, worktree.ScanOptions{}); full.Tree != snap.Tree {
		t.Fatalf("watched push tree %s, full scan %s", snap.Tree, full.Tree)
	}
}
