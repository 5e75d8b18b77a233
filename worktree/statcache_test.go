package worktree_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"golang.org/x/sys/unix"

	"github.com/lockstep-hq/lockstep/worktree"
)

// ageFiles sets every file's mtime an hour back, so that no entry is racy
// with respect to a cache written now.
func ageFiles(tb testing.TB, root string, files []string) {
	tb.Helper()
	old := time.Now().Add(-time.Hour)
	for _, f := range files {
		if err := os.Chtimes(filepath.Join(root, f), old, old); err != nil {
			tb.Fatal(err)
		}
	}
}

func openCache(tb testing.TB, path string) *worktree.StatCache {
	tb.Helper()
	c, err := worktree.OpenStatCache(path)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// These tests read the package-wide FilesRead counter: they must not run in
// parallel with other tests.
func TestStatCacheReadsOnlyChangedFiles(t *testing.T) {
	dir := t.TempDir()
	files := genTree(t, dir, genSpec{Files: 200, Dirs: 30, AvgSize: 200, Seed: 7, Exotic: true})
	ageFiles(t, dir, files)
	cachePath := filepath.Join(dir, ".lockstep", "statcache")
	g := newGitRepo(t)

	cache := openCache(t, cachePath)
	before := worktree.FilesRead()
	snap := mustScan(t, dir, worktree.ScanOptions{Cache: cache})
	if n := worktree.FilesRead() - before; n != int64(len(files)) || snap.Hashed != len(files) {
		t.Fatalf("cold scan read %d files (Hashed %d), want %d", n, snap.Hashed, len(files))
	}
	if err := cache.Save(); err != nil {
		t.Fatal(err)
	}

	// Reopened from disk: nothing is read.
	cache = openCache(t, cachePath)
	if cache.Len() != snap.Files { // regular files and symlinks
		t.Fatalf("reloaded cache has %d entries, want %d", cache.Len(), snap.Files)
	}
	before = worktree.FilesRead()
	warm := mustScan(t, dir, worktree.ScanOptions{Cache: cache})
	if n := worktree.FilesRead() - before; n != 0 || warm.Tree != snap.Tree {
		t.Fatalf("warm scan read %d files, tree %s (cold %s); want 0 reads, same tree", n, warm.Tree, snap.Tree)
	}

	// One file changed (same size, different bytes): only it is read.
	changed := files[len(files)/2]
	data, err := os.ReadFile(filepath.Join(dir, changed))
	if err != nil {
		t.Fatal(err)
	}
	data = append(data[:len(data):len(data)], 'x')
	mustWrite(t, filepath.Join(dir, changed), data, 0o644)
	before = worktree.FilesRead()
	after := mustScan(t, dir, worktree.ScanOptions{Cache: cache})
	if n := worktree.FilesRead() - before; n != 1 || after.Hashed != 1 {
		t.Fatalf("scan after changing %s read %d files (Hashed %d), want 1", changed, n, after.Hashed)
	}
	if got, want := after.Tree.String(), g.writeTree(dir); got != want {
		t.Fatalf("tree after change = %s, git = %s", got, want)
	}

	// A deleted file leaves the cache; an exec bit change is seen.
	if err := os.Remove(filepath.Join(dir, files[0])); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, files[1]), 0o755); err != nil {
		t.Fatal(err)
	}
	final := mustScan(t, dir, worktree.ScanOptions{Cache: cache})
	if got, want := final.Tree.String(), g.writeTree(dir); got != want {
		t.Fatalf("tree after delete+chmod = %s, git = %s", got, want)
	}
	if cache.Len() != final.Files {
		t.Fatalf("cache has %d entries after a delete, want %d", cache.Len(), final.Files)
	}
}

