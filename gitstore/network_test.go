package gitstore

import (
	"archive/tar"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/lockstep-hq/lockstep"
)

func TestOpenCreatesBareRepo(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "n.git")
	n, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	n.Close()
	if got := strings.TrimSpace(git(t, dir, nil, "--git-dir="+dir, "rev-parse", "--is-bare-repository")); got != "true" {
		t.Fatalf("is-bare %q", got)
	}
	// Re-open is a no-op.
	if n, err = Open(dir, Options{}); err != nil {
		t.Fatal(err)
	}
	n.Close()
}

func TestWriteCommitReadableByGit(t *testing.T) {
	n := MustOpen(t)
	c1, t1 := mustPush(t, n, []tarEntry{{Name: "a.txt", Body: "one\n"}, {Name: "x/run", Body: "#!/bin/sh\n", Mode: 0o755}}, nil, 1700000000)
	c2, _ := mustPush(t, n, []tarEntry{{Name: "a.txt", Body: "two\n"}, {Name: "x/run", Body: "#!/bin/sh\n", Mode: 0o755}}, []plumbing.Hash{c1}, 1700000100)
	// Rollback: a new commit with the old tree.
	c3, st, err := n.WriteCommit(CommitSpec{Tree: t1, Parents: []plumbing.Hash{c2}, Author: sigAt(1700000200), Committer: sigAt(1700000200), Message: "rollback\n"})
	if err != nil || st.Objects != 1 {
		t.Fatalf("rollback: %v %+v", err, st)
	}
	if err := n.MirrorRef("base", "refs/heads/main", c3); err != nil {
		t.Fatal(err)
	}
	gd := "--git-dir=" + n.Dir()
	if got := git(t, n.Dir(), nil, gd, "cat-file", "-p", c3.String()+"^{tree}"); !strings.Contains(got, "a.txt") {
		t.Fatalf("cat-file: %s", got)
	}
	if got := strings.TrimSpace(git(t, n.Dir(), nil, gd, "rev-parse", c3.String()+"^{tree}")); got != t1.String() {
		t.Fatalf("rollback tree %s, want %s", got, t1)
	}
	log := git(t, n.Dir(), nil, gd, "log", "--format=%H", "refs/namespaces/base/refs/heads/main")
	if want := fmt.Sprintf("%s\n%s\n%s\n", c3, c2, c1); log != want {
		t.Fatalf("git log:\n%s\nwant\n%s", log, want)
	}
	git(t, n.Dir(), nil, gd, "fsck", "--strict", "--no-dangling")

	ci, err := n.Commit(c3)
	if err != nil {
		t.Fatal(err)
	}
	if ci.Tree != t1 || len(ci.Parents) != 1 || ci.Parents[0] != c2 || ci.Message != "rollback\n" || !ci.Author.When.Equal(sigAt(1700000200).When) {
		t.Fatalf("commit info %+v", ci)
	}
	// Not found and wrong type.
	if _, err := n.Commit(plumbing.NewHash(strings.Repeat("ab", 20))); lockstep.ErrorCode(err) != lockstep.ENOTFOUND {
		t.Fatalf("missing commit: %v", err)
	}
	if _, err := n.Commit(t1); lockstep.ErrorCode(err) != lockstep.ENOTFOUND {
		t.Fatalf("tree as commit: %v", err)
	}
	if _, _, err := n.WriteCommit(CommitSpec{Tree: c1}); lockstep.ErrorCode(err) != lockstep.ENOTFOUND {
		t.Fatalf("commit as tree: %v", err)
	}

	// A fresh Network sees everything written (packs and loose objects).
	n2, err := Open(n.Dir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer n2.Close()
	if _, err := n2.Commit(c3); err != nil {
		t.Fatal(err)
	}
	if m := n2.Missing([]plumbing.Hash{c1, t1, plumbing.NewHash(strings.Repeat("cd", 20))}); len(m) != 1 {
		t.Fatalf("missing %v", m)
	}
}

func TestMirrorCloneThroughNamespace(t *testing.T) {
	n := MustOpen(t)
	c1, _ := mustPush(t, n, []tarEntry{{Name: "README", Body: "base\n"}}, nil, 1700000000)
	c2, _ := mustPush(t, n, []tarEntry{{Name: "README", Body: "fork\n"}, {Name: "l", Type: tar.TypeSymlink, Linkname: "README"}}, []plumbing.Hash{c1}, 1700000100)
	// The fork's default branch is "trunk"; it also has "main" at the base.
	must(t, n.MirrorRef("base", "refs/heads/main", c1))
	must(t, n.MirrorHEAD("base", "main"))
	// HEAD chosen before the branch exists: the symref appears with it.
	must(t, n.MirrorHEAD("ws-1", "trunk"))
	if _, err := os.Stat(filepath.Join(n.Dir(), "refs/namespaces/ws-1/HEAD")); err == nil {
		t.Fatal("HEAD symref written before its branch exists")
	}
	must(t, n.MirrorRef("ws-1", "refs/heads/main", c1))
	must(t, n.MirrorRef("ws-1", "refs/heads/trunk", c2))

	work := t.TempDir()
	dst := filepath.Join(work, "clone")
	git(t, work, nil, "clone", "-q", "--upload-pack=env GIT_NAMESPACE=ws-1 git-upload-pack", "file://"+n.Dir(), dst)
	if b, _ := os.ReadFile(filepath.Join(dst, "README")); string(b) != "fork\n" {
		t.Fatalf("checked out %q", b)
	}
	if l, _ := os.Readlink(filepath.Join(dst, "l")); l != "README" {
		t.Fatalf("symlink %q", l)
	}
	if br := strings.TrimSpace(git(t, dst, nil, "symbolic-ref", "HEAD")); br != "refs/heads/trunk" {
		t.Fatalf("HEAD %s", br)
	}
	refs := git(t, dst, nil, "for-each-ref", "--format=%(refname) %(objectname)", "refs/remotes/")
	if !strings.Contains(refs, "refs/remotes/origin/main "+c1.String()) || !strings.Contains(refs, "refs/remotes/origin/trunk "+c2.String()) {
		t.Fatalf("remote refs:\n%s", refs)
	}
	if log := git(t, dst, nil, "log", "--format=%H"); log != c2.String()+"\n"+c1.String()+"\n" {
		t.Fatalf("log %s", log)
	}
	// The base namespace shows only its own refs.
	dst2 := filepath.Join(work, "base")
	git(t, work, nil, "clone", "-q", "--upload-pack=env GIT_NAMESPACE=base git-upload-pack", "file://"+n.Dir(), dst2)
	if b, _ := os.ReadFile(filepath.Join(dst2, "README")); string(b) != "base\n" {
		t.Fatalf("base checked out %q", b)
	}
	if refs := git(t, dst2, nil, "branch", "-r"); strings.Contains(refs, "trunk") {
		t.Fatalf("base leaks fork refs: %s", refs)
	}

	// Delete and SyncMirror, including packed-refs entries.
	git(t, n.Dir(), nil, "--git-dir="+n.Dir(), "pack-refs", "--all")
	must(t, n.MirrorRef("ws-1", "refs/heads/trunk", c2)) // loose again, packed copy stays
	must(t, n.SyncMirror("ws-1", map[string]plumbing.Hash{"refs/heads/feature/x": c2}))
	got := git(t, n.Dir(), nil, "--git-dir="+n.Dir(), "for-each-ref", "--format=%(refname) %(objectname)", "refs/namespaces/ws-1/")
	if want := "refs/namespaces/ws-1/refs/heads/feature/x " + c2.String() + "\n"; got != want {
		t.Fatalf("after sync:\n%s\nwant\n%s", got, want)
	}
	must(t, n.MirrorRef("base", "refs/heads/main", plumbing.ZeroHash))
	if got := git(t, n.Dir(), nil, "--git-dir="+n.Dir(), "for-each-ref", "refs/namespaces/base/"); got != "" {
		t.Fatalf("base refs after delete: %s", got)
	}
	if _, err := os.Stat(filepath.Join(n.Dir(), "refs/namespaces/base/HEAD")); err == nil {
		t.Fatal("HEAD symref left pointing at a deleted branch")
	}
	// D/F switch: feature/x -> feature.
	must(t, n.SyncMirror("ws-1", map[string]plumbing.Hash{"refs/heads/feature": c1}))
	git(t, n.Dir(), nil, "--git-dir="+n.Dir(), "fsck", "--strict", "--no-dangling")

	for _, bad := range [][2]string{{"../x", "refs/heads/main"}, {"a/b", "refs/heads/main"}, {"ws", "heads/main"}, {"ws", "refs/heads/../x"}, {"ws", "refs/heads/x.lock"}} {
		if err := n.MirrorRef(bad[0], bad[1], c1); lockstep.ErrorCode(err) != lockstep.EINVALID {
			t.Errorf("MirrorRef(%q, %q) = %v", bad[0], bad[1], err)
		}
	}
}

func TestConcurrentReadersWriters(t *testing.T) {
	n := MustOpen(t)
	base, _ := mustPush(t, n, []tarEntry{{Name: "f", Body: "0"}}, nil, 1700000000)
	var wg sync.WaitGroup
	commits := make(chan plumbing.Hash, 64)
	for w := 0; w < 3; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 10; i++ {
				c, _ := mustPush(t, n, []tarEntry{{Name: "f", Body: fmt.Sprintf("%d-%d", w, i)}, {Name: fmt.Sprintf("d%d/g", i), Body: "x"}}, []plumbing.Hash{base}, int64(1700000001+i))
				commits <- c
			}
		}()
	}
	for r := 0; r < 4; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				ci, err := n.Commit(base)
				if err != nil {
					t.Error(err)
					return
				}
				if _, err := n.Objects().EncodedObject(plumbing.TreeObject, ci.Tree); err != nil {
					t.Error(err)
					return
				}
				n.Missing([]plumbing.Hash{ci.Tree, base})
				if i%50 == 0 {
					if err := n.Reload(); err != nil {
						t.Error(err)
					}
				}
			}
		}()
	}
	wg.Wait()
	close(commits)
	for c := range commits {
		if _, err := n.Commit(c); err != nil {
			t.Fatal(err)
		}
	}
	git(t, n.Dir(), nil, "--git-dir="+n.Dir(), "fsck", "--strict", "--no-dangling")
}

