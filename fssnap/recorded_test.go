package fssnap_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep/fssnap"
	"github.com/lockstep-hq/lockstep/fssnap/internal/fstest"
)

// TestTakeRecordedLazyManifest: on btrfs and overlay the CLI's take
// writes no manifest (it was a walk of the whole tree); the manifest is
// built from the read-only snapshot when first asked for, so it describes
// the snapshot, not the directory: a file rewritten (same size), one
// added and one removed in the directory after the take do not leak into
// it. Its racy reference is the snapshot's time; it reuses the hashes of
// the previous snapshot's manifest; `restore --verify` builds it and
// proves the restore, also for a snapshot whose manifest was never asked
// for before.
func TestTakeRecordedLazyManifest(t *testing.T) {
	fstest.RequireRoot(t)
	for _, name := range []string{fssnap.NameBtrfs, fssnap.NameOverlay} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			const files = 40
			drv, dir, opts := fstest.Driver(t, name, func(d string) { fstest.GenTree(t, d, files, 500, 3) })
			keep := filepath.Join(dir, "keep.txt")
			if err := os.WriteFile(keep, []byte("before the take\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			time.Sleep(30 * time.Millisecond) // ctimes past the racy window of the snapshot
			s1, err := fssnap.TakeRecorded(ctx, drv, opts, dir)
			if err != nil {
				t.Fatal(err)
			}
			if !s1.LazyManifest || s1.Manifest != nil {
				t.Fatalf("take: lazy %v, manifest %v; want a lazy snapshot without a manifest", s1.LazyManifest, s1.Manifest != nil)
			}
			if n, err := fssnap.ManifestBytes(opts, dir, s1.ID); err == nil {
				t.Fatalf("take stored a manifest (%d bytes); want none until asked for", n)
			}
			// The directory changes after the take.
			if err := os.WriteFile(keep, []byte("after  the take\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "added.txt"), []byte("new"), 0o644); err != nil {
				t.Fatal(err)
			}
			m1, err := fssnap.LoadManifest(opts, dir, s1.ID)
			if err != nil {
				t.Fatal(err)
			}
			if !m1.CreatedAt.Equal(s1.CreatedAt) {
				t.Fatalf("manifest's racy reference %v, want the snapshot's time %v", m1.CreatedAt, s1.CreatedAt)
			}
			if m1.Hashed != files+1 {
				t.Fatalf("first manifest hashed %d files, want all %d", m1.Hashed, files+1)
			}
			e, ok := m1.Lookup("keep.txt")
			if want := sha256.Sum256([]byte("before the take\n")); !ok || e.Hash != hex.EncodeToString(want[:]) {
				t.Fatalf("keep.txt in the snapshot's manifest: %+v (found %v); want the content at the take", e, ok)
			}
			if _, ok := m1.Lookup("added.txt"); ok {
				t.Fatal("a file added after the take is in the snapshot's manifest")
			}
			if n, err := fssnap.ManifestBytes(opts, dir, s1.ID); err != nil || n == 0 {
				t.Fatalf("manifest not stored after it was built: %d bytes, %v", n, err)
			}
			if again, err := fssnap.LoadManifest(opts, dir, s1.ID); err != nil || again.Hashed != 0 || len(again.Entries) != len(m1.Entries) {
				t.Fatalf("second load: %v; want the stored manifest", err)
			}

			// A second snapshot: its manifest reuses the first one's hashes.
			time.Sleep(30 * time.Millisecond)
			s2, err := fssnap.TakeRecorded(ctx, drv, opts, dir)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(filepath.Join(dir, "added.txt")); err != nil {
				t.Fatal(err)
			}
			m2, err := fssnap.LoadManifest(opts, dir, s2.ID)
			if err != nil {
				t.Fatal(err)
			}
			if m2.Hashed != 2 {
				t.Fatalf("second manifest hashed %d files, want 2 (keep.txt, added.txt)", m2.Hashed)
			}
			if _, ok := m2.Lookup("added.txt"); !ok {
				t.Fatal("a file removed after the take is missing from the snapshot's manifest")
			}

			// Verified restores: a fresh lazy snapshot (never loaded) and both.
			os.WriteFile(keep, []byte("third\n"), 0o644)
			s3, err := fssnap.TakeRecorded(ctx, drv, opts, dir)
			if err != nil {
				t.Fatal(err)
			}
			os.WriteFile(keep, []byte("fourth\n"), 0o644)
			m3, err := fssnap.LoadManifest(opts, dir, s3.ID)
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := m3.Lookup("added.txt"); ok { // overlay: a whiteout in the top layer
				t.Fatal("a file removed before the take is in the snapshot's manifest")
			}
			if e, _ := m3.Lookup("keep.txt"); e.Size != int64(len("third\n")) {
				t.Fatalf("keep.txt in the third manifest: %+v", e)
			}
			os.WriteFile(keep, []byte("fifth\n"), 0o644)
			s4, err := fssnap.TakeRecorded(ctx, drv, opts, dir) // its manifest never asked for
			if err != nil {
				t.Fatal(err)
			}
			os.WriteFile(keep, []byte("sixth\n"), 0o644)
			for _, s := range []fssnap.Snapshot{s4, s3, s1, s2} {
				_, res, err := fssnap.RestoreRecorded(ctx, drv, opts, dir, s.ID, true)
				if err != nil || res == nil || !res.Clean() {
					t.Fatalf("verified restore of %s: residue %v, err %v", s.ID, res, err)
				}
			}
			if b, _ := os.ReadFile(keep); string(b) != "after  the take\n" {
				t.Fatalf("keep.txt after restoring %s: %q", s2.ID, b)
			}
			_, res, err := fssnap.RestoreRecorded(ctx, drv, opts, dir, s1.ID, false)
			if err != nil || res != nil {
				t.Fatalf("exact restore: residue %v, err %v; want no verify", res, err)
			}
			if b, _ := os.ReadFile(keep); string(b) != "before the take\n" {
				t.Fatalf("keep.txt after restoring %s: %q", s1.ID, b)
			}
		})
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
