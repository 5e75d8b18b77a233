package worktree_test

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/lockstep-hq/lockstep/worktree"
)

// startWatch runs a real watcher (fsnotify) on dir until the returned stop
// is called (or the test ends).
func startWatch(t *testing.T, dir string) (stop func()) {
	t.Helper()
	return startWatchWith(t, dir, worktree.WatchOptions{})
}

func startWatchWith(t *testing.T, dir string, opts worktree.WatchOptions) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- worktree.Watch(ctx, dir, opts, func() { close(ready) }) }()
	select {
	case <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("watch: %v", err)
	}
	var stopped bool
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("watch: %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}

// watchedPush is what a push does: scan with the cache and the watcher,
// then save the cache. It checks the tree against a scan without cache or
// watcher and against git, and returns the snapshot.
func watchedPush(t *testing.T, g *gitRepo, dir, cachePath string) *worktree.Snapshot {
	t.Helper()
	cache := openCache(t, cachePath)
	snap := mustScan(t, dir, worktree.ScanOptions{Cache: cache, Watcher: worktree.WatchSocketPath(dir)})
	if err := cache.Save(); err != nil {
		t.Fatal(err)
	}
	full := mustScan(t, dir, worktree.ScanOptions{})
	if snap.Tree != full.Tree || snap.Files != full.Files {
		t.Fatalf("watched scan: tree %s (%d files), full scan %s (%d files)", snap.Tree, snap.Files, full.Tree, full.Files)
	}
	// Without its index: git's own stat cache misses a same-size rewrite
	// within the second (it compares ctime seconds only).
	os.Remove(filepath.Join(g.gitDir, "index"))
	if want := g.writeTree(dir); snap.Tree.String() != want {
		t.Fatalf("watched scan tree %s, git %s", snap.Tree, want)
	}
	return snap
}

func TestWatchPushSeesEveryChange(t *testing.T) {
	dir := t.TempDir()
	files := genTree(t, dir, genSpec{Files: 300, Dirs: 40, AvgSize: 100, Seed: 26, Exotic: true})
	ageFiles(t, dir, files)
	cachePath := filepath.Join(t.TempDir(), "statcache")
	g := newGitRepo(t)

	// A push before the watcher runs: the plain stat cache.
	if snap := watchedPush(t, g, dir, cachePath); snap.Watched {
		t.Fatal("scan used a watcher that is not running")
	}
	startWatch(t, dir)
	// The first push with the watcher has no token yet: full scan.
	if snap := watchedPush(t, g, dir, cachePath); snap.Watched {
		t.Fatal("first push with the watcher did not scan everything")
	}
	if snap := watchedPush(t, g, dir, cachePath); !snap.Watched || snap.Hashed != 0 {
		t.Fatalf("unchanged tree: Watched %v Hashed %d, want true 0", snap.Watched, snap.Hashed)
	}
	p := func(rel string) string { return filepath.Join(dir, filepath.FromSlash(rel)) }
	steps := []struct {
		name   string
		change func()
		hashed int  // files read; -1: any
		full   bool // the watcher cannot vouch: a full scan is expected
	}{
		{"same-size rewrite", func() {
			b, _ := os.ReadFile(p(files[0]))
			b = append([]byte{^byte(len(b))}, b...)[:len(b)]
			if len(b) == 0 {
				b = []byte("x")
			}
			mustWrite(t, p(files[0]), b, 0o644)
			ageFiles(t, dir, files[:1])
		}, 1, false},
		{"file in a new subdirectory", func() {
			mustWrite(t, p("brand/new/deep/file.txt"), []byte("new"), 0o644)
			ageFiles(t, dir, []string{"brand/new/deep/file.txt"})
		}, 1, false},
		{"delete", func() {
			if err := os.Remove(p(files[1])); err != nil {
				t.Fatal(err)
			}
		}, 0, false},
		{"rename a file", func() {
			if err := os.Rename(p(files[2]), p(files[2]+".moved")); err != nil {
				t.Fatal(err)
			}
		}, 1, false},
		{"exec bit", func() {
			if err := os.Chmod(p(files[3]), 0o755); err != nil {
				t.Fatal(err)
			}
		}, 1, false},
		{"file replaced by a symlink", func() {
			os.Remove(p(files[4]))
			mustSymlink(t, "does-not-exist", p(files[4]))
		}, 0, false},
		{"new directory moved in", func() {
			outside := filepath.Join(t.TempDir(), "tree")
			mustWrite(t, filepath.Join(outside, "x", "y.txt"), []byte("y"), 0o644)
			mustWrite(t, filepath.Join(outside, "z.txt"), []byte("z"), 0o644)
			ageFiles(t, outside, []string{"x/y.txt", "z.txt"})
			if err := os.Rename(outside, p("moved-in")); err != nil {
				t.Fatal(err)
			}
		}, 2, false},
		{"change inside the moved-in directory", func() {
			mustWrite(t, p("moved-in/x/y.txt"), []byte("yy"), 0o644)
			ageFiles(t, dir, []string{"moved-in/x/y.txt"})
		}, 1, false},
		{"directory renamed", func() {
			if err := os.Rename(p("brand"), p("brand2")); err != nil {
				t.Fatal(err)
			}
		}, -1, true},
		{"change after the rename", func() {
			mustWrite(t, p("brand2/new/deep/file.txt"), []byte("newer"), 0o644)
			ageFiles(t, dir, []string{"brand2/new/deep/file.txt"})
		}, 1, false},
		{"directory removed", func() {
			if err := os.RemoveAll(p("brand2")); err != nil {
				t.Fatal(err)
			}
		}, 0, false},
		{"removed directory made again", func() {
			mustWrite(t, p("brand2/new/again.txt"), []byte("again"), 0o644)
			ageFiles(t, dir, []string{"brand2/new/again.txt"})
		}, 1, false},
		{"change in it", func() {
			mustWrite(t, p("brand2/new/again.txt"), []byte("again!"), 0o644)
			ageFiles(t, dir, []string{"brand2/new/again.txt"})
		}, 1, false},
		{".lockstep is not pushed", func() {
			mustWrite(t, p(".lockstep/other"), []byte("x"), 0o644)
			mustWrite(t, p("sub/.lockstep/other"), []byte("x"), 0o644)
		}, 0, false},
	}
	for _, s := range steps {
		t.Logf("step: %s", s.name)
		s.change()
		snap := watchedPush(t, g, dir, cachePath)
		if snap.Watched == s.full {
			t.Fatalf("%s: Watched %v, want %v", s.name, snap.Watched, !s.full)
		}
		if s.hashed >= 0 && snap.Hashed != s.hashed {
			t.Fatalf("%s: hashed %d files, want %d", s.name, snap.Hashed, s.hashed)
		}
	}
}

func TestWatchKilledOrRestartedFallsBack(t *testing.T) {
	dir := t.TempDir()
	files := genTree(t, dir, genSpec{Files: 100, Dirs: 10, AvgSize: 100, Seed: 3})
	ageFiles(t, dir, files)
	cachePath := filepath.Join(t.TempDir(), "statcache")
	g := newGitRepo(t)
	stop := startWatch(t, dir)
	watchedPush(t, g, dir, cachePath)
	if snap := watchedPush(t, g, dir, cachePath); !snap.Watched {
		t.Fatal("second push did not use the watcher")
	}
	stop()
	// A change while no watcher runs; a stale socket file, as a killed
	// watcher leaves it.
	mustWrite(t, filepath.Join(dir, files[0]), []byte("changed while unwatched"), 0o644)
	ageFiles(t, dir, files[:1])
	mustWrite(t, worktree.WatchSocketPath(dir), nil, 0o644)
	if snap := watchedPush(t, g, dir, cachePath); snap.Watched {
		t.Fatal("push without a watcher did not scan everything")
	}
	// A restarted watcher knows nothing of what happened before it.
	startWatch(t, dir)
	mustWrite(t, filepath.Join(dir, files[1]), []byte("changed before the first query"), 0o644)
	ageFiles(t, dir, files[1:2])
	if snap := watchedPush(t, g, dir, cachePath); snap.Watched {
		t.Fatal("push with a restarted watcher did not scan everything")
	}
	mustWrite(t, filepath.Join(dir, files[2]), []byte("watched again"), 0o644)
	ageFiles(t, dir, files[2:3])
	if snap := watchedPush(t, g, dir, cachePath); !snap.Watched || snap.Hashed != 1 {
		t.Fatalf("after the restart: Watched %v Hashed %d, want true 1", snap.Watched, snap.Hashed)
	}
}

// More changed paths than --max-tracked: the watcher forgets them and the
// next push scans everything (and sees every change); below the limit
// the watcher answers again.
func TestWatchMaxTrackedFallsBack(t *testing.T) {
	dir := t.TempDir()
	files := genTree(t, dir, genSpec{Files: 60, Dirs: 3, AvgSize: 100, Seed: 5})
	ageFiles(t, dir, files)
	cachePath := filepath.Join(t.TempDir(), "statcache")
	g := newGitRepo(t)
	startWatchWith(t, dir, worktree.WatchOptions{MaxTracked: 3})
	watchedPush(t, g, dir, cachePath)
	for _, f := range files[:5] {
		mustWrite(t, filepath.Join(dir, f), []byte("more than the watcher tracks "+f), 0o644)
	}
	ageFiles(t, dir, files[:5])
	if snap := watchedPush(t, g, dir, cachePath); snap.Watched {
		t.Fatal("push trusted a watcher past its changed-path limit")
	}
	mustWrite(t, filepath.Join(dir, files[6]), []byte("one change"), 0o644)
	ageFiles(t, dir, files[6:7])
	if snap := watchedPush(t, g, dir, cachePath); !snap.Watched || snap.Hashed != 1 {
		t.Fatalf("below the limit: Watched %v Hashed %d, want true 1", snap.Watched, snap.Hashed)
	}
}

// A push without the watcher in between (it rewrites the cache) must not
// let the next watched push trust a token older than the cache.
func TestWatchTokenDroppedByUnwatchedPush(t *testing.T) {
	dir := t.TempDir()
	files := genTree(t, dir, genSpec{Files: 50, Dirs: 5, AvgSize: 100, Seed: 4})
	ageFiles(t, dir, files)
	cachePath := filepath.Join(t.TempDir(), "statcache")
	g := newGitRepo(t)
	startWatch(t, dir)
	watchedPush(t, g, dir, cachePath)
	cache := openCache(t, cachePath)
	mustScan(t, dir, worktree.ScanOptions{Cache: cache}) // no Watcher
	if err := cache.Save(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(cachePath + ".watch"); !os.IsNotExist(err) {
		t.Fatalf("token file after an unwatched push: %v", err)
	}
	if snap := watchedPush(t, g, dir, cachePath); snap.Watched {
		t.Fatal("watched push trusted a token the cache does not match")
	}
}

// The kernel's event queue overflows (IN_Q_OVERFLOW, fsnotify
// ErrEventOverflow) while the watcher is held up: the next push scans
// everything and sees the change made meanwhile.
func TestWatchOverflowFallsBack(t *testing.T) {
	dir := t.TempDir()
	files := genTree(t, dir, genSpec{Files: 50, Dirs: 5, AvgSize: 100, Seed: 5})
	ageFiles(t, dir, files)
	cachePath := filepath.Join(t.TempDir(), "statcache")
	g := newGitRepo(t)
	hold := make(chan struct{})
	var armed atomic.Bool
	worktree.SetWatchTestHook(func() {
		if armed.CompareAndSwap(true, false) {
			<-hold
		}
	})
	t.Cleanup(func() { worktree.SetWatchTestHook(nil) })
	startWatch(t, dir)
	watchedPush(t, g, dir, cachePath)
	watchedPush(t, g, dir, cachePath)

	// Hold the watcher on its next event, then make more events than
	// fsnotify's buffer plus the kernel queue (max_queued_events) hold.
	max, err := os.ReadFile("/proc/sys/fs/inotify/max_queued_events")
	if err != nil {
		t.Skip("no inotify limits to read:", err)
	}
	var limit int
	for _, c := range max {
		if c >= '0' && c <= '9' {
			limit = limit*10 + int(c-'0')
		}
	}
	a, err := os.OpenFile(filepath.Join(dir, files[0]), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.OpenFile(filepath.Join(dir, files[1]), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	for i := 0; i < 2*limit+3*4096; i++ { // fsnotify buffers 4096 events in its channel and up to 4096 in its read buffer
		f := a
		if i%2 == 1 {
			f = b // alternate: the kernel merges identical consecutive events
		}
		if _, err := f.Write([]byte{'x'}); err != nil {
			t.Fatal(err)
		}
	}
	a.Close()
	b.Close()
	ageFiles(t, dir, files[:2])
	close(hold)
	if snap := watchedPush(t, g, dir, cachePath); snap.Watched {
		t.Fatal("push after an overflow did not scan everything")
	}
	mustWrite(t, filepath.Join(dir, files[2]), []byte("after the overflow"), 0o644)
	ageFiles(t, dir, files[2:3])
	if snap := watchedPush(t, g, dir, cachePath); !snap.Watched || snap.Hashed != 1 {
		t.Fatalf("after the overflow: Watched %v Hashed %d, want true 1", snap.Watched, snap.Hashed)
	}
}