func must(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
}

// After an external `git repack -a -d` (loose objects moved into a new
// pack, old packs deleted) reads heal without an explicit Reload.
func TestExternalRepack(t *testing.T) {
	n := MustOpen(t)
	c1, _ := mustPush(t, n, []tarEntry{{Name: "a", Body: "1"}}, nil, 1700000000)
	c2, _ := mustPush(t, n, []tarEntry{{Name: "a", Body: "2"}}, []plumbing.Hash{c1}, 1700000100)
	must(t, n.MirrorRef("r", "refs/heads/main", c2))
	gd := "--git-dir=" + n.Dir()
	git(t, n.Dir(), nil, gd, "repack", "-a", "-d", "-q")
	git(t, n.Dir(), nil, gd, "prune-packed")
	if m, _ := filepath.Glob(filepath.Join(n.Dir(), "objects", "??", "*")); len(m) != 0 {
		t.Fatalf("loose objects left: %v", m)
	}
	log, err := n.Log(c2, 0, plumbing.ZeroHash)
	if err != nil || len(log) != 2 {
		t.Fatalf("log after repack: %v %v", log, err)
	}
	if _, err := n.TreeEntries(c1, ""); err != nil {
		t.Fatal(err)
	}
	if st, err := n.ReceivePack(strings.NewReader("PACK\x00\x00\x00\x02\x00\x00\x00\x00"+strings.Repeat("\x00", 20)), Limits{}); err != nil || st.Objects != 0 {
		t.Fatalf("empty pack: %+v %v", st, err)
	}
}

