package worktree_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lockstep-hq/lockstep/worktree"
)

// pushCycle is one CLI push's use of the cache: load, scan, record the
// snapshot's trees as known, save. It returns the snapshot, the files the
// scan read and the cache.
func pushCycle(t *testing.T, dir, cachePath string) (*worktree.Snapshot, int64, *worktree.StatCache) {
	t.Helper()
	c := openCache(t, cachePath)
	before := worktree.FilesRead()
	snap := mustScan(t, dir, worktree.ScanOptions{Cache: c})
	read := worktree.FilesRead() - before
	c.SetKnown(snap.Known())
	if err := c.Save(); err != nil {
		t.Fatal(err)
	}
	return snap, read, c
}

func inode(t *testing.T, p string) (uint64, int64) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino, st.Size
}

// TestStatCacheAppendsChanges (issue #26): a push that changed one file
// appends a small record to the cache file instead of rewriting it
// whole; the next load sees the change, the new known trees and the
// deleted paths, and reads nothing it need not.
func TestStatCacheAppendsChanges(t *testing.T) {
	dir := t.TempDir()
	files := genTree(t, dir, genSpec{Files: 300, Dirs: 40, AvgSize: 100, Seed: 11})
	ageFiles(t, dir, files)
	cachePath := filepath.Join(t.TempDir(), "statcache")
	pushCycle(t, dir, cachePath)
	ino0, size0 := inode(t, cachePath)

	mustWrite(t, filepath.Join(dir, files[0]), []byte("changed content\n"), 0o644)
	if err := os.Remove(filepath.Join(dir, files[1])); err != nil {
		t.Fatal(err)
	}
	ageFiles(t, dir, files[:1])
	snap, read, _ := pushCycle(t, dir, cachePath)
	if read != 1 {
		t.Errorf("the second scan read %d files, want 1", read)
	}
	ino1, size1 := inode(t, cachePath)
	if ino1 != ino0 || size1 <= size0 || size1-size0 > 2048 {
		t.Errorf("cache file: inode %d → %d, %d → %d bytes: want the same file and a small record appended", ino0, ino1, size0, size1)
	}
	c := openCache(t, cachePath)
	if worktree.CacheRecords(c) != 1 || c.Len() != len(files)-1 {
		t.Errorf("reloaded: %d records, %d entries; want 1, %d", worktree.CacheRecords(c), c.Len(), len(files)-1)
	}
	if k := c.Known(); k == nil || k.Root != snap.Tree || k.Len() != snap.Known().Len() {
		t.Errorf("reloaded known trees %+v, want root %s and %d trees", k, snap.Tree, snap.Known().Len())
	}
	before := worktree.FilesRead()
	again := mustScan(t, dir, worktree.ScanOptions{Cache: c})
	if n := worktree.FilesRead() - before; n != 0 || again.Tree != snap.Tree {
		t.Errorf("scan from the reloaded cache read %d files, tree %s; want 0, %s", n, again.Tree, snap.Tree)
	}
}

// TestStatCacheTornRecord: a record cut short (a crash while appending)
// is ignored: the load keeps what came before, the files that record
// vouched for are hashed again, and the next save rewrites the file.
func TestStatCacheTornRecord(t *testing.T) {
	dir := t.TempDir()
	files := genTree(t, dir, genSpec{Files: 100, Dirs: 10, AvgSize: 100, Seed: 12})
	ageFiles(t, dir, files)
	cachePath := filepath.Join(t.TempDir(), "statcache")
	pushCycle(t, dir, cachePath)
	mustWrite(t, filepath.Join(dir, files[0]), []byte("v2\n"), 0o644)
	ageFiles(t, dir, files[:1])
	snap, _, _ := pushCycle(t, dir, cachePath)
	ino0, size := inode(t, cachePath)
	if err := os.Truncate(cachePath, size-3); err != nil {
		t.Fatal(err)
	}
	c := openCache(t, cachePath)
	if worktree.CacheRecords(c) != 0 || c.Len() != len(files) {
		t.Fatalf("torn record: %d records, %d entries loaded", worktree.CacheRecords(c), c.Len())
	}
	before := worktree.FilesRead()
	got := mustScan(t, dir, worktree.ScanOptions{Cache: c})
	if n := worktree.FilesRead() - before; n != 1 || got.Tree != snap.Tree {
		t.Errorf("after a torn record the scan read %d files (want 1: the changed one), tree %s want %s", n, got.Tree, snap.Tree)
	}
	if err := c.Save(); err != nil {
		t.Fatal(err)
	}
	if ino1, _ := inode(t, cachePath); ino1 == ino0 {
		t.Error("the save after a torn record appended to the torn file instead of rewriting it")
	}
	if c := openCache(t, cachePath); c.Len() != len(files) || worktree.CacheRecords(c) != 0 {
		t.Errorf("after the rewrite: %d entries, %d records", c.Len(), worktree.CacheRecords(c))
	}
}

