package merge

import (
	"context"
	"fmt"
	"os/exec"
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
	return buildBenchRepo(b, "lockstep-merge-bench-renames-v1", func(g *benchGen) {
		var o, t []string
		for i := 0; i < 100; i++ {
			d, s, f := (i*7)%20, (i*3)%20, i%50
			var edit map[int]string
			if i%2 == 1 {
				edit = map[int]string{2: "ours edit"}
			}
			o = append(o, "D "+g.path(d, s, f)+"\n",
				fmt.Sprintf("M 100644 :%d moved/%s\n", g.blob(g.content(d, s, f, edit)), g.path(d, s, f)))
			t = append(t, fmt.Sprintf("M 100644 :%d %s\n", g.blob(g.content(d, s, f, map[int]string{25: "theirs edit"})), g.path(d, s, f)))
		}
		for i := 0; i < 10; i++ {
			d, s, f := (i*7+1)%20, (i*3+2)%20, (i+7)%50
			t = append(t, fmt.Sprintf("M 100644 :%d %s\n", g.blob(g.content(d, s, f, map[int]string{10: "theirs other"})), g.path(d, s, f)))
		}
		g.commit("ours", o)
		g.commit("theirs", t)
	})
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