func TestMirrorRefStaleLock(t *testing.T) {
	n := MustOpen(t)
	c, _ := mustPush(t, n, []tarEntry{{Name: "a", Body: "1"}}, nil, 1700000000)
	lock := filepath.Join(n.Dir(), "refs/namespaces/r/refs/heads/main.lock")
	os.MkdirAll(filepath.Dir(lock), 0o755)
	os.WriteFile(lock, nil, 0o644)
	if err := n.MirrorRef("r", "refs/heads/main", c); err == nil {
		t.Fatal("fresh lock ignored")
	}
	old := time.Now().Add(-time.Minute)
	os.Chtimes(lock, old, old)
	must(t, n.MirrorRef("r", "refs/heads/main", c))
	if b, _ := os.ReadFile(strings.TrimSuffix(lock, ".lock")); string(b) != c.String()+"\n" {
		t.Fatalf("ref %q", b)
	}
}

// A Reload that finds only new packs (a replica's catch-up after another
// replica's write) indexes only their objects: the old Reload rebuilt
// the whole object map, so every catch-up cost every object of the
// network. A Reload that finds a pack gone still rebuilds.
func TestReloadIndexesOnlyNewPacks(t *testing.T) {
	n := MustOpen(t)
	var entries []tarEntry
	for i := 0; i < 300; i++ {
		entries = append(entries, tarEntry{Name: fmt.Sprintf("d%d/f%d", i%7, i), Body: fmt.Sprintf("body %d\n", i)})
	}
	c, _ := mustPush(t, n, entries, nil, 1700000000)
	must(t, n.MirrorRef("r", "refs/heads/main", c))
	gd := "--git-dir=" + n.Dir()
	git(t, n.Dir(), nil, gd, "repack", "-a", "-d", "-q")
	git(t, n.Dir(), nil, gd, "prune-packed")
	must(t, n.Reload())
	if n.indexed.Load() < 300 {
		t.Fatalf("after the repack the map holds %d objects, want the repacked ≥ 300", n.indexed.Load())
	}

	// Another writer's pack of one new blob arrives.
	src := t.TempDir()
	git(t, src, nil, "init", "-q")
	blob := strings.TrimSpace(gitIn(t, src, "new blob\n", "hash-object", "-w", "--stdin"))
	packName := strings.TrimSpace(gitIn(t, src, blob+"\n", "pack-objects", "-q", filepath.Join(n.Dir(), "objects", "pack", "pack")))
	before := n.indexed.Load()
	must(t, n.Reload())
	if got := n.indexed.Load() - before; got != 1 {
		t.Fatalf("a Reload that found one new one-object pack indexed %d objects, want 1", got)
	}
	if !n.Has(plumbing.NewHash(blob)) {
		t.Fatal("the new pack's blob is not found after the Reload")
	}
	if _, err := n.Commit(c); err != nil {
		t.Fatalf("the repacked commit after the Reload: %v", err)
	}

	// A pack that goes away makes the next Reload rebuild the map
	// without it.
	for _, ext := range []string{"idx", "pack"} {
		must(t, os.Remove(filepath.Join(n.Dir(), "objects", "pack", "pack-"+packName+"."+ext)))
	}
	must(t, n.Reload())
	if n.Has(plumbing.NewHash(blob)) {
		t.Fatal("the blob of a removed pack is still found after the Reload")
	}
	if _, err := n.Commit(c); err != nil {
		t.Fatalf("the repacked commit after a Reload that removed a pack: %v", err)
	}
}

