package merge

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/storage/filesystem"
)

// renameBenchRepo is the 20,000-file repository of benchRepo with
// branches ours (100 files moved to another directory, 50 of them also
// edited) and theirs (the same 100 files edited at their old paths, and 10
// others). git merges it cleanly by following the renames.
func renameBenchRepo(b *testing.B) (dir string, ours, theirs plumbing.Hash) {
	b.Helper()
	root := "/dev/shm"
	if _, err := os.Stat(root); err != nil {
		root = os.TempDir()
	}
	dir = filepath.Join(root, "lockstep-merge-bench-renames-v1")
	if _, err := os.Stat(filepath.Join(dir, "ready")); err != nil {
		os.RemoveAll(dir)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		content := func(d, s, f int, edit map[int]string) []byte {
			var buf bytes.Buffer
			for k := 0; k < 30; k++ {
				if e, ok := edit[k]; ok {
					buf.WriteString(e + "\n")
					continue
				}
				fmt.Fprintf(&buf, "dir %d sub %d file %d line %d\n", d, s, f, k)
			}
			return buf.Bytes()
		}
		path := func(d, s, f int) string { return fmt.Sprintf("d%02d/s%02d/f%02d.txt", d, s, f) }
		var st bytes.Buffer
		mark := 0
		blob := func(data []byte) int {
			mark++
			fmt.Fprintf(&st, "blob\nmark :%d\ndata %d\n%s\n", mark, len(data), data)
			return mark
		}
		var base []string
		for d := 0; d < 20; d++ {
			for s := 0; s < 20; s++ {
				for f := 0; f < 50; f++ {
					base = append(base, fmt.Sprintf("M 100644 :%d %s\n", blob(content(d, s, f, nil)), path(d, s, f)))
				}
			}
		}
		mark++
		baseMark := mark
		fmt.Fprintf(&st, "commit refs/heads/base\nmark :%d\ncommitter T <t@example.com> 1700000000 +0000\ndata 0\n%s\n", mark, strings.Join(base, ""))
		commit := func(name string, ops []string) {
			mark++
			fmt.Fprintf(&st, "commit refs/heads/%s\nmark :%d\ncommitter T <t@example.com> 1700000001 +0000\ndata 0\nfrom :%d\n%s\n", name, mark, baseMark, strings.Join(ops, ""))
		}
		var o, t []string
		for i := 0; i < 100; i++ {
			d, s, f := (i*7)%20, (i*3)%20, i%50
			var edit map[int]string
			if i%2 == 1 {
				edit = map[int]string{2: "ours edit"}
			}
			o = append(o, "D "+path(d, s, f)+"\n",
				fmt.Sprintf("M 100644 :%d moved/%s\n", blob(content(d, s, f, edit)), path(d, s, f)))
			t = append(t, fmt.Sprintf("M 100644 :%d %s\n", blob(content(d, s, f, map[int]string{25: "theirs edit"})), path(d, s, f)))
		}
		for i := 0; i < 10; i++ {
			d, s, f := (i*7+1)%20, (i*3+2)%20, (i+7)%50
			t = append(t, fmt.Sprintf("M 100644 :%d %s\n", blob(content(d, s, f, map[int]string{10: "theirs other"})), path(d, s, f)))
		}
		commit("ours", o)
		commit("theirs", t)
		for _, args := range [][]string{{"init", "-q", "--bare", "."}, {"fast-import", "--quiet"}} {
			cmd := exec.Command("git", args...)
			cmd.Dir = dir
			if args[0] == "fast-import" {
				cmd.Stdin = &st
			}
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("git %v: %v\n%s", args, err, out)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, "ready"), nil, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	out, err := exec.Command("git", "-C", dir, "rev-parse", "ours", "theirs").Output()
	if err != nil {
		b.Fatal(err)
	}
	hs := strings.Fields(string(out))
	return dir, plumbing.NewHash(hs[0]), plumbing.NewHash(hs[1])
}

// BenchmarkMergeRenamesPreflight: a deep merge into an Overlay of a
// branch that moved 100 files of 20,000 (half of them edited) with one
// that edited them. Compare with BenchmarkGitMergeTreeRenames.
func BenchmarkMergeRenamesPreflight(b *testing.B) {
	dir, ours, theirs := renameBenchRepo(b)
	st := filesystem.NewStorageWithOptions(osfs.New(dir), cache.NewObjectLRUDefault(), filesystem.Options{KeepDescriptors: true})
	defer st.Close()
	ctx := context.Background()
	res, err := Merge(ctx, NewOverlay(st), ours, theirs, Options{Deep: true})
	if err != nil {
		b.Fatal(err)
	}
	want, err := exec.Command("git", "-C", dir, "merge-tree", "--write-tree", "ours", "theirs").Output()
	if err != nil {
		b.Fatal(err)
	}
	if !res.Clean || res.Tree.String() != strings.TrimSpace(string(want)) {
		b.Fatalf("merge: clean=%v tree=%s conflicts=%v, git %s", res.Clean, res.Tree, len(res.Conflicts), want)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := Merge(ctx, NewOverlay(st), ours, theirs, Options{Deep: true}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGitMergeTreeRenames runs git merge-tree --write-tree on the
// same commits (process start included).
func BenchmarkGitMergeTreeRenames(b *testing.B) {
	dir, ours, theirs := renameBenchRepo(b)
	for i := 0; i < b.N; i++ {
		cmd := exec.Command("git", "merge-tree", "--write-tree", ours.String(), theirs.String())
		cmd.Dir = dir
		if out, err := cmd.Output(); err != nil {
			b.Fatalf("%v: %s", err, out)
		}
	}
}
