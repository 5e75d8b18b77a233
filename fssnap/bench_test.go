package fssnap_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep/fssnap"
	"github.com/lockstep-hq/lockstep/fssnap/internal/fstest"
)

// The benchmark tree: 2,000 files, about 20 MB (as in NOTES-machine.md).
const benchFiles, benchAvg = 2000, 10000

func benchDriver(b *testing.B, name string) (fssnap.Driver, string, fssnap.Options) {
	drv, dir, opts := fstest.Driver(b, name, func(d string) { fstest.GenTree(b, d, benchFiles, benchAvg, 99) })
	time.Sleep(30 * time.Millisecond) // let the files age past the racy window
	return drv, dir, opts
}

// damage changes 10 files, adds 50 and deletes 5, like a small agent step.
func damage(b *testing.B, dir string, round int) {
	b.Helper()
	for i := 0; i < 10; i++ {
		p := filepath.Join(dir, fmt.Sprintf("f%05d.txt", i*7))
		matches, _ := filepath.Glob(filepath.Join(dir, "*", fmt.Sprintf("f%05d.txt", i*7)))
		if len(matches) > 0 {
			p = matches[0]
		}
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			b.Fatal(err)
		}
		fmt.Fprintf(f, "round %d\n", round)
		f.Close()
	}
	os.MkdirAll(filepath.Join(dir, "build"), 0o755)
	for i := 0; i < 50; i++ {
		os.WriteFile(filepath.Join(dir, "build", fmt.Sprintf("o%d-%d", round, i)), []byte("obj"), 0o644)
	}
}

