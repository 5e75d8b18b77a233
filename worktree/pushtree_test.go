package worktree_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/storage/memory"

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

// treeClient is one client of a directory: its stat cache, whether it asks
// the watcher, and the server it pushes to.
type treeClient struct {
	name      string
	cachePath string
	watcher   bool
	srv       *server
}

// push is the CLI's push: scan with the cache (and the watcher), check the
// tree against git's and the cache's tables against a full scan's, then,
// if accepted, Plan with the cache's hint, WritePack to the server (which
// must then hold the whole tree) and record Known; the cache is saved
// either way (a push that fails after its scan leaves the cache ahead of
// Known).
// It returns the snapshot and the number of trees its Scan encoded.
func (tc *treeClient) push(t *testing.T, dir, step, want string, accepted bool) (*worktree.Snapshot, int64) {
	t.Helper()
	c := openCache(t, tc.cachePath)
	opts := worktree.ScanOptions{Cache: c}
	if tc.watcher {
		opts.Watcher = worktree.WatchSocketPath(dir)
	}
	trees0 := worktree.TreesEncoded()
	snap := mustScan(t, dir, opts)
	encoded := worktree.TreesEncoded() - trees0
	if snap.Tree.String() != want {
		t.Fatalf("%s, %s: tree %s (watched %v), git write-tree %s", step, tc.name, snap.Tree, snap.Watched, want)
	}
	ref := openCache(t, filepath.Join(t.TempDir(), "ref"))
	full := mustScan(t, dir, worktree.ScanOptions{Cache: ref})
	if got, want := worktree.CacheDirs(c), worktree.CacheDirs(ref); !maps.Equal(got, want) {
		t.Fatalf("%s, %s: directory table\n%v\nfull scan's\n%v", step, tc.name, got, want)
	}
	if got, want := worktree.CacheFiles(c), worktree.CacheFiles(ref); !maps.Equal(got, want) {
		t.Fatalf("%s, %s: cached files\n%v\nfull scan's\n%v", step, tc.name, got, want)
	}
	if snap.Files != full.Files || snap.Known().Len() != full.Known().Len() {
		t.Fatalf("%s, %s: %d files, %d known trees; full scan %d, %d", step, tc.name, snap.Files, snap.Known().Len(), full.Files, full.Known().Len())
	}
	if accepted {
		oids, err := worktree.Plan(context.Background(), snap, tc.srv.missing, &worktree.PlanOptions{Known: c.Known()})
		if err != nil {
			t.Fatalf("%s, %s: Plan: %v", step, tc.name, err)
		}
		tc.srv.receive(t, mustPack(t, snap, oids))
		tc.srv.checkComplete(t, snap)
		c.SetKnown(snap.Known())
	}
	if err := c.Save(); err != nil {
		t.Fatal(err)
	}
	return snap, encoded
}

