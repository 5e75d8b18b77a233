package worktree_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockstep-hq/lockstep/worktree"
)

// A directory whose listing does not fit one getdents buffer (32 KiB):
// every name must come back, once.
func TestScanWideDirectory(t *testing.T) {
	dir := t.TempDir()
	long := strings.Repeat("n", 90)
	for i := range 3000 {
		mustWrite(t, filepath.Join(dir, "wide", fmt.Sprintf("%s-%05d.txt", long, i)), []byte(fmt.Sprint(i)), 0o644)
	}
	mustWrite(t, filepath.Join(dir, "wide", "sub", "x"), []byte("x"), 0o644)
	want := newGitRepo(t).writeTree(dir)
	snap := mustScan(t, dir, worktree.ScanOptions{})
	if snap.Files != 3001 || snap.Tree.String() != want {
		t.Fatalf("Scan: %d files, tree %s; git write-tree %s", snap.Files, snap.Tree, want)
	}
}

// TestScanCacheFollowsChanges pushes a tree again and again as the CLI
// does (open the cache, scan, save), changing it between pushes in the
// ways a stale cache could hide, and compares every tree with git's.
func TestScanCacheFollowsChanges(t *testing.T) {
	dir := t.TempDir()
	files := genTree(t, dir, genSpec{Files: 200, Dirs: 40, AvgSize: 300, Seed: 9})
	ageFiles(t, dir, files)
	mustWrite(t, filepath.Join(dir, "dir", "inner", "f"), []byte("in a directory\n"), 0o644)
	mustWrite(t, filepath.Join(dir, "file"), []byte("a file\n"), 0o644)
	mustWrite(t, filepath.Join(dir, "same"), []byte("version 1\n"), 0o644)
	cachePath := filepath.Join(t.TempDir(), "statcache")
	g := newGitRepo(t)
	push := func(step string) *worktree.Snapshot {
		t.Helper()
		c := openCache(t, cachePath)
		snap := mustScan(t, dir, worktree.ScanOptions{Cache: c})
		if want := g.writeTree(dir); snap.Tree.String() != want {
			t.Fatalf("%s: Scan tree %s, git write-tree %s", step, snap.Tree, want)
		}
		if err := c.Save(); err != nil {
			t.Fatal(err)
		}
		return snap
	}
	push("first")
	if snap := push("unchanged"); snap.Hashed > 3 { // the three files just written may be racy
		t.Fatalf("unchanged tree: hashed %d files", snap.Hashed)
	}

	// A deleted file.
	if err := os.Remove(filepath.Join(dir, files[0])); err != nil {
		t.Fatal(err)
	}
	push("deleted file")

	// A directory replaced by a file of the same name, and a file by a
	// directory.
	if err := os.RemoveAll(filepath.Join(dir, "dir")); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(dir, "dir"), []byte("now a file\n"), 0o644)
	if err := os.Remove(filepath.Join(dir, "file")); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(dir, "file", "f"), []byte("now in a directory\n"), 0o644)
	push("dir and file swapped")

	// A same-size rewrite right after the cache was saved: same second,
	// often the same timestamp tick, so only the racy-git rule finds it.
	mustWrite(t, filepath.Join(dir, "same"), []byte("version 2\n"), 0o644)
	push("same-size rewrite")

	// A torn cache file (a crash during a write that is not atomic, or a
	// bad disk) and one from an older format: a full re-hash, never a
	// wrong tree.
	data, err := os.ReadFile(cachePath)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]byte{data[:len(data)/2], append([]byte("LKSC\x01"), data[5:]...)} {
		if err := os.WriteFile(cachePath, bad, 0o644); err != nil {
			t.Fatal(err)
		}
		mustWrite(t, filepath.Join(dir, "same"), []byte("version 3\n"), 0o644)
		if snap := push("bad cache"); snap.Hashed != snap.Files {
			t.Fatalf("bad cache: hashed %d of %d files, want all", snap.Hashed, snap.Files)
		}
		mustWrite(t, filepath.Join(dir, "same"), []byte("version 2\n"), 0o644)
	}
}