// AddPacks loads the packs it is given without listing objects/pack and
// indexes only their objects; a pack it cannot open (its files missing)
// makes it fall back to a full Reload, which still finds every pack
// placed meanwhile.
func TestAddPacksListsNothing(t *testing.T) {
	n := MustOpen(t)
	c, _ := mustPush(t, n, []tarEntry{{Name: "a", Body: "a\n"}, {Name: "b", Body: "b\n"}}, nil, 1700000000)
	newPack := func(body string) (blob, name string) {
		src := t.TempDir()
		git(t, src, nil, "init", "-q")
		blob = strings.TrimSpace(gitIn(t, src, body, "hash-object", "-w", "--stdin"))
		name = strings.TrimSpace(gitIn(t, src, blob+"\n", "pack-objects", "-q", filepath.Join(n.Dir(), "objects", "pack", "pack")))
		return blob, name
	}
	b1, p1 := newPack("one\n")
	b2, p2 := newPack("two\n")
	l0, o0 := n.ReloadCounts()
	i0 := n.indexed.Load()
	must(t, n.AddPacks([]plumbing.Hash{plumbing.NewHash(p1), plumbing.NewHash(p1)}))
	if l, o := n.ReloadCounts(); l != l0 || o-o0 != 1 || n.indexed.Load()-i0 != 1 {
		t.Fatalf("AddPacks of one one-object pack (listed twice): %d listings, %d packs opened, %d objects indexed; want 0, 1, 1", l-l0, o-o0, n.indexed.Load()-i0)
	}
	if !n.Has(plumbing.NewHash(b1)) {
		t.Fatal("the added pack's blob is not found")
	}
	if n.Has(plumbing.NewHash(b2)) {
		t.Fatal("a pack AddPacks was not given is loaded")
	}
	if _, err := n.Commit(c); err != nil {
		t.Fatalf("the commit after AddPacks: %v", err)
	}
	// Loaded already: nothing to do.
	must(t, n.AddPacks([]plumbing.Hash{plumbing.NewHash(p1)}))
	if l, o := n.ReloadCounts(); l != l0 || o-o0 != 1 {
		t.Fatalf("AddPacks of a loaded pack: %d listings, %d packs opened", l-l0, o-o0-1)
	}
	// A pack that is not there: the full Reload, which finds p2.
	must(t, n.AddPacks([]plumbing.Hash{plumbing.NewHash(strings.Repeat("ab", 20))}))
	if l, _ := n.ReloadCounts(); l != l0+1 {
		t.Fatalf("AddPacks of a missing pack listed the directory %d times, want 1 (the fallback Reload)", l-l0)
	}
	if !n.Has(plumbing.NewHash(b2)) || !n.Has(plumbing.NewHash(b1)) {
		t.Fatal("after the fallback Reload a pack's blob is missing")
	}
	_ = p2
}

