package bench

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// benchSnapshot is `lockstep snapshot take` and `restore` from the CLI
// (whole processes) beside the raw mechanism of the driver, interleaved
// (issue #26): on btrfs (a loop-mounted image on the bench's
// filesystem), `btrfs subvolume snapshot -r` for a take and `btrfs
// subvolume delete` + `btrfs subvolume snapshot` for a restore; on an
// overlay (`lockstep snapshot prepare` on a tmpfs directory), the same
// steps done by hand: umount, the upper directory renamed into a new lower
// layer, a fresh upper, mount (take), and umount, upper and work emptied,
// mount (restore). Each iteration first appends a line to 10 files of the
// small tree. It needs root and mkfs.btrfs; without them its rows say
// why they were skipped.
func (b *bencher) benchSnapshot() error {
	rows := []string{"snapshot-take-btrfs", "snapshot-restore-btrfs", "snapshot-take-overlay", "snapshot-restore-overlay"}
	skipAll := func(reason string) error {
		for _, r := range rows {
			b.skip(r, reason)
		}
		return nil
	}
	if os.Geteuid() != 0 {
		return skipAll("needs root (mounts)")
	}
	if err := b.snapshotBtrfs(); err != nil {
		if err != errSkipped {
			return err
		}
	}
	return b.snapshotOverlay()
}

var errSkipped = fmt.Errorf("skipped")

// sh runs a shell command line and fails with its output.
func (b *bencher) sh(line string) error {
	c := b.cmd(b.root, "sh", "-c", line)
	if out, err := c.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %v: %s", line, err, bytes.TrimSpace(out))
	}
	return nil
}

// lsSnapshot runs `lockstep snapshot ARGS --state-root state` and returns
// its wall time and stdout.
func (b *bencher) lsSnapshot(state string, args ...string) (time.Duration, string, error) {
	c := b.cmd(b.root, b.bin, append(append([]string{"snapshot"}, args...), "--state-root", state)...)
	var stderr bytes.Buffer
	c.Stderr = &stderr
	t := time.Now()
	out, err := c.Output()
	d := time.Since(t)
	if err != nil {
		return 0, "", fmt.Errorf("lockstep snapshot %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return d, strings.TrimSpace(string(out)), nil
}

// touch10 appends a line to 10 files of the small tree in dir.
func (b *bencher) touch10(dir string, i int) error {
	for j := 0; j < 10; j++ {
		p := dir + "/" + b.small.path((i*10+j*37)%b.small.n)
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return err
		}
		fmt.Fprintf(f, "iteration %d\n", i)
		f.Close()
	}
	return nil
}

// firstField is the snapshot id printed by `lockstep snapshot take`.
func firstField(s string) string {
	if f := strings.Fields(s); len(f) > 0 {
		return f[0]
	}
	return ""
}

func (b *bencher) snapshotBtrfs() error {
	if _, err := exec.LookPath("mkfs.btrfs"); err != nil {
		b.skip("snapshot-take-btrfs", "mkfs.btrfs not installed (btrfs-progs)")
		b.skip("snapshot-restore-btrfs", "mkfs.btrfs not installed (btrfs-progs)")
		return errSkipped
	}
	img, mnt := b.path("btrfs.img"), b.path("btrfs")
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		return err
	}
	if err := b.sh(fmt.Sprintf("truncate -s 1G %s && mkfs.btrfs -q %s && mount -o loop %s %s", img, img, img, mnt)); err != nil {
		b.skip("snapshot-take-btrfs", err.Error())
		b.skip("snapshot-restore-btrfs", err.Error())
		return errSkipped
	}
	defer b.sh("umount " + mnt)
	dir, raw, state := mnt+"/ws", mnt+"/raw", mnt+"/state"
	if err := b.sh(fmt.Sprintf("btrfs -q subvolume create %s && mkdir %s %s", dir, raw, state)); err != nil {
		return err
	}
	defer b.sh(fmt.Sprintf("btrfs -q subvolume delete %s/* 2>/dev/null; true", raw))
	nbytes, err := b.small.write(dir)
	if err != nil {
		return err
	}
	_, first, err := b.lsSnapshot(state, "take", "--quiet", dir)
	if err != nil {
		return err
	}
	first = firstField(first)
	if err := b.sh(fmt.Sprintf("btrfs -q subvolume snapshot -r %s %s/pristine", dir, raw)); err != nil {
		return err
	}
	size := b.small.describe(nbytes) + ", 10 files appended to each time"
	n := b.o.iters
	load0 := loadAvg()
	ls, gd, err := b.measurePair("snapshot-take-btrfs", 1, n, func(i int) (time.Duration, error) {
		if err := b.touch10(dir, i); err != nil {
			return 0, err
		}
		d, _, err := b.lsSnapshot(state, "take", dir)
		return d, err
	}, func(i int) (time.Duration, error) {
		if err := b.touch10(dir, i); err != nil {
			return 0, err
		}
		t := time.Now()
		err := b.sh(fmt.Sprintf("btrfs -q subvolume snapshot -r %s %s/s%d", dir, raw, i))
		return time.Since(t), err
	})
	if err != nil {
		return err
	}
	b.snapRow("snapshot-take-btrfs", size, "btrfs subvolume snapshot -r", ls, gd, load0, "< 20 ms")
	load0 = loadAvg()
	ls, gd, err = b.measurePair("snapshot-restore-btrfs", 1, n, func(i int) (time.Duration, error) {
		if err := b.touch10(dir, i); err != nil {
			return 0, err
		}
		d, _, err := b.lsSnapshot(state, "restore", dir, first)
		return d, err
	}, func(i int) (time.Duration, error) {
		if err := b.touch10(dir, i); err != nil {
			return 0, err
		}
		t := time.Now()
		err := b.sh(fmt.Sprintf("btrfs -q subvolume delete %s && btrfs -q subvolume snapshot %s/pristine %s", dir, raw, dir))
		return time.Since(t), err
	})
	if err != nil {
		return err
	}
	b.snapRow("snapshot-restore-btrfs", size, "btrfs subvolume delete + snapshot", ls, gd, load0, "< 15 ms")
	return nil
}

