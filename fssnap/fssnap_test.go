package fssnap_test

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/lockstep-hq/lockstep/fssnap"
	"github.com/lockstep-hq/lockstep/fssnap/internal/fstest"
)

// sameTree compares two manifests on everything but inode and ctime.
func sameTree(t *testing.T, want, got *fssnap.Manifest) {
	t.Helper()
	strip := func(m *fssnap.Manifest) map[string]fssnap.Entry {
		out := map[string]fssnap.Entry{}
		for _, e := range m.Entries {
			e.Ino, e.CtimeNs = 0, 0
			if e.Type == fssnap.TypeDir || e.Type == fssnap.TypeSymlink {
				e.MtimeNs = 0
			}
			out[e.Path] = e
		}
		return out
	}
	w, g := strip(want), strip(got)
	if reflect.DeepEqual(w, g) {
		return
	}
	n := 0
	for p, we := range w {
		if ge, ok := g[p]; !ok {
			t.Errorf("missing %s", p)
			n++
		} else if ge != we {
			t.Errorf("differs %s:\n want %+v\n got  %+v", p, we, ge)
			n++
		}
		if n > 10 {
			return
		}
	}
	for p := range g {
		if _, ok := w[p]; !ok {
			t.Errorf("extra %s", p)
		}
	}
}

func mutate(t *testing.T, dir string) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(dir, "new.txt"), []byte("new"), 0o644))
	must(os.MkdirAll(filepath.Join(dir, "newdir/sub"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "newdir/sub/x"), []byte("x"), 0o600))
	must(os.WriteFile(filepath.Join(dir, "f00001.txt"), []byte("changed"), 0o644))
	must(os.Remove(filepath.Join(dir, "f00002.txt")))
	must(os.Chmod(filepath.Join(dir, "f00004.txt"), 0o700))
	must(os.RemoveAll(filepath.Join(dir, "d000")))
	must(os.Symlink("nowhere", filepath.Join(dir, "dangling")))
	must(os.Chmod(dir, 0o700))
}

func populate(t *testing.T) func(string) {
	return func(dir string) {
		os.Mkdir(filepath.Join(dir, "d000"), 0o755)
		os.WriteFile(filepath.Join(dir, "d000", "inner"), []byte("inner"), 0o644)
		for i := 0; i < 6; i++ {
			os.WriteFile(filepath.Join(dir, "f0000"+string(rune('0'+i))+".txt"), []byte("content"), 0o644)
		}
		fstest.GenTree(t, dir, 200, 2000, 1)
	}
}

func TestDrivers(t *testing.T) {
	for _, name := range fstest.Drivers {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			drv, dir, opts := fstest.Driver(t, name, populate(t))
			s1, err := drv.Take(ctx, dir)
			if err != nil {
				t.Fatal(err)
			}
			m1, err := fssnap.BuildManifest(dir, nil)
			if err != nil {
				t.Fatal(err)
			}
			mutate(t, dir)
			res, err := fssnap.Verify(dir, m1)
			if err != nil {
				t.Fatal(err)
			}
			if res.Clean() {
				t.Fatal("Verify after mutation: clean, want residue")
			}
			t.Logf("residue after mutation: %s %+v", res, res)
			s2, err := drv.Take(ctx, dir)
			if err != nil {
				t.Fatal(err)
			}
			m2, _ := fssnap.BuildManifest(dir, nil)
			os.WriteFile(filepath.Join(dir, "third"), []byte("3"), 0o644)

			if err := drv.Restore(ctx, dir, s1.ID); err != nil {
				t.Fatal(err)
			}
			res, err = fssnap.Verify(dir, m1)
			if err != nil || !res.Clean() {
				t.Fatalf("Verify after restore s1: %v %+v", err, res)
			}
			t.Logf("verify after restore hashed %d files", res.Hashed)
			full, _ := fssnap.BuildManifest(dir, nil)
			sameTree(t, m1, full)

			if err := drv.Restore(ctx, dir, s2.ID); err != nil {
				t.Fatal(err)
			}
			full, _ = fssnap.BuildManifest(dir, nil)
			sameTree(t, m2, full)

			list, err := drv.List(dir)
			if err != nil || len(list) != 2 || list[0].ID != s1.ID {
				t.Fatalf("List = %+v, %v", list, err)
			}
			if err := drv.Drop(dir, s2.ID); err != nil {
				t.Fatal(err)
			}
			if err := drv.Restore(ctx, dir, s2.ID); err == nil {
				t.Fatal("restore of dropped snapshot succeeded")
			}
			if err := drv.Restore(ctx, dir, s1.ID); err != nil {
				t.Fatal(err)
			}
			full, _ = fssnap.BuildManifest(dir, nil)
			sameTree(t, m1, full)
			if err := drv.Drop(dir, s1.ID); err != nil {
				t.Fatal(err)
			}
			if p, ok := drv.(fssnap.Preparer); ok {
				if err := p.Unprepare(ctx, dir); err != nil {
					t.Fatal(err)
				}
				full, _ = fssnap.BuildManifest(dir, nil)
				sameTree(t, m1, full)
			}
			_ = opts
		})
	}
}
