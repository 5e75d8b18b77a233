package worktree_test

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/worktree"
)

func mustScan(tb testing.TB, dir string, opts worktree.ScanOptions) *worktree.Snapshot {
	tb.Helper()
	snap, err := worktree.Scan(dir, opts)
	if err != nil {
		tb.Fatalf("Scan(%s): %v", dir, err)
	}
	return snap
}

// sortStress is a tree whose names exercise git's ordering: a directory
// sorts as "name/", so "a" (dir) comes after "a-", "a.b" and before "a0".
func sortStress(tb testing.TB, root string) {
	for _, f := range []string{"a/x", "a-", "a.b", "a0", "a+", "a=", "ab/c", "foo.txt", "foo/bar", "foo-bar", "foo.d/e",
		"b/a/b/c/d/e/f/deep", "B", "_", "~", "\x01ctl", "tab\tname", "new\nline", "sp ace"} {
		mustWrite(tb, filepath.Join(root, f), []byte("content of "+f+"\n"), 0o644)
	}
	mustWrite(tb, filepath.Join(root, "run.sh"), []byte("#!/bin/sh\n"), 0o755)
	mustWrite(tb, filepath.Join(root, "group-exec"), []byte("g\n"), 0o654) // only the owner bit counts
	mustWrite(tb, filepath.Join(root, "empty-file"), nil, 0o644)
	mustSymlink(tb, "a/x", filepath.Join(root, "link-to-ax"))
	mustSymlink(tb, "../a0", filepath.Join(root, "foo", "up"))
	mustSymlink(tb, "a", filepath.Join(root, "link-to-dir"))
	mustMkdir(tb, filepath.Join(root, "empty", "deeper"))
}

