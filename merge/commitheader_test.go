package merge

import (
	"context"
	"fmt"
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
			if ci.tree != c.Tree || len(ci.parents) != len(c.Parents) || !ci.when.Equal(c.Committer.When) {
				t.Fatalf("%s %s: header %+v, decoded tree %s parents %v when %s", name, h, ci, c.Tree, c.Parents, c.Committer.When)
			}
			for i := range ci.parents {
				if ci.parents[i] != c.Parents[i] {
					t.Fatalf("%s %s: parents %v, decoded %v", name, h, ci.parents, c.Parents)
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
	if n == 0 || cc.Len() == 0 {
		t.Fatalf("%d merges, %d cached commits", n, cc.Len())
	}
}

// TestBoundedCommitCacheConcurrent: one bounded cache shared by merges
// running at once (the service's per-network cache of single preflights)
// answers what each merge alone answers, and never holds more than its
// bound, though it starts over many times.
func TestBoundedCommitCacheConcurrent(t *testing.T) {
	cdir := corpusDir()
	if cdir == "" {
		t.Skip("shared/corpus not found (set LOCKSTEP_CORPUS)")
	}
	dir := filepath.Join(tempDir(t), "echo.git")
	gitRun(t, filepath.Dir(dir), nil, "clone", "-q", "--mirror", filepath.Join(cdir, "echo.bundle"), dir)
	open := func() *filesystem.Storage {
		st := filesystem.NewStorageWithOptions(osfs.New(dir), cache.NewObjectLRU(64<<20), filesystem.Options{KeepDescriptors: true})
		t.Cleanup(func() { st.Close() })
		return st
	}
	ctx := context.Background()
	type pair struct{ a, b plumbing.Hash }
	var pairs []pair
	for _, l := range strings.Split(string(gitRun(t, dir, nil, "rev-list", "--all", "--merges", "--parents", "-n", "40")), "\n") {
		if f := strings.Fields(l); len(f) == 3 {
			pairs = append(pairs, pair{plumbing.NewHash(f[1]), plumbing.NewHash(f[2])})
		}
	}
	if len(pairs) < 20 {
		t.Fatalf("echo corpus: %d merges", len(pairs))
	}
	st := open()
	want := make([]*Result, len(pairs))
	for i, p := range pairs {
		r, err := Merge(ctx, NewOverlay(st), p.a, p.b, Options{Deep: true})
		if err != nil {
			t.Fatal(err)
		}
		want[i] = r
	}
	const bound = 300
	cc := NewBoundedCommitCache(bound)
	errs := make(chan error, 4)
	for g := 0; g < 4; g++ {
		st := open() // a storer per goroutine: the cache is what they share
		go func(g int) {
			for k := range pairs {
				i := (k + g*len(pairs)/4) % len(pairs)
				got, err := Merge(ctx, NewOverlay(st), pairs[i].a, pairs[i].b, Options{Deep: true, Commits: cc})
				if err != nil {
					errs <- err
					return
				}
				w := want[i]
				if got.Clean != w.Clean || got.Tree != w.Tree || got.MergeBase != w.MergeBase || !reflect.DeepEqual(conflictPaths(got), conflictPaths(w)) {
					errs <- fmt.Errorf("merge %s %s with the shared bounded cache: clean=%v tree=%s base=%s; alone: clean=%v tree=%s base=%s",
						pairs[i].a, pairs[i].b, got.Clean, got.Tree, got.MergeBase, w.Clean, w.Tree, w.MergeBase)
					return
				}
				if n := cc.Len(); n > bound {
					errs <- fmt.Errorf("cache holds %d commits, bound %d", n, bound)
					return
				}
			}
			errs <- nil
		}(g)
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if cc.Len() == 0 {
		t.Fatal("the shared cache holds nothing")
	}
}
