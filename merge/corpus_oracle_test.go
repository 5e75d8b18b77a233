package merge

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/storage/filesystem"
)

// corpusDir finds shared/corpus: beside the repository (../shared, as CI
// lays it out) or beside any directory above it.
func corpusDir() string {
	if d := os.Getenv("LOCKSTEP_CORPUS"); d != "" {
		return d
	}
	wd, err := os.Getwd()
	if err != nil {
		return ""
	}
	for d := wd; ; d = filepath.Dir(d) {
		c := filepath.Join(d, "shared", "corpus")
		if _, err := os.Stat(filepath.Join(c, "echo.bundle")); err == nil {
			return c
		}
		if filepath.Dir(d) == d {
			return ""
		}
	}
}

// gitCorpusMerge is git's answer for one merge of the corpus.
type gitCorpusMerge struct {
	p1, p2    string
	clean     bool
	tree      plumbing.Hash
	conflicts []string
}

// corpusGitMerges runs git merge-tree --stdin on every two-parent merge.
func corpusGitMerges(tb testing.TB, dir string) []gitCorpusMerge {
	tb.Helper()
	var ms []gitCorpusMerge
	var in bytes.Buffer
	for _, l := range strings.Split(string(gitRun(tb, dir, nil, "rev-list", "--all", "--merges", "--parents")), "\n") {
		f := strings.Fields(l)
		if len(f) != 3 {
			continue
		}
		ms = append(ms, gitCorpusMerge{p1: f[1], p2: f[2]})
		fmt.Fprintf(&in, "%s %s\n", f[1], f[2])
	}
	out := gitRun(tb, dir, in.Bytes(), "merge-tree", "--stdin", "--write-tree", "--allow-unrelated-histories", "--name-only", "--no-messages", "-z")
	recs := strings.Split(string(out), "\x00")
	k := 0
	for i := range ms {
		if k+1 >= len(recs) {
			tb.Fatalf("git merge-tree --stdin: output ends at merge %d", i)
		}
		ms[i].clean = recs[k] == "1"
		ms[i].tree = plumbing.NewHash(recs[k+1])
		k += 2
		seen := map[string]bool{}
		for ; k < len(recs) && recs[k] != ""; k++ {
			p := recs[k]
			if j := strings.LastIndex(p, "~"); j > 0 {
				p = p[:j] // moved aside: we report the path itself
			}
			if !seen[p] {
				seen[p] = true
				ms[i].conflicts = append(ms[i].conflicts, p)
			}
		}
		k++ // the empty record ending the merge
		sort.Strings(ms[i].conflicts)
	}
	return ms
}

// TestCorpusOracle merges every two-parent merge commit of the real
// histories in shared/corpus (M^1 with M^2, deep, renames on) and compares
// with git merge-tree --write-tree: the same tree oid when git is clean, the
// same conflicted paths when it is not.
func TestCorpusOracle(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	cdir := corpusDir()
	if cdir == "" {
		t.Skip("shared/corpus not found beside the repository (set LOCKSTEP_CORPUS to its path): real-history oracle skipped")
	}
	for _, name := range []string{"echo", "testify"} {
		t.Run(name, func(t *testing.T) {
			bundle := filepath.Join(cdir, name+".bundle")
			if _, err := os.Stat(bundle); err != nil {
				t.Skipf("%s missing: %v", bundle, err)
			}
			dir := filepath.Join(tempDir(t), name+".git")
			gitRun(t, filepath.Dir(dir), nil, "clone", "-q", "--mirror", bundle, dir)
			want := corpusGitMerges(t, dir)
			st := filesystem.NewStorageWithOptions(osfs.New(dir), cache.NewObjectLRU(64<<20), filesystem.Options{KeepDescriptors: true})
			defer st.Close()
			ctx := context.Background()
			var agree, clean, conflicted, sameTree int
			for _, w := range want {
				got, err := Merge(ctx, NewOverlay(st), plumbing.NewHash(w.p1), plumbing.NewHash(w.p2), Options{Deep: true})
				if err != nil {
					t.Fatalf("merge %s %s: %v", w.p1, w.p2, err)
				}
				if !matches(got, gitMerge{clean: w.clean, tree: w.tree, conflicts: w.conflicts}) {
					t.Errorf("merge %s %s: git clean=%v tree=%s conflicts=%v; we: clean=%v tree=%s conflicts=%v",
						w.p1, w.p2, w.clean, w.tree, w.conflicts, got.Clean, got.Tree, conflictPaths(got))
					continue
				}
				agree++
				if w.clean {
					clean++
					continue
				}
				conflicted++
				// The conflicted tree (markers labelled as git labels them:
				// the revisions given) should be git's too.
				mk, err := Merge(ctx, NewOverlay(st), plumbing.NewHash(w.p1), plumbing.NewHash(w.p2), Options{Deep: true, Markers: true, OursLabel: w.p1, TheirsLabel: w.p2})
				if err != nil {
					t.Fatal(err)
				}
				if mk.Tree == w.tree {
					sameTree++
				} else {
					t.Errorf("merge %s %s: conflicted tree (markers) %s, git's %s", w.p1, w.p2, mk.Tree, w.tree)
				}
			}
			t.Logf("%s: %d of %d merges agree with git merge-tree (%d clean with the same tree, %d conflicted on the same paths, %d of them with git's conflicted tree)",
				name, agree, len(want), clean, conflicted, sameTree)
			if len(want) == 0 {
				t.Fatal("no merges in the corpus")
			}
		})
	}
}
