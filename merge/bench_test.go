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

// benchGen writes a git fast-import stream: a 20,000-file base (20 dirs x
// 20 subdirs x 50 files of 30 lines) and the side branches a benchmark
// adds with commit.
type benchGen struct {
	st         bytes.Buffer
	mark, base int
}

func (g *benchGen) content(d, s, f int, edit map[int]string) []byte {
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

func (g *benchGen) path(d, s, f int) string { return fmt.Sprintf("d%02d/s%02d/f%02d.txt", d, s, f) }

func (g *benchGen) blob(data []byte) int {
	g.mark++
	fmt.Fprintf(&g.st, "blob\nmark :%d\ndata %d\n%s\n", g.mark, len(data), data)
	return g.mark
}

// commit adds branch name on top of the base with fast-import file ops.
func (g *benchGen) commit(name string, ops []string) {
	g.mark++
	fmt.Fprintf(&g.st, "commit refs/heads/%s\nmark :%d\ncommitter T <t@example.com> 1700000001 +0000\ndata 0\nfrom :%d\n%s\n", name, g.mark, g.base, strings.Join(ops, ""))
}

// buildBenchRepo builds (once: later runs reuse it) the repository
// /dev/shm/<name> (or under the temp dir): the 20,000-file base, then the
// branches ours and theirs that sides adds. It returns their commits.
func buildBenchRepo(b *testing.B, name string, sides func(g *benchGen)) (dir string, ours, theirs plumbing.Hash) {
	b.Helper()
	root := "/dev/shm"
	if _, err := os.Stat(root); err != nil {
		root = os.TempDir()
	}
	dir = filepath.Join(root, name)
	if _, err := os.Stat(filepath.Join(dir, "ready")); err != nil {
		os.RemoveAll(dir)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		g := &benchGen{}
		var base []string
		for d := 0; d < 20; d++ {
			for s := 0; s < 20; s++ {
				for f := 0; f < 50; f++ {
					base = append(base, fmt.Sprintf("M 100644 :%d %s\n", g.blob(g.content(d, s, f, nil)), g.path(d, s, f)))
				}
			}
		}
		g.mark++
		g.base = g.mark
		fmt.Fprintf(&g.st, "commit refs/heads/base\nmark :%d\ncommitter T <t@example.com> 1700000000 +0000\ndata 0\n%s\n", g.mark, strings.Join(base, ""))
		sides(g)
		for _, args := range [][]string{{"init", "-q", "--bare", "."}, {"fast-import", "--quiet"}} {
			cmd := exec.Command("git", args...)
			cmd.Dir = dir
			if args[0] == "fast-import" {
				cmd.Stdin = &g.st
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

// benchRepo is the 20,000-file repository with branches ours and theirs,
// each changing 10 files: 7 of their own and 3 that both sides change in
// different hunks.
func benchRepo(b *testing.B) (dir string, ours, theirs plumbing.Hash) {
	return buildBenchRepo(b, "lockstep-merge-bench-v1", func(g *benchGen) {
		side := func(name string, line int, own [][3]int) {
			var ms []string
			for _, p := range own {
				ms = append(ms, fmt.Sprintf("M 100644 :%d %s\n", g.blob(g.content(p[0], p[1], p[2], map[int]string{line: name + " change"})), g.path(p[0], p[1], p[2])))
			}
			g.commit(name, ms)
		}
		shared := [][3]int{{1, 2, 3}, {5, 5, 5}, {19, 0, 49}}
		var o, t [][3]int
		for i := 0; i < 7; i++ {
			o = append(o, [3]int{(i * 3) % 20, (i * 7) % 20, (i * 11) % 50})
			t = append(t, [3]int{(i*3 + 1) % 20, (i*7 + 3) % 20, (i*11 + 5) % 50})
		}
		side("ours", 3, append(o, shared...))
		side("theirs", 20, append(t, shared...))
	})
}

// BenchmarkMergeDeepPreflight: a deep merge into an Overlay (nothing
// written) on the 20,000-file repository, filesystem storage with a warm
// object cache. Compare with BenchmarkGitMergeTree.
func BenchmarkMergeDeepPreflight(b *testing.B) {
	for _, keep := range []bool{false, true} {
		name := "default"
		if keep {
			// Without KeepDescriptors go-git reopens the pack for every
			// object read, which dominates the profile; a service would
			// keep it open.
			name = "keep-descriptors"
		}
		b.Run(name, func(b *testing.B) { benchPreflight(b, keep) })
	}
}

func benchPreflight(b *testing.B, keep bool) {
	dir, ours, theirs := benchRepo(b)
	st := filesystem.NewStorageWithOptions(osfs.New(dir), cache.NewObjectLRUDefault(), filesystem.Options{KeepDescriptors: keep})
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
		b.Fatalf("merge: clean=%v tree=%s, git %s", res.Clean, res.Tree, want)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := Merge(ctx, NewOverlay(st), ours, theirs, Options{Deep: true}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGitMergeTree runs git merge-tree --write-tree on the same
// commits (process start included, as a service would pay it).
func BenchmarkGitMergeTree(b *testing.B) {
	dir, ours, theirs := benchRepo(b)
	for i := 0; i < b.N; i++ {
		cmd := exec.Command("git", "merge-tree", "--write-tree", ours.String(), theirs.String())
		cmd.Dir = dir
		if out, err := cmd.Output(); err != nil {
			b.Fatalf("%v: %s", err, out)
		}
	}
}