// Every kind of change, pushed by a client with the watcher (partial
// snapshots, trees from the cache's directory table) and one without,
// each compared with `git add -A && git write-tree` and pushed to its own
// server through Plan and WritePack; the watched client also meets a
// push that failed after its scan and a server that lost its last push.
func TestPushTreeFollowsEveryChange(t *testing.T) {
	dir := t.TempDir()
	files := genTree(t, dir, genSpec{Files: 300, Dirs: 40, AvgSize: 100, Seed: 2606, Exotic: true})
	ageFiles(t, dir, files)
	g := newGitRepo(t)
	clients := []*treeClient{
		{name: "watched", cachePath: filepath.Join(t.TempDir(), "w"), watcher: true, srv: &server{st: memory.NewStorage()}},
		{name: "unwatched", cachePath: filepath.Join(t.TempDir(), "u"), srv: &server{st: memory.NewStorage()}},
	}
	startWatch(t, dir)
	p := func(rel string) string { return filepath.Join(dir, filepath.FromSlash(rel)) }
	write := func(rel, data string) {
		mustWrite(t, p(rel), []byte(data), 0o644)
		ageFiles(t, dir, []string{rel})
	}
	rename := func(from, to string) {
		mustMkdir(t, filepath.Dir(p(to)))
		if err := os.Rename(p(from), p(to)); err != nil {
			t.Fatal(err)
		}
	}
	remove := func(rel string) {
		if err := os.RemoveAll(p(rel)); err != nil {
			t.Fatal(err)
		}
	}
	deep := deepest(files)
	// Two files in different top directories, each at least 2 deep: the
	// push after a failed one then meets, as an unchanged sibling, a tree
	// the failed push's scan made and the server never got.
	var failedA, failedB string
	for _, f := range files[12:] {
		if strings.Count(f, "/") < 2 {
			continue
		}
		if failedA == "" {
			failedA = f
		} else if top := func(s string) string { return s[:strings.IndexByte(s, '/')] }; top(f) != top(failedA) {
			failedB = f
			break
		}
	}
	if failedB == "" {
		t.Fatal("no two files 2 deep in different top directories")
	}
	steps := []struct {
		name     string
		change   func()
		accepted bool // false: the watched client's push fails after its scan
		lost     bool // the watched client's server lost everything
	}{
		{"first", func() {}, true, false},
		{"unchanged", func() {}, true, false},
		{"edit deepest", func() { write(deep, "edited, another size") }, true, false},
		{"add file", func() { write(parentOf(deep)+"/added.txt", "added") }, true, false},
		{"delete file", func() { remove(files[5]) }, true, false},
		{"rename file in its directory", func() { rename(files[6], files[6]+".renamed") }, true, false},
		{"move file to another directory", func() { rename(files[7], "elsewhere/"+filepath.Base(files[7])) }, true, false},
		{"exec bit", func() {
			if err := os.Chmod(p(files[8]), 0o755); err != nil {
				t.Fatal(err)
			}
		}, true, false},
		{"exec bit off", func() {
			if err := os.Chmod(p(files[8]), 0o644); err != nil {
				t.Fatal(err)
			}
		}, true, false},
		{"file becomes a symlink", func() { remove(files[9]); mustSymlink(t, filepath.Base(files[10]), p(files[9])) }, true, false},
		{"symlink retargeted", func() { remove(files[9]); mustSymlink(t, "dangling", p(files[9])) }, true, false},
		{"symlink becomes a file", func() { remove(files[9]); write(files[9], "a file again") }, true, false},
		{"nested new directories", func() { write("n1/n2/n3/n4/leaf.txt", "leaf"); write("n1/n2/side.txt", "side") }, true, false},
		{"empty directory (no tree)", func() { mustMkdir(t, p("n1/empty/deeper")) }, true, false},
		{"file in the empty directory", func() { write("n1/empty/deeper/now.txt", "now") }, true, false},
		{"directory emptied", func() { remove("n1/empty/deeper/now.txt") }, true, false},
		{"directory replaced by a file", func() { remove("n1/n2"); write("n1/n2", "was a directory") }, true, false},
		{"file replaced by a directory", func() { remove(files[11]); write(files[11]+"/inside.txt", "was a file") }, true, false},
		{"directory renamed", func() { rename("n1", "n1-renamed") }, true, false},
		{"edit after the rename", func() { write("n1-renamed/n2", "edited after the rename") }, true, false},
		{"directory moved in from outside", func() {
			out := filepath.Join(t.TempDir(), "tree")
			mustWrite(t, filepath.Join(out, "x", "y.txt"), []byte("y"), 0o644)
			mustWrite(t, filepath.Join(out, "z.txt"), []byte("z"), 0o644)
			ageFiles(t, out, []string{"x/y.txt", "z.txt"})
			if err := os.Rename(out, p("moved-in")); err != nil {
				t.Fatal(err)
			}
		}, true, false},
		{"directory removed", func() { remove("moved-in") }, true, false},
		// A file named .lockstep is stored (only directories of that name
		// are skipped): the watcher must report its changes too.
		{"file named .lockstep added", func() { write("lsfile/.lockstep", "a file, stored") }, true, false},
		{"file named .lockstep edited", func() { write("lsfile/.lockstep", "edited, another size") }, true, false},
		{"file named .lockstep removed", func() { remove("lsfile/.lockstep") }, true, false},
		{"directory named .lockstep (skipped)", func() { write("lsdir/.lockstep/inside.txt", "not stored") }, true, false},
		{"directory named .lockstep removed", func() { remove("lsdir/.lockstep") }, true, false},
		{"file named .lockstep becomes a directory", func() {
			write("lsfile/.lockstep", "a file again")
			remove("lsfile/.lockstep")
			write("lsfile/.lockstep/x.txt", "not stored")
		}, true, false},
		{"push fails after its scan", func() { write(failedA, "scanned, never accepted") }, false, false},
		{"next push after the failed one", func() { write(failedB, "after the failed push") }, true, false},
		{"server lost the last push", func() { write(files[14], "to a new server") }, true, true},
		{"back to normal", func() { write(deep, "edited once more") }, true, false},
	}
	watched := 0
	for _, s := range steps {
		s.change()
		os.Remove(filepath.Join(g.gitDir, "index")) // git's racy index would miss a same-second rewrite
		want := g.writeTree(dir)
		for _, tc := range clients {
			if s.lost && tc.watcher {
				tc.srv = &server{st: memory.NewStorage()}
			}
			snap, encoded := tc.push(t, dir, s.name, want, s.accepted || !tc.watcher)
			if tc.watcher && snap.Watched {
				watched++
				if s.name == "edit deepest" && encoded != int64(strings.Count(deep, "/")+1) {
					t.Fatalf("%s: %d trees encoded, want %d", s.name, encoded, strings.Count(deep, "/")+1)
				}
			}
		}
	}
	if watched < len(steps)-4 {
		t.Fatalf("only %d of %d watched pushes used the watcher", watched, len(steps))
	}
}

