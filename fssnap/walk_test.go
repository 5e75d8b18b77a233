package fssnap

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
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
