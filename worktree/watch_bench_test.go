package worktree_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep/worktree"
)

// BenchmarkWatchPushScan is the client side of `lockstep push` with one
// changed file (load the stat cache, scan, save it) at 20,000 and 100,000
// files: with the stat cache only ("cache"), with a running watcher
// ("watcher"), and `git status --porcelain` with core.fsmonitor off as
// the baseline. The three run interleaved in each iteration, on the same
// tree; it reports min, median and max of each in ms. Run it on a tmpfs:
//
//	TMPDIR=/dev/shm go test -run '^$' -bench WatchPushScan -benchtime 20x ./worktree
func BenchmarkWatchPushScan(b *testing.B) {
	for _, n := range []int{20_000, 100_000} {
		b.Run(fmt.Sprintf("files=%d", n), func(b *testing.B) { benchWatchPushScan(b, n) })
	}
}

func benchWatchPushScan(b *testing.B, n int) {
	dir := b.TempDir()
	files := genTree(b, dir, genSpec{Files: n, Dirs: n / 5, AvgSize: 1000, Seed: 26})
	ageFiles(b, dir, files)
	ctx, cancel := context.WithCancel(context.Background())
	ready, done := make(chan struct{}), make(chan error, 1)
	go func() { done <- worktree.Watch(ctx, dir, worktree.WatchOptions{}, func() { close(ready) }) }()
	<-ready
	defer func() { cancel(); <-done }()
	g := newGitBench(b, dir)
	g.run("config", "core.fsmonitor", "false")
	g.run("config", "core.untrackedCache", "false")

	plain := filepath.Join(b.TempDir(), "plain")
	watched := filepath.Join(b.TempDir(), "watched")
	push := func(cachePath string, sock string) *worktree.Snapshot {
		c, err := worktree.OpenStatCache(cachePath)
		if err != nil {
			b.Fatal(err)
		}
		snap, err := worktree.Scan(dir, worktree.ScanOptions{Cache: c, Watcher: sock})
		if err != nil {
			b.Fatal(err)
		}
		c.SetKnown(snap.Known()) // as a push the server accepted
		if err := c.Save(); err != nil {
			b.Fatal(err)
		}
		return snap
	}
	sock := worktree.WatchSocketPath(dir)
	push(plain, "")
	push(watched, sock) // takes the first token
	var tc, tw, tg []float64
	ms := func(t time.Time) float64 { return float64(time.Since(t).Microseconds()) / 1000 }
	i := 0
	for b.Loop() {
		b.StopTimer()
		i++
		touchOne(b, dir, files[i%len(files)], i)
		b.StartTimer()
		t0 := time.Now()
		a := push(plain, "")
		tc = append(tc, ms(t0))
		t0 = time.Now()
		w := push(watched, sock)
		tw = append(tw, ms(t0))
		t0 = time.Now()
		g.run("status", "--porcelain")
		tg = append(tg, ms(t0))
		if a.Tree != w.Tree || !w.Watched {
			b.Fatalf("watched scan: tree %s watched %v, cache scan %s", w.Tree, w.Watched, a.Tree)
		}
	}
	for _, m := range []struct {
		name string
		v    []float64
	}{{"cache", tc}, {"watcher", tw}, {"git-status", tg}} {
		slices.Sort(m.v)
		b.ReportMetric(m.v[0], m.name+"-min-ms")
		b.ReportMetric(m.v[len(m.v)/2], m.name+"-med-ms")
		b.ReportMetric(m.v[len(m.v)-1], m.name+"-max-ms")
	}
}