func (b *bencher) snapshotOverlay() error {
	mnt := b.path("ovl")
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		return err
	}
	if err := b.sh("mount -t tmpfs tmpfs " + mnt); err != nil {
		b.skip("snapshot-take-overlay", err.Error())
		b.skip("snapshot-restore-overlay", err.Error())
		return nil
	}
	defer b.sh(fmt.Sprintf("umount -R %s", mnt))
	dir, state, raw := mnt+"/ws", mnt+"/state", mnt+"/raw"
	for _, d := range []string{dir, state, raw + "/lower0", raw + "/upper", raw + "/work", raw + "/merged"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	nbytes, err := b.small.write(dir)
	if err != nil {
		return err
	}
	if _, err := b.small.write(raw + "/lower0"); err != nil {
		return err
	}
	if _, _, err := b.lsSnapshot(state, "prepare", dir); err != nil {
		b.skip("snapshot-take-overlay", err.Error())
		b.skip("snapshot-restore-overlay", err.Error())
		return nil
	}
	defer b.lsSnapshot(state, "unprepare", dir)
	_, first, err := b.lsSnapshot(state, "take", "--quiet", dir)
	if err != nil {
		return err
	}
	first = firstField(first)
	layers := []string{raw + "/lower0"}
	mount := func() error {
		return b.sh(fmt.Sprintf("mount -t overlay overlay -o lowerdir=%s,upperdir=%s/upper,workdir=%s/work %s/merged", strings.Join(layers, ":"), raw, raw, raw))
	}
	if err := mount(); err != nil {
		return err
	}
	defer b.sh("umount " + raw + "/merged")
	size := b.small.describe(nbytes) + ", 10 files appended to each time"
	n := b.o.iters
	load0 := loadAvg()
	ls, gd, err := b.measurePair("snapshot-take-overlay", 1, n, func(i int) (time.Duration, error) {
		if err := b.touch10(dir, i); err != nil {
			return 0, err
		}
		d, _, err := b.lsSnapshot(state, "take", dir)
		return d, err
	}, func(i int) (time.Duration, error) {
		if err := b.touch10(raw+"/merged", i); err != nil {
			return 0, err
		}
		t := time.Now()
		layer := fmt.Sprintf("%s/lower%d", raw, i+1)
		if err := b.sh(fmt.Sprintf("umount %[1]s/merged && mv %[1]s/upper %[2]s && mkdir %[1]s/upper", raw, layer)); err != nil {
			return 0, err
		}
		layers = append([]string{layer}, layers...)
		err := mount()
		return time.Since(t), err
	})
	if err != nil {
		return err
	}
	b.snapRow("snapshot-take-overlay", size, "umount, upper → new lower layer, mount", ls, gd, load0, "< 20 ms")
	load0 = loadAvg()
	ls, gd, err = b.measurePair("snapshot-restore-overlay", 1, n, func(i int) (time.Duration, error) {
		if err := b.touch10(dir, i); err != nil {
			return 0, err
		}
		d, _, err := b.lsSnapshot(state, "restore", dir, first)
		return d, err
	}, func(i int) (time.Duration, error) {
		if err := b.touch10(raw+"/merged", i); err != nil {
			return 0, err
		}
		t := time.Now()
		if err := b.sh(fmt.Sprintf("umount %[1]s/merged && rm -rf %[1]s/upper %[1]s/work && mkdir %[1]s/upper %[1]s/work", raw)); err != nil {
			return 0, err
		}
		err := mount()
		return time.Since(t), err
	})
	if err != nil {
		return err
	}
	b.snapRow("snapshot-restore-overlay", size, "umount, empty upper and work, mount", ls, gd, load0, "< 15 ms")
	return nil
}

func (b *bencher) snapRow(name, size, raw string, ls, gd *dist, load0, abs string) {
	r := b.add(&benchRow{Name: name, Size: size, LS: ls, Git: gd, GitCmd: raw, Target: "≤ 1.5× raw, " + abs})
	r.check(fmt.Sprintf("%.2f× > 1.5×", r.Ratio), r.Ratio <= 1.5)
	var limit float64
	fmt.Sscanf(strings.TrimPrefix(abs, "< "), "%g", &limit)
	r.check(fmt.Sprintf("median %.1f ms ≥ %s", ls.Median, strings.TrimPrefix(abs, "< ")), ls.Median < limit)
	r.note("whole `lockstep snapshot` process beside the raw mechanism (%s), interleaved", raw)
	r.note("min–median–max: lockstep %.1f–%.1f–%.1f ms, raw %.1f–%.1f–%.1f ms; load average %s → %s", ls.Min, ls.Median, ls.Max, gd.Min, gd.Median, gd.Max, load0, loadAvg())
}
