package txrun_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep/fssnap"
	"github.com/lockstep-hq/lockstep/fssnap/internal/fstest"
	"github.com/lockstep-hq/lockstep/fssnap/txrun"
)

// BenchmarkRunFalse: the filesystem side of `lockstep run --driver copy
// -- false` on a 2,000-file tree with forensics kept (take, forensics,
// restore, verify; no server), with its CPU time per run. The
// snapshot before each run's stays until the run's is taken.
func BenchmarkRunFalse(b *testing.B) {
	drv, dir, opts := fstest.Driver(b, fssnap.NameCopy, func(d string) { fstest.GenTree(b, d, 2000, 10000, 99) })
	time.Sleep(30 * time.Millisecond)
	forensics := b.TempDir()
	ctx := context.Background()
	prev := ""
	run := func() {
		rep, err := txrun.Run(ctx, txrun.Options{Dir: dir, Args: []string{"false"}, Driver: drv, Snap: opts, Forensics: forensics})
		if err != nil || !rep.RolledBack || !rep.Purity.Clean {
			b.Fatalf("%v %+v", err, rep)
		}
		if prev != "" { // the previous snapshot goes, as a prune would drop it
			if err := drv.Drop(dir, prev); err != nil {
				b.Fatal(err)
			}
		}
		prev = rep.FSSnapshot
	}
	run() // the first take stores every file
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := 0; i < b.N; i++ {
		run()
	}
	b.ReportMetric(float64(cpuTime()-cpu0)/1e6/float64(b.N), "cpu-ms/op")
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