func parentOf(rel string) string { return filepath.ToSlash(filepath.Dir(rel)) }

// A cache of the previous format (LKSC\x02: no directory table) is read:
// its files are trusted (nothing is hashed again), its directory table is
// empty, so a watched push walks everything once and records it.
func TestStatCacheReadsVersion2(t *testing.T) {
	dir := t.TempDir()
	files := genTree(t, dir, genSpec{Files: 50, Dirs: 8, AvgSize: 100, Seed: 22})
	ageFiles(t, dir, files)
	cachePath := filepath.Join(t.TempDir(), "statcache")
	c := openCache(t, cachePath)
	mustScan(t, dir, worktree.ScanOptions{Cache: c})
	worktree.DropCacheDirs(c)
	if err := c.Save(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(cachePath)
	if err != nil {
		t.Fatal(err)
	}
	// Version 3 with an empty table ends with its count (one 0 byte) and
	// the CRC: version 2 is the same without that byte.
	if string(data[:5]) != "LKSC\x03" || data[len(data)-5] != 0 {
		t.Fatalf("unexpected cache layout % x", data[:5])
	}
	v2 := append([]byte("LKSC\x02"), data[5:len(data)-5]...)
	v2 = binary.LittleEndian.AppendUint32(v2, crc32.Checksum(v2, crc32.MakeTable(crc32.Castagnoli)))
	if err := os.WriteFile(cachePath, v2, 0o644); err != nil {
		t.Fatal(err)
	}
	c = openCache(t, cachePath)
	if c.Len() != len(files) || len(worktree.CacheDirs(c)) != 0 {
		t.Fatalf("version 2 cache: %d files, %d directories; want %d, 0", c.Len(), len(worktree.CacheDirs(c)), len(files))
	}
	startWatch(t, dir)
	if snap := mustScan(t, dir, worktree.ScanOptions{Cache: c, Watcher: worktree.WatchSocketPath(dir)}); snap.Watched || snap.Hashed != 0 {
		t.Fatalf("push with a version 2 cache: Watched %v Hashed %d, want false 0", snap.Watched, snap.Hashed)
	}
	if len(worktree.CacheDirs(c)) == 0 {
		t.Fatal("the full scan recorded no directory table")
	}
}