// TestStatCacheCompacts: records accumulate up to a bound, then a save
// rewrites the file as one base, so a load never replays many.
func TestStatCacheCompacts(t *testing.T) {
	dir := t.TempDir()
	files := genTree(t, dir, genSpec{Files: 400, Dirs: 40, AvgSize: 100, Seed: 13})
	ageFiles(t, dir, files)
	cachePath := filepath.Join(t.TempDir(), "statcache")
	pushCycle(t, dir, cachePath)
	maxRecords, rewrites := int64(0), 0
	prevIno, _ := inode(t, cachePath)
	for i := range 40 {
		mustWrite(t, filepath.Join(dir, files[i%3]), []byte(time.Now().String()+"\n"), 0o644)
		ageFiles(t, dir, files[i%3:i%3+1])
		_, read, c := pushCycle(t, dir, cachePath)
		if read != 1 {
			t.Fatalf("push %d read %d files, want 1", i, read)
		}
		maxRecords = max(maxRecords, worktree.CacheRecords(c))
		if ino, _ := inode(t, cachePath); ino != prevIno {
			rewrites++
			prevIno = ino
		}
	}
	if maxRecords < 2 || maxRecords > 32 || rewrites == 0 {
		t.Errorf("40 pushes: at most %d records, %d rewrites; want appends bounded by 32 and at least one rewrite", maxRecords, rewrites)
	}
}

// TestStatCacheConcurrentSavers: two pushes load the same file and save
// one after the other; the second finds the file changed and rewrites it,
// so the result is one consistent cache (its own).
func TestStatCacheConcurrentSavers(t *testing.T) {
	dir := t.TempDir()
	files := genTree(t, dir, genSpec{Files: 50, Dirs: 5, AvgSize: 100, Seed: 14})
	ageFiles(t, dir, files)
	cachePath := filepath.Join(t.TempDir(), "statcache")
	pushCycle(t, dir, cachePath)
	a, b := openCache(t, cachePath), openCache(t, cachePath)
	mustWrite(t, filepath.Join(dir, files[0]), []byte("a\n"), 0o644)
	ageFiles(t, dir, files[:1])
	sa := mustScan(t, dir, worktree.ScanOptions{Cache: a})
	sb := mustScan(t, dir, worktree.ScanOptions{Cache: b})
	a.SetKnown(sa.Known())
	b.SetKnown(sb.Known())
	if err := a.Save(); err != nil {
		t.Fatal(err)
	}
	ino, _ := inode(t, cachePath)
	if err := b.Save(); err != nil {
		t.Fatal(err)
	}
	if ino2, _ := inode(t, cachePath); ino2 == ino {
		t.Error("the second saver appended to a file another saver had changed")
	}
	c := openCache(t, cachePath)
	before := worktree.FilesRead()
	got := mustScan(t, dir, worktree.ScanOptions{Cache: c})
	if n := worktree.FilesRead() - before; n != 0 || got.Tree != sb.Tree || c.Len() != len(files) {
		t.Errorf("after both saves: read %d files, tree %s (want %s), %d entries", n, got.Tree, sb.Tree, c.Len())
	}
}
