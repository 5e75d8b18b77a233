package fssnap

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestWalkPrevSeesEveryChange: a walk that takes unchanged directories'
// names from the previous manifest lists exactly what a full walk lists
// after creations, deletions, renames, a directory replaced by a file
// and a file by a directory, with the previous manifest aged past the
// racy window and taken just before (racy: nothing of it is trusted).
func TestWalkPrevSeesEveryChange(t *testing.T) {
	for _, aged := range []bool{true, false} {
		t.Run(fmt.Sprintf("aged=%v", aged), func(t *testing.T) {
			dir := t.TempDir()
			for i := 0; i < 5; i++ {
				d := filepath.Join(dir, fmt.Sprintf("d%d", i), "sub")
				os.MkdirAll(d, 0o755)
				for j := 0; j < 4; j++ {
					os.WriteFile(filepath.Join(d, fmt.Sprintf("f%d", j)), []byte("x"), 0o644)
				}
				os.Symlink("sub/f0", filepath.Join(dir, fmt.Sprintf("d%d", i), "link"))
			}
			os.WriteFile(filepath.Join(dir, "top"), []byte("t"), 0o644)
			if aged {
				time.Sleep(2 * racyWindow)
			}
			prev, err := BuildManifest(dir, nil)
			if err != nil {
				t.Fatal(err)
			}
			if aged {
				time.Sleep(2 * racyWindow)
				// Unchanged, the shortcut lists the same tree.
				same(t, dir, prev)
			}
			os.WriteFile(filepath.Join(dir, "d0/sub/new"), []byte("n"), 0o644)
			os.Remove(filepath.Join(dir, "d1/sub/f1"))
			os.Rename(filepath.Join(dir, "d2/sub/f2"), filepath.Join(dir, "d3/sub/moved"))
			os.RemoveAll(filepath.Join(dir, "d4/sub"))
			os.WriteFile(filepath.Join(dir, "d4/sub"), []byte("now a file"), 0o644)
			os.Remove(filepath.Join(dir, "top"))
			os.MkdirAll(filepath.Join(dir, "top/inner"), 0o755)
			os.Remove(filepath.Join(dir, "d0/link"))
			os.Symlink("elsewhere", filepath.Join(dir, "d0/link"))
			os.WriteFile(filepath.Join(dir, "d1/sub/f0"), []byte("content only"), 0o644)
			same(t, dir, prev)
		})
	}
}

func same(t *testing.T, dir string, prev *Manifest) {
	t.Helper()
	full, err := walk(dir)
	if err != nil {
		t.Fatal(err)
	}
	got, err := walkPrev(dir, prev)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, full) {
		t.Fatalf("walk with the previous manifest:\n%+v\nfull walk:\n%+v", got, full)
	}
}

// TestVerifyKnownDirs: the verify that takes unchanged directories' names
// from the manifest it compares with reads no directory of an unchanged
// tree, and still reports exactly what Verify reports after every kind of
// change, including an entry created in a directory whose mtime was then
// set back (its ctime still moved) and a same-size in-place rewrite with
// the file's mtime set back.
func TestVerifyKnownDirs(t *testing.T) {
	dir := t.TempDir()
	for i := 0; i < 5; i++ {
		d := filepath.Join(dir, fmt.Sprintf("d%d", i), "sub")
		os.MkdirAll(d, 0o755)
		for j := 0; j < 4; j++ {
			os.WriteFile(filepath.Join(d, fmt.Sprintf("f%d", j)), []byte("x"), 0o644)
		}
	}
	os.WriteFile(filepath.Join(dir, "top"), []byte("t"), 0o644)
	time.Sleep(2 * racyWindow)
	want, err := BuildManifest(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * racyWindow)
	reads := dirReads.Load()
	res, err := VerifyKnownDirs(dir, want)
	if err != nil || !res.Clean() {
		t.Fatalf("unchanged tree: %v %v", err, res)
	}
	if n := dirReads.Load() - reads; n != 0 {
		t.Fatalf("unchanged tree: %d directories read, want none (the manifest's names)", n)
	}

	// An entry made in d0/sub, the directory's times then set back.
	sub := filepath.Join(dir, "d0/sub")
	var st unix.Stat_t
	if err := unix.Lstat(sub, &st); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(sub, "sneaky"), []byte("s"), 0o644)
	if err := unix.UtimesNano(sub, []unix.Timespec{st.Atim, st.Mtim}); err != nil {
		t.Fatal(err)
	}
	// A same-size rewrite of d1/sub/f0, its mtime set back.
	f0 := filepath.Join(dir, "d1/sub/f0")
	fi, _ := os.Lstat(f0)
	os.WriteFile(f0, []byte("y"), 0o644)
	os.Chtimes(f0, fi.ModTime(), fi.ModTime())
	os.Remove(filepath.Join(dir, "d2/sub/f1"))
	os.Chmod(filepath.Join(dir, "d3/sub/f2"), 0o600)
	os.RemoveAll(filepath.Join(dir, "d4/sub"))
	os.WriteFile(filepath.Join(dir, "d4/sub"), []byte("now a file"), 0o644)

	full, err := Verify(dir, want)
	if err != nil {
		t.Fatal(err)
	}
	got, err := VerifyKnownDirs(dir, want)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, full) {
		t.Fatalf("VerifyKnownDirs:\n%+v\nVerify:\n%+v", got, full)
	}
	wantAdded := []string{"d0/sub/sneaky"}
	wantRemoved := []string{"d2/sub/f1", "d4/sub/f0", "d4/sub/f1", "d4/sub/f2", "d4/sub/f3"}
	wantChanged := []Change{{Path: "d1/sub/f0", What: "content"}, {Path: "d3/sub/f2", What: "mode"}, {Path: "d4/sub", What: "type"}}
	if !reflect.DeepEqual(got.Added, wantAdded) || !reflect.DeepEqual(got.Removed, wantRemoved) || !reflect.DeepEqual(got.Changed, wantChanged) {
		t.Fatalf("residue %+v, want added %v removed %v changed %v", got, wantAdded, wantRemoved, wantChanged)
	}
}