// The racy-git case: a file rewritten with the same size in the same
// timestamp tick as the cache write has the same stat as its entry. The
// cache must not trust an entry whose mtime is not strictly older than the
// cache's write time.
func TestStatCacheRacyEntryIsRehashed(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f.txt")
	mustWrite(t, p, []byte("version 1\n"), 0o644)
	cachePath := filepath.Join(t.TempDir(), "statcache")
	cache := openCache(t, cachePath)
	v1 := mustScan(t, dir, worktree.ScanOptions{Cache: cache})
	if err := cache.Save(); err != nil {
		t.Fatal(err)
	}
	cache = openCache(t, cachePath)

	// Stage what a same-tick rewrite to "version 2" leaves behind: the
	// file holds version 2, and the cache entry has the file's exact stat
	// but version 1's oid.
	mustWrite(t, p, []byte("version 2\n"), 0o644)
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	v2 := mustScan(t, dir, worktree.ScanOptions{Cache: cache}) // records v2's stat
	if v2.Tree == v1.Tree {
		t.Fatal("rewrite not seen at all")
	}
	if !worktree.SetCacheOID(cache, "f.txt", v1Blob) {
		t.Fatal("no cache entry for f.txt")
	}

	// Cache written in the same tick as the file: the entry is racy and
	// the file is read again, giving version 2.
	worktree.SetCacheWritten(cache, fi.ModTime().UnixNano())
	before := worktree.FilesRead()
	got := mustScan(t, dir, worktree.ScanOptions{Cache: cache})
	if n := worktree.FilesRead() - before; n != 1 || got.Tree != v2.Tree {
		t.Fatalf("racy entry: read %d files, tree %s; want 1 read and tree %s", n, got.Tree, v2.Tree)
	}

	// Control: had the cache been written a tick later, the same entry is
	// trusted (that is why the rule exists).
	if !worktree.SetCacheOID(cache, "f.txt", v1Blob) {
		t.Fatal("no cache entry for f.txt")
	}
	worktree.SetCacheWritten(cache, fi.ModTime().UnixNano()+1)
	before = worktree.FilesRead()
	got = mustScan(t, dir, worktree.ScanOptions{Cache: cache})
	if n := worktree.FilesRead() - before; n != 0 || got.Tree != v1.Tree {
		t.Fatalf("non-racy entry: read %d files, tree %s; want 0 reads and the cached (stale) tree %s", n, got.Tree, v1.Tree)
	}
}

// v1Blob is the blob oid of f.txt's first version.
var v1Blob = plumbing.ComputeHash(plumbing.BlobObject, []byte("version 1\n"))

// A real same-tick rewrite, when the clock allows it: write, scan, save and
// rewrite within one timestamp tick, then scan again.
func TestStatCacheRacyRealRewrite(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f.txt")
	cachePath := filepath.Join(t.TempDir(), "statcache")
	for attempt := 0; attempt < 50; attempt++ {
		mustWrite(t, p, []byte("version 1\n"), 0o644)
		cache := openCache(t, cachePath)
		mustScan(t, dir, worktree.ScanOptions{Cache: cache})
		if err := cache.Save(); err != nil {
			t.Fatal(err)
		}
		fi1, _ := os.Stat(p)
		mustWrite(t, p, []byte("version 2\n"), 0o644)
		fi2, _ := os.Stat(p)
		if !fi1.ModTime().Equal(fi2.ModTime()) {
			continue // crossed a tick: stat differs, not the racy case
		}
		cache = openCache(t, cachePath)
		got := mustScan(t, dir, worktree.ScanOptions{Cache: cache})
		want := newGitRepo(t).writeTree(dir)
		if got.Tree.String() != want {
			t.Fatalf("same-tick rewrite: tree %s, git %s", got.Tree, want)
		}
		return
	}
	t.Skip("could not rewrite within one timestamp tick")
}

func TestStatCacheCorruptFileIsEmpty(t *testing.T) {
	dir := t.TempDir()
	mustWrite(t, filepath.Join(dir, "a"), []byte("a"), 0o644)
	cachePath := filepath.Join(t.TempDir(), "sub", "statcache")
	cache := openCache(t, cachePath)
	snap := mustScan(t, dir, worktree.ScanOptions{Cache: cache})
	cache.SetKnown(snap.Known())
	if err := cache.Save(); err != nil {
		t.Fatal(err)
	}
	if c := openCache(t, cachePath); c.Len() != 1 || c.Known() == nil || c.Known().Root != snap.Tree || c.Known().Len() != 1 {
		t.Fatalf("reloaded: %d entries, known %+v", c.Len(), c.Known())
	}
	data, err := os.ReadFile(cachePath)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]byte{nil, data[:len(data)-1], append([]byte("XXXX"), data[4:]...), []byte("garbage")} {
		if err := os.WriteFile(cachePath, bad, 0o644); err != nil {
			t.Fatal(err)
		}
		if c := openCache(t, cachePath); c.Len() != 0 {
			t.Fatalf("corrupt cache (%d bytes) loaded %d entries", len(bad), c.Len())
		}
	}
}

