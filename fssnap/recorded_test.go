package fssnap_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep/fssnap"
	"github.com/lockstep-hq/lockstep/fssnap/internal/fstest"
)

// TestTakeRecordedReusesHashes: the CLI's take builds its manifest from
// the one describing the directory now, so only changed files are read,
// also right after a restore (btrfs keeps inodes, mtimes and ctimes); an
// exact restore is not verified unless asked, and the manifests stay
// right (a verify against each is clean).
func TestTakeRecordedReusesHashes(t *testing.T) {
	fstest.RequireRoot(t)
	ctx := context.Background()
	const files = 40
	drv, dir, opts := fstest.Driver(t, fssnap.NameBtrfs, func(d string) { fstest.GenTree(t, d, files, 500, 3) })
	time.Sleep(30 * time.Millisecond) // past the racy window
	s1, err := fssnap.TakeRecorded(ctx, drv, opts, dir)
	if err != nil {
		t.Fatal(err)
	}
	if s1.Manifest.Hashed < files {
		t.Fatalf("first take hashed %d files, want all %d", s1.Manifest.Hashed, files)
	}
	changed := filepath.Join(dir, "changed.txt")
	if err := os.WriteFile(changed, []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(30 * time.Millisecond)
	s2, err := fssnap.TakeRecorded(ctx, drv, opts, dir)
	if err != nil {
		t.Fatal(err)
	}
	if s2.Manifest.Hashed != 1 {
		t.Fatalf("take after one new file hashed %d files, want 1", s2.Manifest.Hashed)
	}
	_, res, err := fssnap.RestoreRecorded(ctx, drv, opts, dir, s1.ID, false)
	if err != nil || res != nil {
		t.Fatalf("exact restore: residue %v, err %v; want no verify", res, err)
	}
	if _, err := os.Stat(changed); !os.IsNotExist(err) {
		t.Fatalf("restore of %s kept %s", s1.ID, changed)
	}
	s3, err := fssnap.TakeRecorded(ctx, drv, opts, dir)
	if err != nil {
		t.Fatal(err)
	}
	if s3.Manifest.Hashed != 0 {
		t.Fatalf("take right after restoring %s hashed %d files, want 0", s1.ID, s3.Manifest.Hashed)
	}
	for _, id := range []string{s2.ID, s3.ID} {
		_, res, err := fssnap.RestoreRecorded(ctx, drv, opts, dir, id, true)
		if err != nil || res == nil || !res.Clean() {
			t.Fatalf("verified restore of %s: residue %v, err %v", id, res, err)
		}
	}
}

// TestRestoreRecordedVerifiesCopies: the copy driver's restore is not
// exact by construction, so it is always verified.
func TestRestoreRecordedVerifiesCopies(t *testing.T) {
	ctx := context.Background()
	drv, dir, opts := fstest.Driver(t, fssnap.NameCopy, func(d string) { fstest.GenTree(t, d, 20, 300, 4) })
	s, err := fssnap.TakeRecorded(ctx, drv, opts, dir)
	if err != nil {
		t.Fatal(err)
	}
	_, res, err := fssnap.RestoreRecorded(ctx, drv, opts, dir, s.ID, false)
	if err != nil || res == nil || !res.Clean() {
		t.Fatalf("copy restore: residue %v, err %v; want a clean verify", res, err)
	}
}
