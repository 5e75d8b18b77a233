package fstest

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/lockstep-hq/lockstep/fssnap"
)

// Drivers lists every driver name, fastest first.
var Drivers = []string{fssnap.NameOverlay, fssnap.NameBtrfs, fssnap.NameReflink, fssnap.NameCopy}

// Driver mounts the filesystem that driver name needs, creates the
// workspace directory on it, lets populate fill it, prepares it (overlay)
// and returns the driver, the directory and the options used. The state
// root is on the same filesystem.
func Driver(tb testing.TB, name string, populate func(dir string)) (fssnap.Driver, string, fssnap.Options) {
	tb.Helper()
	var mnt string
	switch name {
	case fssnap.NameBtrfs:
		mnt = Loop(tb, "btrfs", 1<<30)
	case fssnap.NameReflink:
		mnt = Loop(tb, "xfs", 1<<30)
	default:
		mnt = Tmpfs(tb)
	}
	dir := filepath.Join(mnt, "ws")
	if name == fssnap.NameBtrfs {
		if err := fssnap.CreateSubvolume(dir); err != nil {
			tb.Fatal(err)
		}
	} else if err := os.Mkdir(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	if populate != nil {
		populate(dir)
	}
	opts := fssnap.Options{StateRoot: filepath.Join(mnt, "state")}
	drv, err := fssnap.New(name, opts)
	if err != nil {
		tb.Fatal(err)
	}
	if p, ok := drv.(fssnap.Preparer); ok {
		if err := p.Prepare(context.Background(), dir); err != nil {
			tb.Fatal(err)
		}
	}
	got, err := fssnap.Detect(dir, opts)
	if err != nil {
		tb.Fatal(err)
	}
	if got.Name() != name {
		tb.Errorf("Detect(%s) = %s, want %s", dir, got.Name(), name)
	}
	return drv, dir, opts
}
