package fssnap_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/fssnap"
	"github.com/lockstep-hq/lockstep/fssnap/internal/fstest"
)

// TestOverlayBusy: a process with its cwd inside blocks the umount; Restore
// says so, names the process, and works once it is gone.
func TestOverlayBusy(t *testing.T) {
	ctx := context.Background()
	drv, dir, _ := fstest.Driver(t, fssnap.NameOverlay, func(d string) { fstest.GenTree(t, d, 20, 100, 5) })
	s, err := drv.Take(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "junk"), []byte("j"), 0o644)
	cmd := exec.Command("sleep", "1000")
	cmd.Dir = dir
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	err = drv.Restore(ctx, dir, s.ID)
	if lockstep.ErrorCode(err) != lockstep.EUNAVAILABLE || !strings.Contains(err.Error(), fmt.Sprintf("pid %d (sleep)", cmd.Process.Pid)) {
		t.Errorf("Restore with a busy dir: %v", err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	if err := drv.Restore(ctx, dir, s.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "junk")); !os.IsNotExist(err) {
		t.Fatal("junk survived the restore")
	}
}

// TestOverlayFlatten: stacks deeper than MaxLayers are flattened, and every
// older snapshot still restores exactly.
func TestOverlayFlatten(t *testing.T) {
	ctx := context.Background()
	mnt := fstest.Tmpfs(t)
	dir := filepath.Join(mnt, "ws")
	os.Mkdir(dir, 0o755)
	fstest.GenTree(t, dir, 30, 100, 6)
	opts := fssnap.Options{StateRoot: filepath.Join(mnt, "state"), MaxLayers: 3}
	drv, _ := fssnap.New(fssnap.NameOverlay, opts)
	if err := drv.(fssnap.Preparer).Prepare(ctx, dir); err != nil {
		t.Fatal(err)
	}
	var snaps []fssnap.Snapshot
	var mans []*fssnap.Manifest
	for i := 0; i < 7; i++ {
		os.WriteFile(filepath.Join(dir, fmt.Sprintf("step%d", i)), []byte{byte(i)}, 0o644)
		if i > 0 {
			os.Remove(filepath.Join(dir, fmt.Sprintf("step%d", i-1)))
		}
		s, err := drv.Take(ctx, dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Layers) > 3 {
			t.Fatalf("snapshot %d has %d layers, MaxLayers 3", i, len(s.Layers))
		}
		m, _ := fssnap.BuildManifest(dir, nil)
		snaps, mans = append(snaps, s), append(mans, m)
	}
	for i := len(snaps) - 1; i >= 0; i-- {
		if err := drv.Restore(ctx, dir, snaps[i].ID); err != nil {
			t.Fatal(err)
		}
		got, _ := fssnap.BuildManifest(dir, nil)
		sameTree(t, mans[i], got)
	}
	for _, s := range snaps {
		drv.Drop(dir, s.ID)
	}
	if err := drv.(fssnap.Preparer).Unprepare(ctx, dir); err != nil {
		t.Fatal(err)
	}
	got, _ := fssnap.BuildManifest(dir, nil)
	sameTree(t, mans[0], got)
}