// TestReloadSkipsAPackRemovedAfterTheListing: a `git repack -a -d` running
// beside this process (Compact's, or one a killed server left behind while
// its successor opens the network) deletes packs it folded; one listed by
// the reload's ReadDir and gone by its open was removed, not broken. The
// reload (and Open, which is one) used to fail on it, so a restarted
// server could not open the network and left a whole repository's refs
// out of the mirror git serves. The listed-then-gone pack is a pair of
// dangling symlinks here: listed, and ENOENT at open.
func TestReloadSkipsAPackRemovedAfterTheListing(t *testing.T) {
	n := MustOpen(t)
	c, _ := mustPush(t, n, []tarEntry{{Name: "a.txt", Body: "a\n"}}, nil, 1700000000)
	must(t, n.MirrorRef("r", "refs/heads/main", c))
	gone := strings.Repeat("ab", 20)
	for _, ext := range []string{"idx", "pack"} {
		if err := os.Symlink(filepath.Join(t.TempDir(), "removed."+ext), filepath.Join(n.Dir(), "objects", "pack", "pack-"+gone+"."+ext)); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.Reload(); err != nil {
		t.Fatalf("reload with a pack removed after the listing: %v", err)
	}
	if _, err := n.Commit(c); err != nil {
		t.Fatalf("commit after the reload: %v", err)
	}
	// The index still there, the pack gone (git removes the pack first).
	before := map[string]bool{}
	packDir := filepath.Join(n.Dir(), "objects", "pack")
	ents, _ := os.ReadDir(packDir)
	for _, e := range ents {
		before[e.Name()] = true
	}
	mustPush(t, n, []tarEntry{{Name: "b.txt", Body: "b\n"}}, nil, 1700000001)
	ents, _ = os.ReadDir(packDir)
	var second string
	for _, e := range ents {
		if name := e.Name(); !before[name] && strings.HasSuffix(name, ".pack") {
			second = filepath.Join(packDir, name)
		}
	}
	if second == "" {
		t.Fatal("the second push wrote no pack")
	}
	must(t, os.Rename(second, second+".moved"))
	must(t, os.Symlink(second+".gone", second))
	n2, err := Open(n.Dir(), Options{})
	if err != nil {
		t.Fatalf("open with an index whose pack was removed after the listing: %v", err)
	}
	n2.Close()
	must(t, os.Remove(second))
	must(t, os.Rename(second+".moved", second))
	again, err := Open(n.Dir(), Options{})
	if err != nil {
		t.Fatalf("open with a pack removed after the listing: %v", err)
	}
	defer again.Close()
	if _, err := again.Commit(c); err != nil {
		t.Fatalf("commit after the open: %v", err)
	}
}
