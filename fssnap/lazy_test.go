package fssnap

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestUnprepareDropsStaleSnapshotMount: a process killed while it built a
// lazy manifest from an overlay snapshot leaves the snapshot's read-only
// mount under the data root; Unprepare still turns the directory back
// into a plain one and leaves no mount behind, and the next build works.
func TestUnprepareDropsStaleSnapshotMount(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (mounts)")
	}
	mnt := t.TempDir()
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=64m"); err != nil {
		t.Skipf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH) })
	dir := filepath.Join(mnt, "ws")
	os.Mkdir(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "a.txt"), []byte("a"), 0o644)
	o := &Overlay{base: base{opts: Options{StateRoot: filepath.Join(mnt, "state")}.withDefaults()}}
	ctx := context.Background()
	if err := o.Prepare(ctx, dir); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "b.txt"), []byte("b"), 0o644)
	s, err := o.takeLazy(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	// The killed process: mounted, never released.
	ro, _, err := o.mountSnapshot(s)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(ro, "b.txt")); err != nil {
		t.Fatalf("read-only mount of the snapshot: %v", err)
	}
	mounted := func(p string) bool {
		info, _ := os.ReadFile("/proc/self/mountinfo")
		return strings.Contains(string(info), p+" ")
	}
	if m, err := LoadManifest(o.opts, dir, s.ID); err != nil || len(m.Entries) != 3 {
		t.Fatalf("lazy manifest beside a stale mount: %v", err)
	}
	if mounted(ro) {
		t.Fatalf("the next build left the stale mount %s", ro)
	}
	// Killed again; then the directory is unprepared.
	if ro, _, err = o.mountSnapshot(s); err != nil {
		t.Fatal(err)
	}
	if err := o.Unprepare(ctx, dir); err != nil {
		t.Fatalf("unprepare with a stale snapshot mount: %v", err)
	}
	if mounted(ro) {
		t.Fatalf("%s is still mounted after unprepare", ro)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "b.txt")); err != nil || string(b) != "b" {
		t.Fatalf("b.txt after unprepare: %q, %v", b, err)
	}
}
