package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lockstep-hq/lockstep/fssnap"
	"github.com/lockstep-hq/lockstep/worktree"
)

// TestSnapshotRestoreKeepsStatCache: a btrfs restore makes the directory
// a new subvolume (a new st_dev, the same inodes and times); the push
// stat cache used to miss on every file after it, so the next push hashed
// the whole tree. `lockstep snapshot restore` now moves the cache to the
// new device: a scan right after the restore reads nothing. The restore
// is not verified (btrfs restores exactly) unless --verify.
func TestSnapshotRestoreKeepsStatCache(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a btrfs image")
	}
	if _, err := exec.LookPath("mkfs.btrfs"); err != nil {
		t.Skip("mkfs.btrfs not installed (Debian: btrfs-progs)")
	}
	t.Setenv("XDG_CACHE_HOME", t.TempDir()) // the stat cache's home
	tmp := t.TempDir()
	img, mnt := filepath.Join(tmp, "img"), filepath.Join(tmp, "mnt")
	for _, c := range [][]string{{"truncate", "-s", "256M", img}, {"mkfs.btrfs", "-q", img}, {"mkdir", mnt}, {"mount", "-o", "loop", img, mnt}} {
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			t.Skipf("%v: %v %s", c, err, out)
		}
	}
	t.Cleanup(func() { exec.Command("umount", "-l", mnt).Run() })
	dir := filepath.Join(mnt, "ws")
	if err := fssnap.CreateSubvolume(dir); err != nil {
		t.Fatal(err)
	}
	const files = 30
	old := time.Now().Add(-time.Hour)
	for i := range files {
		p := filepath.Join(dir, fmt.Sprintf("d%d", i%3), fmt.Sprintf("f%d.txt", i))
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(fmt.Sprintf("file %d\n", i)), 0o644); err != nil {
			t.Fatal(err)
		}
		os.Chtimes(p, old, old)
	}
	time.Sleep(30 * time.Millisecond) // ctimes past the racy window of the snapshot
	env := map[string]string{"LOCKSTEP_SNAPSHOT_STATE": filepath.Join(mnt, "state"), "LOCKSTEP_SNAPSHOT_DRIVER": "btrfs"}
	out, errb, err := runCLI(t, env, "snapshot", "take", dir, "--quiet")
	if err != nil {
		t.Fatalf("take: %v %s", err, errb)
	}
	id := out[:len(out)-1]
	time.Sleep(30 * time.Millisecond)

	// What a push leaves: the stat cache of the tree as it is.
	cachePath := statCachePath(dir)
	os.MkdirAll(filepath.Dir(cachePath), 0o700)
	c, err := worktree.OpenStatCache(cachePath)
	if err != nil {
		t.Fatal(err)
	}
	if s, err := worktree.Scan(dir, worktree.ScanOptions{Cache: c}); err != nil || s.Hashed != files {
		t.Fatalf("first scan: %v, err %v; want %d hashed", s, err, files)
	}
	if err := c.Save(); err != nil {
		t.Fatal(err)
	}
	var before, after unix.Stat_t
	unix.Stat(dir, &before)
	out, errb, err = runCLI(t, env, "snapshot", "restore", dir, id, "--json")
	if err != nil {
		t.Fatalf("restore: %v %s", err, errb)
	}
	var res struct {
		Verified bool `json:"verified"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Verified {
		t.Fatalf("restore output %s: want verified false (btrfs restores exactly)", out)
	}
	unix.Stat(dir, &after)
	if before.Dev == after.Dev {
		t.Fatalf("restore kept st_dev %d: the test does not exercise a new subvolume", after.Dev)
	}
	c, err = worktree.OpenStatCache(cachePath)
	if err != nil {
		t.Fatal(err)
	}
	s, err := worktree.Scan(dir, worktree.ScanOptions{Cache: c})
	if err != nil || s.Hashed != 0 {
		t.Fatalf("scan after restore hashed %d files (err %v), want 0", s.Hashed, err)
	}
	out, errb, err = runCLI(t, env, "snapshot", "restore", dir, id, "--json", "--verify")
	if err != nil {
		t.Fatalf("restore --verify: %v %s", err, errb)
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || !res.Verified {
		t.Fatalf("restore --verify output %s: want verified true", out)
	}
}