func TestScanMatchesGit(t *testing.T) {
	cases := []struct {
		name string
		fill func(tb testing.TB, root string)
	}{
		{"empty", func(testing.TB, string) {}},
		{"sort-stress", sortStress},
		{"only-empty-dirs", func(tb testing.TB, root string) { mustMkdir(tb, filepath.Join(root, "a", "b")) }},
		{"generated-1", func(tb testing.TB, root string) {
			genTree(tb, root, genSpec{Files: 300, Dirs: 60, AvgSize: 500, Seed: 1, Exotic: true})
		}},
		{"generated-2", func(tb testing.TB, root string) {
			genTree(tb, root, genSpec{Files: 120, Dirs: 40, AvgSize: 3000, Seed: 2, Exotic: true})
		}},
		{"generated-flat", func(tb testing.TB, root string) {
			genTree(tb, root, genSpec{Files: 500, Dirs: 1, AvgSize: 100, Seed: 3, Exotic: true})
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.fill(t, dir)
			want := newGitRepo(t).writeTree(dir)

			snap := mustScan(t, dir, worktree.ScanOptions{})
			if got := snap.Tree.String(); got != want {
				t.Fatalf("Scan tree = %s, git write-tree = %s", got, want)
			}
			// Same answer through a cold and then a warm cache.
			cache, err := worktree.OpenStatCache(filepath.Join(dir, ".lockstep", "statcache"))
			if err != nil {
				t.Fatal(err)
			}
			for i := range 2 {
				snap := mustScan(t, dir, worktree.ScanOptions{Cache: cache})
				if got := snap.Tree.String(); got != want {
					t.Fatalf("Scan with cache (round %d) tree = %s, git = %s", i, got, want)
				}
				if err := cache.Save(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

func TestScanSkipsGitAndLockstepDirs(t *testing.T) {
	dir := t.TempDir()
	sortStress(t, dir)
	want := newGitRepo(t).writeTree(dir)

	mustWrite(t, filepath.Join(dir, ".git", "HEAD"), []byte("ref: refs/heads/main\n"), 0o644)
	mustWrite(t, filepath.Join(dir, "a", ".git", "config"), []byte("[core]\n"), 0o644)
	mustWrite(t, filepath.Join(dir, "foo", ".git"), []byte("gitdir: elsewhere\n"), 0o644)
	mustWrite(t, filepath.Join(dir, ".lockstep", "statcache"), []byte("x"), 0o644)
	mustWrite(t, filepath.Join(dir, "b", ".lockstep", "other"), []byte("x"), 0o644)
	if got := mustScan(t, dir, worktree.ScanOptions{}).Tree.String(); got != want {
		t.Fatalf("Scan with .git/.lockstep dirs = %s, want %s (as without them)", got, want)
	}

	// The Ignore hook leaves out what it is told to, and nothing else.
	mustWrite(t, filepath.Join(dir, "build", "out.bin"), []byte("generated"), 0o644)
	ignore := func(rel string, isDir bool) bool { return rel == "build" && isDir }
	if got := mustScan(t, dir, worktree.ScanOptions{Ignore: ignore}).Tree.String(); got != want {
		t.Fatalf("Scan ignoring build/ = %s, want %s", got, want)
	}
}

func TestScanRefusesBadInputs(t *testing.T) {
	cases := []struct {
		name  string
		setup func(t *testing.T, dir string) // creates the offending path "sub/bad"
		opts  worktree.ScanOptions
		code  string
		text  string
	}{
		{"fifo", func(t *testing.T, dir string) {
			if err := syscall.Mkfifo(filepath.Join(dir, "sub", "bad"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, worktree.ScanOptions{}, lockstep.EINVALID, "fifo"},
		{"char-device", func(t *testing.T, dir string) {
			dev := 1<<8 | 3 // like /dev/null
			if err := syscall.Mknod(filepath.Join(dir, "sub", "bad"), syscall.S_IFCHR|0o600, dev); err != nil {
				t.Skipf("mknod: %v (needs root)", err)
			}
		}, worktree.ScanOptions{}, lockstep.EINVALID, "character device"},
		{"socket", func(t *testing.T, dir string) {
			l, err := net.Listen("unix", filepath.Join(dir, "sub", "bad"))
			if err != nil {
				t.Skipf("unix socket: %v", err)
			}
			t.Cleanup(func() { l.Close() })
		}, worktree.ScanOptions{}, lockstep.EINVALID, "socket"},
		{"escaping-symlink", func(t *testing.T, dir string) {
			mustSymlink(t, "../../outside", filepath.Join(dir, "sub", "bad"))
		}, worktree.ScanOptions{}, lockstep.EINVALID, "outside"},
		{"escaping-symlink-via-symlink", func(t *testing.T, dir string) {
			mustSymlink(t, "..", filepath.Join(dir, "sub", "up"))     // sub/up -> dir: fine
			mustSymlink(t, "up/..", filepath.Join(dir, "sub", "bad")) // lexically dir/sub, really dir/..
		}, worktree.ScanOptions{}, lockstep.EINVALID, "outside"},
		{"absolute-symlink", func(t *testing.T, dir string) {
			mustSymlink(t, "/etc/passwd", filepath.Join(dir, "sub", "bad"))
		}, worktree.ScanOptions{}, lockstep.EINVALID, "absolute"},
		{"invalid-utf8-name", func(t *testing.T, dir string) {
			mustWrite(t, filepath.Join(dir, "sub", "bad\xff"), []byte("x"), 0o644)
		}, worktree.ScanOptions{}, lockstep.EINVALID, "UTF-8"},
		{"invalid-utf8-dir", func(t *testing.T, dir string) {
			mustWrite(t, filepath.Join(dir, "sub", "bad\xc3(", "f"), []byte("x"), 0o644)
		}, worktree.ScanOptions{}, lockstep.EINVALID, "UTF-8"},
		{"file-too-large", func(t *testing.T, dir string) {
			mustWrite(t, filepath.Join(dir, "sub", "bad"), make([]byte, 1001), 0o644)
		}, worktree.ScanOptions{MaxFileBytes: 1000}, lockstep.ETOOLARGE, "1001 bytes"},
		{"too-many-files", func(t *testing.T, dir string) {
			mustWrite(t, filepath.Join(dir, "sub", "bad"), nil, 0o644)
		}, worktree.ScanOptions{MaxFiles: 2}, lockstep.ETOOLARGE, "more than 2 files"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			mustWrite(t, filepath.Join(dir, "ok.txt"), []byte("ok"), 0o644)
			mustWrite(t, filepath.Join(dir, "sub", "fine"), []byte("ok"), 0o644)
			tc.setup(t, dir)
			_, err := worktree.Scan(dir, tc.opts)
			if err == nil {
				t.Fatal("Scan succeeded, want an error")
			}
			var le *lockstep.Error
			if !errors.As(err, &le) || le.Code != tc.code {
				t.Fatalf("Scan error = %v, want code %s", err, tc.code)
			}
			// A file count has no single culprit; every other error names the path.
			namesPath := strings.Contains(err.Error(), "sub/bad") || tc.name == "too-many-files"
			if !namesPath || !strings.Contains(err.Error(), tc.text) {
				t.Fatalf("Scan error = %q, want it to name sub/bad and say %q", err, tc.text)
			}
		})
	}
}

func TestScanAcceptsLimitsExactly(t *testing.T) {
	dir := t.TempDir()
	mustWrite(t, filepath.Join(dir, "a"), make([]byte, 1000), 0o644)
	mustWrite(t, filepath.Join(dir, "b"), nil, 0o644)
	if _, err := worktree.Scan(dir, worktree.ScanOptions{MaxFileBytes: 1000, MaxFiles: 2}); err != nil {
		t.Fatalf("Scan at the limits: %v", err)
	}
	if err := os.Remove(filepath.Join(dir, "b")); err != nil {
		t.Fatal(err)
	}
}
