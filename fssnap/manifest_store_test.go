package fssnap_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/lockstep-hq/lockstep/fssnap"
	"github.com/lockstep-hq/lockstep/fssnap/internal/fstest"
)

// TestManifestOverhead measures the stored manifest of a 2,000-file tree
// against the tree's size (issue 22's target: under 1%). The plain JSON
// manifest is reported beside it for comparison.
func TestManifestOverhead(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tree")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	tree := fstest.GenTree(t, dir, 2000, 8<<10, 22)
	opts := fssnap.Options{StateRoot: filepath.Join(t.TempDir(), "state"), DataRoot: filepath.Join(t.TempDir(), "data")}
	drv, err := fssnap.New(fssnap.NameCopy, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s, err := drv.Take(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := fssnap.BuildManifest(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := fssnap.SaveManifest(opts, dir, s.ID, m); err != nil {
		t.Fatal(err)
	}
	stored, err := fssnap.ManifestBytes(opts, dir, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	plain, _ := json.Marshal(m)
	ratio := float64(stored) / float64(tree.Bytes)
	t.Logf("tree %d files, %d bytes; manifest JSON %d bytes (%.2f%%), stored %d bytes (%.2f%%)",
		tree.Files, tree.Bytes, len(plain), 100*float64(len(plain))/float64(tree.Bytes), stored, 100*ratio)
	if ratio >= 0.01 {
		t.Fatalf("stored manifest is %.2f%% of the tree, want < 1%%", 100*ratio)
	}
	// It reads back whole.
	got, err := fssnap.LoadManifest(opts, dir, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Entries) != len(m.Entries) || got.Entries[len(m.Entries)-1] != m.Entries[len(m.Entries)-1] {
		t.Fatalf("manifest read back with %d entries, want %d", len(got.Entries), len(m.Entries))
	}
}

// TestManifestReadsOldUncompressed: a manifest stored before compression
// (plain <id>.manifest.json) is still read, and dropping the snapshot
// removes it. (The previous compressed JSON form: TestManifestReadsOldZstdJSON.)
func TestManifestReadsOldUncompressed(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tree")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	fstest.GenTree(t, dir, 20, 100, 1)
	state := filepath.Join(t.TempDir(), "state")
	opts := fssnap.Options{StateRoot: state, DataRoot: filepath.Join(t.TempDir(), "data")}
	drv, err := fssnap.New(fssnap.NameCopy, opts)
	if err != nil {
		t.Fatal(err)
	}
	s, err := drv.Take(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := fssnap.BuildManifest(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := fssnap.SaveManifest(opts, dir, s.ID, m); err != nil {
		t.Fatal(err)
	}
	// Rewrite it as an old server would have: plain JSON, no .bin.
	var zst string
	filepath.WalkDir(state, func(p string, d os.DirEntry, err error) error {
		if err == nil && filepath.Base(p) == s.ID+".manifest.bin" {
			zst = p
		}
		return nil
	})
	if zst == "" {
		t.Fatal("no binary manifest stored")
	}
	plain, _ := json.Marshal(m)
	old := zst[:len(zst)-len(".bin")] + ".json"
	if err := os.WriteFile(old, plain, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(zst); err != nil {
		t.Fatal(err)
	}
	got, err := fssnap.LoadManifest(opts, dir, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Entries) != len(m.Entries) {
		t.Fatalf("old manifest read with %d entries, want %d", len(got.Entries), len(m.Entries))
	}
	if n, err := fssnap.ManifestBytes(opts, dir, s.ID); err != nil || n != int64(len(plain)) {
		t.Fatalf("ManifestBytes of the old manifest = %d, %v; want %d", n, err, len(plain))
	}
	if err := drv.Drop(dir, s.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Fatalf("old manifest left after drop: %v", err)
	}
}
