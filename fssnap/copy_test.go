package fssnap_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep/fssnap"
	"github.com/lockstep-hq/lockstep/fssnap/internal/fstest"
)

func copyDriver(t *testing.T) (fssnap.Driver, string, fssnap.Options) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tree")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	fstest.GenTree(t, dir, 100, 500, 5)
	opts := fssnap.Options{StateRoot: filepath.Join(t.TempDir(), "state")}
	drv, err := fssnap.New(fssnap.NameCopy, opts)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(30 * time.Millisecond) // past the racy window
	return drv, dir, opts
}

func objectsOf(t *testing.T, s fssnap.Snapshot) map[string]bool {
	t.Helper()
	if s.Objects == "" {
		t.Fatalf("snapshot %s has no object store", s.ID)
	}
	ents, err := os.ReadDir(s.Objects)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, e := range ents {
		out[e.Name()] = true
	}
	return out
}

func firstFile(t *testing.T, m *fssnap.Manifest) string {
	t.Helper()
	for _, e := range m.Entries {
		if e.Type == fssnap.TypeFile {
			return e.Path
		}
	}
	t.Fatal("no file")
	return ""
}

// TestCopyTakeFollowsChanges: a copy take after a small change reads and
// stores only the changed files (the others keep the previous snapshot's
// hash and object), and both snapshots restore exactly; dropping one
// removes only the objects no other snapshot names.
func TestCopyTakeFollowsChanges(t *testing.T) {
	ctx := context.Background()
	drv, dir, _ := copyDriver(t)
	s1, err := drv.Take(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	files, _ := s1.Manifest.Files()
	if s1.Manifest.Hashed != files {
		t.Fatalf("first take hashed %d of %d files", s1.Manifest.Hashed, files)
	}
	m1 := s1.Manifest
	f := firstFile(t, m1)
	if err := os.WriteFile(filepath.Join(dir, f), []byte("changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "added.txt"), []byte("added\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(30 * time.Millisecond)
	s2, err := drv.Take(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if s2.Manifest.Hashed != 2 {
		t.Fatalf("second take hashed %d files, want 2 (the changed and the added one)", s2.Manifest.Hashed)
	}
	if n := len(objectsOf(t, s2)); n != len(objectsOf(t, s1)) || n < 3 {
		t.Fatalf("object count %d", n)
	}
	os.RemoveAll(filepath.Join(dir, filepath.Dir(f)))
	if err := drv.Restore(ctx, dir, s1.ID); err != nil {
		t.Fatal(err)
	}
	full, _ := fssnap.BuildManifest(dir, nil)
	sameTree(t, m1, full)
	if err := drv.Restore(ctx, dir, s2.ID); err != nil {
		t.Fatal(err)
	}
	full, _ = fssnap.BuildManifest(dir, nil)
	sameTree(t, s2.Manifest, full)

	// Dropping s1 removes the old content of f only.
	old, _ := m1.Lookup(f)
	if err := drv.Drop(dir, s1.ID); err != nil {
		t.Fatal(err)
	}
	objs := objectsOf(t, s2)
	if objs[old.Hash] {
		t.Fatal("object of the dropped snapshot's version of the file kept")
	}
	for _, e := range s2.Manifest.Entries {
		if e.Type == fssnap.TypeFile && !objs[e.Hash] {
			t.Fatalf("object of %s (still named by %s) removed", e.Path, s2.ID)
		}
	}
	if err := drv.Drop(dir, s2.ID); err != nil {
		t.Fatal(err)
	}
	if n := len(objectsOf(t, s2)); n != 0 {
		t.Fatalf("%d objects left after every snapshot was dropped", n)
	}
}

// TestCopySameSizeAndMtime: a file rewritten in place with its size and
// mtime put back (only its ctime moves) is stored again and restored to
// its snapshot content, as with the earlier copy tree: the snapshot never
// shares an inode with the directory.
func TestCopySameSizeAndMtime(t *testing.T) {
	ctx := context.Background()
	drv, dir, _ := copyDriver(t)
	s1, err := drv.Take(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(dir, firstFile(t, s1.Manifest))
	before, _ := os.ReadFile(f)
	fi, _ := os.Stat(f)
	rewrite := func() {
		t.Helper()
		w, err := os.OpenFile(f, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.WriteAt([]byte("X"), 0); err != nil {
			t.Fatal(err)
		}
		w.Close()
		if err := os.Chtimes(f, fi.ModTime(), fi.ModTime()); err != nil {
			t.Fatal(err)
		}
	}
	rewrite()
	time.Sleep(30 * time.Millisecond)
	s2, err := drv.Take(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if s2.Manifest.Hashed != 1 {
		t.Fatalf("take hashed %d files, want the rewritten one", s2.Manifest.Hashed)
	}
	if err := drv.Restore(ctx, dir, s1.ID); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(f); string(got) != string(before) {
		t.Fatalf("restored content %q, want %q", got, before)
	}
	// The same in-place rewrite after a restore: the stored object is
	// not the file, so s1 still restores.
	rewrite()
	if err := drv.Restore(ctx, dir, s1.ID); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(f); string(got) != string(before) {
		t.Fatalf("second restore: content %q, want %q", got, before)
	}
}

// TestCopyDamagedPreviousManifest: when the previous snapshot's manifest
// is damaged, a take stores every file again (it trusts no hash) and
// restores exactly; a restore to the damaged snapshot is refused.
func TestCopyDamagedPreviousManifest(t *testing.T) {
	ctx := context.Background()
	drv, dir, opts := copyDriver(t)
	s1, err := drv.Take(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	var stored string
	filepath.WalkDir(opts.StateRoot, func(p string, d os.DirEntry, err error) error {
		if err == nil && filepath.Base(p) == s1.ID+".manifest.bin" {
			stored = p
		}
		return nil
	})
	if err := os.WriteFile(stored, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	s2, err := drv.Take(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := s2.Manifest.Files(); s2.Manifest.Hashed != n {
		t.Fatalf("take after a damaged manifest hashed %d of %d files", s2.Manifest.Hashed, n)
	}
	if err := drv.Restore(ctx, dir, s1.ID); err == nil {
		t.Fatal("restore to a snapshot with a damaged manifest succeeded")
	}
	os.WriteFile(filepath.Join(dir, firstFile(t, s2.Manifest)), []byte("oops"), 0o644)
	if err := drv.Restore(ctx, dir, s2.ID); err != nil {
		t.Fatal(err)
	}
	full, _ := fssnap.BuildManifest(dir, nil)
	sameTree(t, s2.Manifest, full)
	// Dropping s1 (manifest unreadable) keeps what s2 names.
	if err := drv.Drop(dir, s1.ID); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, firstFile(t, s2.Manifest)), []byte("oops"), 0o644)
	if err := drv.Restore(ctx, dir, s2.ID); err != nil {
		t.Fatal(err)
	}
	full, _ = fssnap.BuildManifest(dir, nil)
	sameTree(t, s2.Manifest, full)
}

// TestCopyRestoresTreeSnapshot: a snapshot of an earlier version (a copy
// tree at Path, no object store) still restores and drops, and the next
// take stores every file (no objects to reuse).
func TestCopyRestoresTreeSnapshot(t *testing.T) {
	ctx := context.Background()
	drv, dir, opts := copyDriver(t)
	s0, err := drv.Take(ctx, dir) // lays out the state directories
	if err != nil {
		t.Fatal(err)
	}
	// Turn it into an old-style record: a copy tree, no objects.
	tree := filepath.Join(filepath.Dir(s0.Objects), "oldtree")
	if out, err := exec.Command("cp", "-a", dir, tree).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	var rec map[string]any
	var recPath string
	filepath.WalkDir(opts.StateRoot, func(p string, d os.DirEntry, err error) error {
		if err == nil && filepath.Base(p) == s0.ID+".json" {
			recPath = p
		}
		return nil
	})
	data, _ := os.ReadFile(recPath)
	json.Unmarshal(data, &rec)
	delete(rec, "objects")
	rec["path"] = tree
	data, _ = json.Marshal(rec)
	os.WriteFile(recPath, data, 0o600)
	os.RemoveAll(s0.Objects)

	f := filepath.Join(dir, firstFile(t, s0.Manifest))
	os.WriteFile(f, []byte("changed"), 0o644)
	if err := drv.Restore(ctx, dir, s0.ID); err != nil {
		t.Fatal(err)
	}
	full, _ := fssnap.BuildManifest(dir, nil)
	sameTree(t, s0.Manifest, full)
	s1, err := drv.Take(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := s1.Manifest.Files(); s1.Manifest.Hashed != n {
		t.Fatalf("take after a tree snapshot hashed %d of %d files", s1.Manifest.Hashed, n)
	}
	if err := drv.Drop(dir, s0.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(tree); !os.IsNotExist(err) {
		t.Fatalf("old copy tree left after drop: %v", err)
	}
	os.WriteFile(f, []byte("changed"), 0o644)
	if err := drv.Restore(ctx, dir, s1.ID); err != nil {
		t.Fatal(err)
	}
	full, _ = fssnap.BuildManifest(dir, nil)
	sameTree(t, s1.Manifest, full)
}

// TestCopyRestoreResidue: a restore given the comparison already made
// (a failed run's forensics) repairs exactly what it names; a stale,
// empty one repairs nothing, which the caller's verify then reports.
func TestCopyRestoreResidue(t *testing.T) {
	ctx := context.Background()
	drv, dir, _ := copyDriver(t)
	s, err := drv.Take(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(dir, firstFile(t, s.Manifest))
	os.WriteFile(f, []byte("damaged"), 0o644)
	os.WriteFile(filepath.Join(dir, "extra"), []byte("x"), 0o644)
	rr := drv.(fssnap.ResidueRestorer)
	if err := rr.RestoreResidue(ctx, dir, s.ID, s.Manifest, fssnap.Residue{}); err != nil {
		t.Fatal(err)
	}
	if res, _ := fssnap.Verify(dir, s.Manifest); res.Clean() {
		t.Fatal("an empty residue repaired something")
	}
	res, err := fssnap.Verify(dir, s.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	if err := rr.RestoreResidue(ctx, dir, s.ID, s.Manifest, res); err != nil {
		t.Fatal(err)
	}
	full, _ := fssnap.BuildManifest(dir, nil)
	sameTree(t, s.Manifest, full)
}
