package merge

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/storage/filesystem"
)

// TestCommitHeaderMatchesDecode: the merge-base walk's header reader
// gives go-git's tree, parents and committer time for every commit of the
// real histories (signed commits, merge tags, odd time zones included),
// and declines (falls back to the full decoder) what it does not read.
func TestCommitHeaderMatchesDecode(t *testing.T) {
	odd := []string{
		"parent 0123456789012345678901234567890123456789\ncommitter a <b> 1 +0000\n\nno tree\n",
		"tree 0123456789012345678901234567890123456789\n\nno committer\n",
		"tree 0123456789012345678901234567890123456789\ncommitter a <b> notatime +0000\n\nx\n",
		"tree 01234\ncommitter a <b> 1 +0000\n\nshort tree\n",
	}
	for _, raw := range odd {
		o := &plumbing.MemoryObject{}
		o.SetType(plumbing.CommitObject)
		o.Write([]byte(raw))
		if _, ok := commitHeader(o); ok {
			t.Errorf("commitHeader accepted %q", raw)
		}
	}
	cdir := corpusDir()
	if cdir == "" {
		t.Skip("shared/corpus not found (set LOCKSTEP_CORPUS): real commits skipped")
	}
	for _, name := range []string{"echo", "testify"} {
		bundle := filepath.Join(cdir, name+".bundle")
		if _, err := os.Stat(bundle); err != nil {
			continue
		}
		dir := filepath.Join(tempDir(t), name+".git")
		gitRun(t, filepath.Dir(dir), nil, "clone", "-q", "--mirror", bundle, dir)
		st := filesystem.NewStorageWithOptions(osfs.New(dir), cache.NewObjectLRU(16<<20), filesystem.Options{KeepDescriptors: true})
		n := 0
		for _, l := range strings.Fields(string(gitRun(t, dir, nil, "rev-list", "--all"))) {
			h := plumbing.NewHash(l)
			obj, err := st.EncodedObject(plumbing.CommitObject, h)
			if err != nil {
				t.Fatal(err)
			}
			c, err := decodeCommit(obj)
			if err != nil {
				t.Fatal(err)
			}
			ci, ok := commitHeader(obj)
			if !ok {
				t.Errorf("%s %s: header not read", name, h)
				continue
			}
			if ci.tree != c.TreeHash || len(ci.parents) != len(c.ParentHashes) || !ci.when.Equal(c.Committer.When) {
				t.Fatalf("%s %s: header %+v, decoded tree %s parents %v when %s", name, h, ci, c.TreeHash, c.ParentHashes, c.Committer.When)
			}
			for i := range ci.parents {
				if ci.parents[i] != c.ParentHashes[i] {
					t.Fatalf("%s %s: parents %v, decoded %v", name, h, ci.parents, c.ParentHashes)
				}
			}
			n++
		}
		st.Close()
		t.Logf("%s: %d commits agree", name, n)
	}
}

// TestCommitCacheSharedAcrossMerges: every two-parent merge of the echo
// history (495), all sharing one CommitCache, answers what a merge with
// its own walk answers.
func TestCommitCacheSharedAcrossMerges(t *testing.T) {
	cdir := corpusDir()
	if cdir == "" {
		t.Skip("shared/corpus not found (set LOCKSTEP_CORPUS)")
	}
	dir := filepath.Join(tempDir(t), "echo.git")
	gitRun(t, filepath.Dir(dir), nil, "clone", "-q", "--mirror", filepath.Join(cdir, "echo.bundle"), dir)
	st := filesystem.NewStorageWithOptions(osfs.New(dir), cache.NewObjectLRU(64<<20), filesystem.Options{KeepDescriptors: true})
	defer st.Close()
	ctx := context.Background()
	cc := NewCommitCache()
	n := 0
	for _, l := range strings.Split(string(gitRun(t, dir, nil, "rev-list", "--all", "--merges", "--parents")), "\n") {
		f := strings.Fields(l)
		if len(f) != 3 {
			continue
		}
		p1, p2 := plumbing.NewHash(f[1]), plumbing.NewHash(f[2])
		want, err := Merge(ctx, NewOverlay(st), p1, p2, Options{Deep: true})
		if err != nil {
			t.Fatal(err)
		}
		got, err := Merge(ctx, NewOverlay(st), p1, p2, Options{Deep: true, Commits: cc})
		if err != nil {
			t.Fatal(err)
		}
		if got.Clean != want.Clean || got.Tree != want.Tree || got.MergeBase != want.MergeBase || !reflect.DeepEqual(conflictPaths(got), conflictPaths(want)) {
			t.Fatalf("merge %s %s with a shared cache: clean=%v tree=%s base=%s %v; alone: clean=%v tree=%s base=%s %v",
				p1, p2, got.Clean, got.Tree, got.MergeBase, conflictPaths(got), want.Clean, want.Tree, want.MergeBase, conflictPaths(want))
		}
		n++
	}
	if n == 0 || len(cc.m) == 0 {
		t.Fatalf("%d merges, %d cached commits", n, len(cc.m))
	}
}