// The racy-git reference time is the filesystem clock when the Scan
// started: not before a file written earlier, not after one written once the
// cache is saved.
func TestStatCacheWriteTimeIsScanStart(t *testing.T) {
	dir := t.TempDir()
	before := filepath.Join(dir, "before")
	mustWrite(t, before, []byte("x"), 0o644)
	cachePath := filepath.Join(dir, ".lockstep", "statcache")
	c := openCache(t, cachePath)
	mustScan(t, dir, worktree.ScanOptions{Cache: c})
	if err := c.Save(); err != nil {
		t.Fatal(err)
	}
	after := filepath.Join(t.TempDir(), "after")
	mustWrite(t, after, []byte("y"), 0o644)
	written := worktree.CacheWritten(openCache(t, cachePath))
	fb, err := os.Stat(before)
	if err != nil {
		t.Fatal(err)
	}
	fa, err := os.Stat(after)
	if err != nil {
		t.Fatal(err)
	}
	if written < fb.ModTime().UnixNano() || written > fa.ModTime().UnixNano() {
		t.Fatalf("cache time %d not within [%d, %d]", written, fb.ModTime().UnixNano(), fa.ModTime().UnixNano())
	}
}

// A failed Scan leaves the cache as it was: its old entries must keep the
// reference time they were made at, or a later Save would vouch for them
// with a newer one.
func TestStatCacheUntouchedByFailedScan(t *testing.T) {
	dir := t.TempDir()
	mustWrite(t, filepath.Join(dir, "a"), []byte("a"), 0o644)
	c := openCache(t, filepath.Join(dir, ".lockstep", "statcache"))
	mustScan(t, dir, worktree.ScanOptions{Cache: c})
	written, n := worktree.CacheWritten(c), c.Len()
	mustSymlink(t, "/etc/passwd", filepath.Join(dir, "bad"))
	time.Sleep(20 * time.Millisecond) // let the filesystem clock move on
	if _, err := worktree.Scan(dir, worktree.ScanOptions{Cache: c}); err == nil {
		t.Fatal("Scan with an absolute symlink succeeded")
	}
	if worktree.CacheWritten(c) != written || c.Len() != n {
		t.Fatalf("failed scan changed the cache: time %d -> %d, %d -> %d entries", written, worktree.CacheWritten(c), n, c.Len())
	}
}

// TestStatCacheRedevice: after the directory comes back on another device
// number with the same inodes and times (a btrfs restore), Redevice keeps
// the cache valid: a scan reads nothing. Entries whose ctime is at or
// after the given bound are dropped instead.
func TestStatCacheRedevice(t *testing.T) {
	dir := t.TempDir()
	files := genTree(t, dir, genSpec{Files: 30, Dirs: 4, AvgSize: 100, Seed: 9})
	ageFiles(t, dir, files)
	cachePath := filepath.Join(t.TempDir(), "statcache")
	cache := openCache(t, cachePath)
	mustScan(t, dir, worktree.ScanOptions{Cache: cache})
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	dev, other := uint64(st.Dev), uint64(st.Dev)+12345
	// The cache as the old subvolume left it: every entry on another device.
	if n := cache.Redevice(dev, other, 1<<62); n != len(files) {
		t.Fatalf("moved %d entries to the old device, want %d", n, len(files))
	}
	before := worktree.FilesRead()
	mustScan(t, dir, worktree.ScanOptions{Cache: cache})
	if n := worktree.FilesRead() - before; n != int64(len(files)) {
		t.Fatalf("scan with entries on another device read %d files, want all %d", n, len(files))
	}
	cache.Redevice(dev, other, 1<<62) // the scan re-recorded them on dev
	if err := cache.Save(); err != nil {
		t.Fatal(err)
	}
	cache = openCache(t, cachePath)
	if n := cache.Redevice(other, dev, 1<<62); n != len(files) {
		t.Fatalf("moved %d entries back, want %d", n, len(files))
	}
	before = worktree.FilesRead()
	mustScan(t, dir, worktree.ScanOptions{Cache: cache})
	if n := worktree.FilesRead() - before; n != 0 {
		t.Fatalf("scan after Redevice read %d files, want 0", n)
	}
	// ctime at or after the bound: dropped, not moved.
	if n := cache.Redevice(dev, other, 0); n != 0 || cache.Len() != 0 {
		t.Fatalf("Redevice with bound 0 moved %d, left %d entries; want 0, 0", n, cache.Len())
	}
}
