package worktree_test

import (
	"fmt"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep/worktree"
)

// BenchmarkPushScanBench is the client's scan of `lockstep push` (open the
// stat cache, scan with one file changed, save the cache; no watcher) on a
// tree of the shape `lockstep bench` generates: files/5 leaf directories
// under 16 top ones, ~5 files each. Run it on a tmpfs:
//
//	TMPDIR=/dev/shm go test -run '^$' -bench PushScanBench -benchtime 50x ./worktree
func BenchmarkPushScanBench(b *testing.B) {
	for _, n := range []int{2_000, 20_000} {
		b.Run(fmt.Sprintf("files=%d", n), func(b *testing.B) { benchPushScanShape(b, n) })
	}
}

func benchPushScanShape(b *testing.B, n int) {
	dir := b.TempDir()
	nd := max(1, n*392/2000)
	ntop := max(1, min(16, nd/24))
	files := make([]string, n)
	for j := range n {
		d := j % nd
		files[j] = fmt.Sprintf("d%02d/s%03d/f%05d.txt", d%ntop, d/ntop, j)
		mustWrite(b, filepath.Join(dir, files[j]), []byte(fmt.Sprintf("file %d\n%0500d\n", j, j)), 0o644)
	}
	ageFiles(b, dir, files)
	cachePath := filepath.Join(b.TempDir(), "statcache")
	push := func() *worktree.Snapshot {
		c, err := worktree.OpenStatCache(cachePath)
		if err != nil {
			b.Fatal(err)
		}
		snap, err := worktree.Scan(dir, worktree.ScanOptions{Cache: c})
		if err != nil {
			b.Fatal(err)
		}
		c.SetKnown(snap.Known())
		if err := c.Save(); err != nil {
			b.Fatal(err)
		}
		return snap
	}
	push()
	push()
	b.ReportAllocs()
	// CPU time of the process (user + system, every goroutine, the GC
	// included) per push: steadier than wall time on a loaded machine.
	cpu := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			b.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	var cpus []float64
	i := 0
	for b.Loop() {
		b.StopTimer()
		i++
		touchOne(b, dir, files[(i*7919)%n], i)
		b.StartTimer()
		c0 := cpu()
		snap := push()
		cpus = append(cpus, float64((cpu()-c0).Microseconds())/1000)
		if snap.Hashed > 2 || snap.Files != n {
			b.Fatalf("scan hashed %d of %d files", snap.Hashed, snap.Files)
		}
	}
	slices.Sort(cpus)
	b.ReportMetric(cpus[0], "cpu-min-ms")
	b.ReportMetric(cpus[len(cpus)/2], "cpu-med-ms")
	b.ReportMetric(cpus[len(cpus)-1], "cpu-max-ms")
}