func BenchmarkTake(b *testing.B) {
	for _, name := range fstest.Drivers {
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			drv, dir, _ := benchDriver(b, name)
			prev, err := drv.Take(ctx, dir) // later takes are incremental, as in real use
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				damage(b, dir, i)
				b.StartTimer()
				s, err := drv.Take(ctx, dir)
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

func BenchmarkRestore(b *testing.B) {
	for _, name := range fstest.Drivers {
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			drv, dir, _ := benchDriver(b, name)
			s, err := drv.Take(ctx, dir)
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				damage(b, dir, i)
				b.StartTimer()
				if err := drv.Restore(ctx, dir, s.ID); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkVerify measures the purity check right after a restore.
func BenchmarkVerify(b *testing.B) {
	for _, name := range fstest.Drivers {
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			drv, dir, _ := benchDriver(b, name)
			s, err := drv.Take(ctx, dir)
			if err != nil {
				b.Fatal(err)
			}
			m, err := fssnap.BuildManifest(dir, nil)
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				damage(b, dir, i)
				if err := drv.Restore(ctx, dir, s.ID); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				res, err := fssnap.Verify(dir, m)
				if err != nil || !res.Clean() {
					b.Fatalf("verify: %v %v", err, res)
				}
				b.ReportMetric(float64(res.Hashed), "hashed/op")
			}
		})
	}
}

func BenchmarkManifest(b *testing.B) {
	mnt := fstest.Tmpfs(b)
	fstest.GenTree(b, mnt, benchFiles, benchAvg, 99)
	time.Sleep(30 * time.Millisecond)
	b.Run("full", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := fssnap.BuildManifest(mnt, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	prev, _ := fssnap.BuildManifest(mnt, nil)
	b.Run("incremental", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := fssnap.BuildManifest(mnt, prev); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func sh(b *testing.B, script string) {
	b.Helper()
	if out, err := exec.Command("sh", "-c", script).CombinedOutput(); err != nil {
		b.Fatalf("%s: %v: %s", script, err, out)
	}
}

// BenchmarkRaw measures the raw commands the drivers are compared with.
func BenchmarkRaw(b *testing.B) {
	b.Run("btrfs-subvolume-snapshot", func(b *testing.B) {
		_, dir, _ := benchDriver(b, fssnap.NameBtrfs)
		snaps := filepath.Join(filepath.Dir(dir), "raw")
		os.Mkdir(snaps, 0o755)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			sh(b, fmt.Sprintf("btrfs -q subvolume snapshot -r %s %s/s%d", dir, snaps, i))
		}
		b.StopTimer()
		sh(b, "btrfs -q subvolume delete "+snaps+"/s*")
	})
	b.Run("btrfs-rollback", func(b *testing.B) {
		_, dir, _ := benchDriver(b, fssnap.NameBtrfs)
		pristine := filepath.Join(filepath.Dir(dir), "pristine")
		sh(b, fmt.Sprintf("btrfs -q subvolume snapshot -r %s %s", dir, pristine))
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			damage(b, dir, i)
			b.StartTimer()
			sh(b, fmt.Sprintf("btrfs -q subvolume delete %s && btrfs -q subvolume snapshot %s %s", dir, pristine, dir))
		}
		b.StopTimer()
		sh(b, "btrfs -q subvolume delete "+pristine)
	})
	b.Run("overlay-rollback", func(b *testing.B) {
		mnt := fstest.Tmpfs(b)
		for _, d := range []string{"lower", "upper", "work", "merged"} {
			os.Mkdir(filepath.Join(mnt, d), 0o755)
		}
		fstest.GenTree(b, filepath.Join(mnt, "lower"), benchFiles, benchAvg, 99)
		opts := fmt.Sprintf("lowerdir=%[1]s/lower,upperdir=%[1]s/upper,workdir=%[1]s/work", mnt)
		sh(b, "mount -t overlay overlay -o "+opts+" "+mnt+"/merged")
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			damage(b, filepath.Join(mnt, "merged"), i)
			b.StartTimer()
			sh(b, fmt.Sprintf("umount %[1]s/merged && rm -rf %[1]s/upper %[1]s/work && mkdir %[1]s/upper %[1]s/work && mount -t overlay overlay -o %[2]s %[1]s/merged", mnt, opts))
		}
	})
	b.Run("cp-reflink-xfs", func(b *testing.B) {
		_, dir, _ := benchDriver(b, fssnap.NameReflink)
		dst := filepath.Join(filepath.Dir(dir), "cp")
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			sh(b, fmt.Sprintf("cp -a --reflink=always %s %s", dir, dst))
			b.StopTimer()
			os.RemoveAll(dst)
			b.StartTimer()
		}
	})
	b.Run("cp-tmpfs", func(b *testing.B) {
		_, dir, _ := benchDriver(b, fssnap.NameCopy)
		dst := filepath.Join(filepath.Dir(dir), "cp")
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			sh(b, fmt.Sprintf("cp -a %s %s", dir, dst))
			b.StopTimer()
			os.RemoveAll(dst)
			b.StartTimer()
		}
	})
}

// BenchmarkVerifyKnownDirs: a run's verify of an unchanged 2,000-file
// tree, reading every directory (Verify) against taking unchanged
// directories' names from the manifest (VerifyKnownDirs), alternated.
func BenchmarkVerifyKnownDirs(b *testing.B) {
	mnt := fstest.Tmpfs(b)
	fstest.GenTree(b, mnt, benchFiles, benchAvg, 99)
	time.Sleep(30 * time.Millisecond)
	m, err := fssnap.BuildManifest(mnt, nil)
	if err != nil {
		b.Fatal(err)
	}
	time.Sleep(30 * time.Millisecond)
	for round := 0; round < 2; round++ {
		for _, v := range []struct {
			name string
			f    func(string, *fssnap.Manifest) (fssnap.Residue, error)
		}{{"verify", fssnap.Verify}, {"known", fssnap.VerifyKnownDirs}} {
			b.Run(v.name, func(b *testing.B) {
				cpu0 := cpuTime()
				for i := 0; i < b.N; i++ {
					res, err := v.f(mnt, m)
					if err != nil || !res.Clean() {
						b.Fatalf("%v %v", err, res)
					}
				}
				// CPU time (user + system, all threads) tells more than
				// wall time on a loaded machine.
				b.ReportMetric(float64(cpuTime()-cpu0)/1e6/float64(b.N), "cpu-ms/op")
			})
		}
	}
}

// cpuTime is this process's user + system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
