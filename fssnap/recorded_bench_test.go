package fssnap_test

import (
	"context"
	"testing"

	"github.com/lockstep-hq/lockstep/fssnap"
)

// BenchmarkTakeRecorded is `lockstep snapshot take` without the process:
// the driver's take plus the manifest (built from the current one) and
// its record. Compare with BenchmarkTake (the driver alone).
//
//	go test -run '^$' -bench 'Recorded|Take/btrfs|Restore/btrfs' ./fssnap
func BenchmarkTakeRecorded(b *testing.B) {
	for _, name := range []string{fssnap.NameBtrfs, fssnap.NameOverlay} {
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			drv, dir, opts := benchDriver(b, name)
			prev, err := fssnap.TakeRecorded(ctx, drv, opts, dir)
			if err != nil {
				b.Fatal(err)
			}
			for i := 0; b.Loop(); i++ {
				b.StopTimer()
				damage(b, dir, i)
				b.StartTimer()
				s, err := fssnap.TakeRecorded(ctx, drv, opts, dir)
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				drv.Drop(dir, prev.ID)
				prev = s
				b.StartTimer()
			}
		})
	}
}

// BenchmarkRestoreRecorded is `lockstep snapshot restore` without the
// process (no verify: the drivers' restores are exact).
func BenchmarkRestoreRecorded(b *testing.B) {
	for _, name := range []string{fssnap.NameBtrfs, fssnap.NameOverlay} {
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			drv, dir, opts := benchDriver(b, name)
			s, err := fssnap.TakeRecorded(ctx, drv, opts, dir)
			if err != nil {
				b.Fatal(err)
			}
			for i := 0; b.Loop(); i++ {
				b.StopTimer()
				damage(b, dir, i)
				b.StartTimer()
				if _, _, err := fssnap.RestoreRecorded(ctx, drv, opts, dir, s.ID, false); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
