// Package fstest mounts real filesystems for the fssnap tests: tmpfs and
// loop-mounted btrfs, XFS and ext4 images, each unmounted (and its loop
// device detached) in t.Cleanup. Without root or mount permission the test
// is skipped with the reason.
package fstest

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// RequireRoot skips tb unless it runs as root.
func RequireRoot(tb testing.TB) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root to mount filesystems")
	}
}

// Tmpfs mounts a fresh tmpfs and returns its path.
func Tmpfs(tb testing.TB) string {
	tb.Helper()
	RequireRoot(tb)
	dir := tb.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=2g"); err != nil {
		tb.Skipf("mount tmpfs: %v (mounting not permitted here)", err)
	}
	tb.Cleanup(func() { umount(tb, dir) })
	return dir
}

// Loop creates an image file of size bytes on a tmpfs, formats it with
// fstype ("btrfs", "xfs", "ext4") and mounts it; it returns the mount point.
func Loop(tb testing.TB, fstype string, size int64) string {
	tb.Helper()
	RequireRoot(tb)
	mkfs, err := exec.LookPath("mkfs." + fstype)
	if err != nil {
		tb.Skipf("mkfs.%s not installed (Debian: %s)", fstype, map[string]string{"btrfs": "btrfs-progs", "xfs": "xfsprogs", "ext4": "e2fsprogs"}[fstype])
	}
	store := Tmpfs(tb)
	img := filepath.Join(store, fstype+".img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		tb.Fatal(err)
	}
	if err := os.Truncate(img, size); err != nil {
		tb.Fatal(err)
	}
	args := []string{"-q", img}
	if fstype == "btrfs" || fstype == "xfs" {
		args = []string{"-q", "-f", img}
	}
	if out, err := exec.Command(mkfs, args...).CombinedOutput(); err != nil {
		tb.Fatalf("mkfs.%s: %v: %s", fstype, err, out)
	}
	mnt := filepath.Join(tb.TempDir(), "mnt")
	os.Mkdir(mnt, 0o755)
	if out, err := exec.Command("mount", "-o", "loop", img, mnt).CombinedOutput(); err != nil {
		tb.Skipf("mount -o loop %s: %v: %s (loop devices not permitted here)", fstype, err, out)
	}
	tb.Cleanup(func() {
		dev := loopOf(mnt)
		umount(tb, mnt)
		if dev != "" {
			exec.Command("losetup", "-d", dev).Run() // autoclear usually did it already
			// The kernel releases a loop device's backing file
			// asynchronously after the last close; until it has, the
			// tmpfs holding the image (unmounted next) is busy.
			waitLoopReleased(dev, img)
		}
	})
	return mnt
}

func loopOf(mnt string) string {
	data, _ := os.ReadFile("/proc/self/mounts")
	for _, l := range strings.Split(string(data), "\n") {
		f := strings.Fields(l)
		if len(f) > 1 && f[1] == mnt && strings.HasPrefix(f[0], "/dev/loop") {
			return f[0]
		}
	}
	return ""
}

// waitLoopReleased waits (up to 30 s, a hang guard) until the loop device
// dev no longer holds img open.
func waitLoopReleased(dev, img string) {
	backing := "/sys/block/" + filepath.Base(dev) + "/loop/backing_file"
	for i := 0; i < 3000; i++ {
		b, err := os.ReadFile(backing)
		if err != nil || strings.TrimSpace(string(b)) != img {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// umount unmounts everything at or below dir, deepest first.
func umount(tb testing.TB, dir string) {
	data, _ := os.ReadFile("/proc/self/mounts")
	var below []string
	for _, l := range strings.Split(string(data), "\n") {
		f := strings.Fields(l)
		if len(f) > 1 && (f[1] == dir || strings.HasPrefix(f[1], dir+"/")) {
			below = append(below, f[1])
		}
	}
	for i := len(below) - 1; i >= 0; i-- {
		err := unix.Unmount(below[i], 0)
		if err == unix.EBUSY {
			// A failed test left processes inside: they are the test's
			// own; kill them so that no mount or loop device outlives it.
			if n := killHolders(below[i]); n > 0 {
				tb.Errorf("killed %d processes still using %s", n, below[i])
			}
			// A loop device's backing file or a killed process is
			// released asynchronously; on a loaded machine that takes
			// more than a second. 30 s is a hang guard, not a budget.
			for try := 0; try < 3000 && err == unix.EBUSY; try++ {
				time.Sleep(10 * time.Millisecond)
				err = unix.Unmount(below[i], 0)
			}
		}
		if err == unix.EBUSY {
			// Still busy: detach it from the namespace (freed by the
			// kernel once its last user is gone), so nothing stays
			// visible; the test's own result is not the mount's.
			if derr := unix.Unmount(below[i], unix.MNT_DETACH); derr == nil {
				tb.Logf("umount %s: busy after 30 s; detached lazily", below[i])
				continue
			}
		}
		if err != nil {
			tb.Errorf("umount %s: %v", below[i], err)
			unix.Unmount(below[i], unix.MNT_DETACH)
		}
	}
}

// killHolders SIGKILLs processes whose cwd, root or open files are under dir.
func killHolders(dir string) int {
	under := func(p string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }
	procs, _ := os.ReadDir("/proc")
	n := 0
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		base := "/proc/" + p.Name()
		hit := false
		for _, l := range []string{"cwd", "root"} {
			if t, err := os.Readlink(base + "/" + l); err == nil && under(t) {
				hit = true
			}
		}
		fds, _ := os.ReadDir(base + "/fd")
		for _, fd := range fds {
			if t, err := os.Readlink(base + "/fd/" + fd.Name()); err == nil && under(t) {
				hit = true
			}
		}
		if hit {
			unix.Kill(pid, unix.SIGKILL)
			n++
		}
	}
	return n
}

// Tree describes a generated tree.
type Tree struct {
	Files, Dirs int
	Bytes       int64
}

// GenTree writes a deterministic tree of files in dirs (about 5 files per
// directory, 3 levels deep), with some symlinks, executable and read-only
// files. avgSize is the mean file size.
func GenTree(tb testing.TB, root string, files int, avgSize int, seed uint64) Tree {
	tb.Helper()
	r := rand.New(rand.NewPCG(seed, 0x10c))
	var t Tree
	dirs := []string{"."}
	buf := make([]byte, avgSize*2+1)
	for i := range buf {
		buf[i] = byte('a' + i%26)
	}
	for i := 0; i < files; i++ {
		if i%5 == 0 {
			parent := dirs[r.IntN(len(dirs))]
			if strings.Count(parent, "/") >= 3 {
				parent = "."
			}
			d := filepath.Join(parent, fmt.Sprintf("d%03d", len(dirs)))
			if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
				tb.Fatal(err)
			}
			dirs = append(dirs, d)
			t.Dirs++
		}
		d := dirs[r.IntN(len(dirs))]
		p := filepath.Join(root, d, fmt.Sprintf("f%05d.txt", i))
		n := r.IntN(avgSize*2 + 1)
		copy(buf, fmt.Sprintf("file %d seed %d\n", i, seed))
		mode := os.FileMode(0o644)
		switch i % 17 {
		case 3:
			mode = 0o755
		case 7:
			mode = 0o444
		}
		if err := os.WriteFile(p, buf[:n], mode); err != nil {
			tb.Fatal(err)
		}
		os.Chmod(p, mode)
		t.Files++
		t.Bytes += int64(n)
		if i%23 == 0 {
			if err := os.Symlink(filepath.Base(p), p+".link"); err != nil {
				tb.Fatal(err)
			}
		}
	}
	return t
}
