package merge

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"os/exec"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/filesystem"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/gitobj"
)

type f struct {
	mode fileMode
	data string
}

func txt(s string) f { return f{modeRegular, s} }

// mustTree writes files (path → content) as nested trees.
func mustTree(tb testing.TB, s Store, files map[string]f) plumbing.Hash {
	tb.Helper()
	type dir struct {
		files map[string]f
		dirs  map[string]*dir
	}
	newDir := func() *dir { return &dir{files: map[string]f{}, dirs: map[string]*dir{}} }
	root := newDir()
	for p, c := range files {
		parts := strings.Split(p, "/")
		d := root
		for _, part := range parts[:len(parts)-1] {
			if d.dirs[part] == nil {
				d.dirs[part] = newDir()
			}
			d = d.dirs[part]
		}
		d.files[parts[len(parts)-1]] = c
	}
	var write func(d *dir) plumbing.Hash
	write = func(d *dir) plumbing.Hash {
		var ents []entry
		for name, c := range d.files {
			h, err := writeBlob(s, []byte(c.data))
			if err != nil {
				tb.Fatal(err)
			}
			ents = append(ents, entry{Name: name, Mode: c.mode, Hash: h})
		}
		for name, sub := range d.dirs {
			ents = append(ents, entry{Name: name, Mode: modeDir, Hash: write(sub)})
		}
		h, err := writeTree(s, ents)
		if err != nil {
			tb.Fatal(err)
		}
		if h == emptyTree {
			s.SetEncodedObject(gitobj.NewObject(gitobj.TreeObject, nil))
		}
		return h
	}
	return write(root)
}

var clock int64

func mustCommit(tb testing.TB, s Store, tree plumbing.Hash, parents ...plumbing.Hash) plumbing.Hash {
	tb.Helper()
	sig := object.Signature{Name: "t", Email: "t@example.com", When: time.Unix(1700000000+atomic.AddInt64(&clock, 1), 0).UTC()}
	obj := gitobj.EncodeCommit(gitobj.CommitSpec{Author: sig, Committer: sig, Message: "m\n", Tree: tree, Parents: parents})
	h, err := s.SetEncodedObject(obj)
	if err != nil {
		tb.Fatal(err)
	}
	return h
}

// readFiles flattens a tree into path → content.
func readFiles(tb testing.TB, s Store, tree plumbing.Hash) map[string]f {
	tb.Helper()
	out := map[string]f{}
	var walk func(prefix string, h plumbing.Hash)
	walk = func(prefix string, h plumbing.Hash) {
		ents, err := readTree(s, h)
		if err != nil {
			tb.Fatal(err)
		}
		for _, e := range ents {
			if e.Mode == modeDir {
				walk(prefix+e.Name+"/", e.Hash)
				continue
			}
			data, err := readObject(s, plumbing.BlobObject, e.Hash)
			if err != nil {
				tb.Fatal(err)
			}
			out[prefix+e.Name] = f{e.Mode, string(data)}
		}
	}
	walk("", tree)
	return out
}

// scenario builds base, ours and theirs commits in a memory storage.
func scenario(tb testing.TB, base, ours, theirs map[string]f) (*memory.Storage, plumbing.Hash, plumbing.Hash) {
	s := memory.NewStorage()
	b := mustCommit(tb, s, mustTree(tb, s, base))
	o := mustCommit(tb, s, mustTree(tb, s, ours), b)
	t := mustCommit(tb, s, mustTree(tb, s, theirs), b)
	return s, o, t
}

const ten = "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n"

func TestMergeRules(t *testing.T) {
	exe := func(s string) f { return f{modeExecutable, s} }
	link := func(s string) f { return f{modeSymlink, s} }
	tests := []struct {
		name               string
		opts               Options
		base, ours, theirs map[string]f
		want               map[string]f // merged files when clean
		conflicts          []string     // "path kind"
	}{
		{name: "different files", base: map[string]f{"a": txt("a\n"), "d/b": txt("b\n")},
			ours: map[string]f{"a": txt("A\n"), "d/b": txt("b\n")}, theirs: map[string]f{"a": txt("a\n"), "d/b": txt("B\n")},
			want: map[string]f{"a": txt("A\n"), "d/b": txt("B\n")}},
		{name: "same file, different hunks, shallow", base: map[string]f{"a": txt(ten)},
			ours: map[string]f{"a": txt(strings.Replace(ten, "2\n", "two\n", 1))}, theirs: map[string]f{"a": txt(strings.Replace(ten, "9\n", "nine\n", 1))},
			conflicts: []string{"a content"}},
		{name: "same file, different hunks, deep", opts: Options{Deep: true}, base: map[string]f{"a": txt(ten)},
			ours: map[string]f{"a": txt(strings.Replace(ten, "2\n", "two\n", 1))}, theirs: map[string]f{"a": txt(strings.Replace(ten, "9\n", "nine\n", 1))},
			want: map[string]f{"a": txt(strings.NewReplacer("2\n", "two\n", "9\n", "nine\n").Replace(ten))}},
		{name: "identical change", base: map[string]f{"a": txt("a\n")},
			ours: map[string]f{"a": txt("x\n")}, theirs: map[string]f{"a": txt("x\n")}, want: map[string]f{"a": txt("x\n")}},
		{name: "delete/delete", base: map[string]f{"a": txt("a\n"), "b": txt("b\n")},
			ours: map[string]f{"b": txt("b\n")}, theirs: map[string]f{"b": txt("b\n")}, want: map[string]f{"b": txt("b\n")}},
		{name: "modify/delete", base: map[string]f{"a": txt("a\n"), "b": txt("b\n")},
			ours: map[string]f{"a": txt("A\n"), "b": txt("b\n")}, theirs: map[string]f{"b": txt("b\n")}, conflicts: []string{"a modify-delete"}},
		{name: "add/add identical", base: map[string]f{},
			ours: map[string]f{"n": txt("x\n")}, theirs: map[string]f{"n": txt("x\n")}, want: map[string]f{"n": txt("x\n")}},
		{name: "add/add different", opts: Options{Deep: true}, base: map[string]f{"k": txt("k\n")},
			ours: map[string]f{"k": txt("k\n"), "n": txt("x\n")}, theirs: map[string]f{"k": txt("k\n"), "n": txt("y\n")}, conflicts: []string{"n add-add"}},
		{name: "mode flip + edit", opts: Options{Deep: true}, base: map[string]f{"s": txt("a\n")},
			ours: map[string]f{"s": exe("a\n")}, theirs: map[string]f{"s": txt("b\n")}, want: map[string]f{"s": exe("b\n")}},
		{name: "add/add different modes", base: map[string]f{"k": txt("k\n")},
			ours: map[string]f{"k": txt("k\n"), "n": exe("x\n")}, theirs: map[string]f{"k": txt("k\n"), "n": txt("x\n")}, conflicts: []string{"n mode"}},
		{name: "symlink never line-merged", opts: Options{Deep: true}, base: map[string]f{"l": link("a")},
			ours: map[string]f{"l": link("b")}, theirs: map[string]f{"l": link("c")}, conflicts: []string{"l content"}},
		{name: "symlink vs file", opts: Options{Deep: true}, base: map[string]f{"l": txt("a\n")},
			ours: map[string]f{"l": link("b")}, theirs: map[string]f{"l": txt("c\n")}, conflicts: []string{"l type"}},
		{name: "file vs directory", opts: Options{Deep: true}, base: map[string]f{"k": txt("k\n")},
			ours: map[string]f{"k": txt("k\n"), "x": txt("file\n")}, theirs: map[string]f{"k": txt("k\n"), "x/y": txt("dir\n")}, conflicts: []string{"x type"}},
		{name: "binary", opts: Options{Deep: true}, base: map[string]f{"b": txt("a\x00\n1\n2\n3\n")},
			ours: map[string]f{"b": txt("A\x00\n1\n2\n3\n")}, theirs: map[string]f{"b": txt("a\x00\n1\n2\nC\n")}, conflicts: []string{"b content"}},
		{name: "too large", opts: Options{Deep: true, MaxFileBytes: 5}, base: map[string]f{"a": txt(ten)},
			ours: map[string]f{"a": txt(strings.Replace(ten, "2\n", "two\n", 1))}, theirs: map[string]f{"a": txt(strings.Replace(ten, "9\n", "nine\n", 1))},
			conflicts: []string{"a content"}},
		{name: "directory deleted, file in it modified", base: map[string]f{"d/a": txt("a\n"), "d/b": txt("b\n"), "k": txt("k\n")},
			ours: map[string]f{"k": txt("k\n")}, theirs: map[string]f{"d/a": txt("A\n"), "d/b": txt("b\n"), "k": txt("k\n")}, conflicts: []string{"d/a modify-delete"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, o, th := scenario(t, tt.base, tt.ours, tt.theirs)
			res, err := Merge(context.Background(), s, o, th, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, c := range res.Conflicts {
				got = append(got, c.Path+" "+c.Kind)
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.conflicts) {
				t.Fatalf("conflicts %v, want %v", got, tt.conflicts)
			}
			if res.Clean != (len(tt.conflicts) == 0) {
				t.Fatalf("clean = %v", res.Clean)
			}
			if !res.Clean {
				if !res.Tree.IsZero() {
					t.Errorf("tree %s without Markers", res.Tree)
				}
				return
			}
			if files := readFiles(t, s, res.Tree); fmt.Sprint(files) != fmt.Sprint(tt.want) {
				t.Errorf("files %v, want %v", files, tt.want)
			}
		})
	}
}

func TestMergeMarkersAndJSON(t *testing.T) {
	s, o, th := scenario(t, map[string]f{"a": txt("1\n2\n3\n"), "b": txt("b\n")},
		map[string]f{"a": txt("1\nX\n3\n")}, map[string]f{"a": txt("1\nY\n3\n"), "b": txt("B\n")})
	res, err := Merge(context.Background(), s, o, th, Options{Deep: true, Markers: true, OursLabel: "agent", TheirsLabel: "main"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Clean || res.Tree.IsZero() {
		t.Fatalf("clean=%v tree=%s", res.Clean, res.Tree)
	}
	files := readFiles(t, s, res.Tree)
	if want := "1\n<<<<<<< agent\nX\n=======\nY\n>>>>>>> main\n3\n"; files["a"].data != want {
		t.Errorf("a = %q, want %q", files["a"].data, want)
	}
	if files["b"].data != "B\n" { // modify/delete keeps the modified file
		t.Errorf("b = %q", files["b"].data)
	}
	rj, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(rj), `"tree":"`+res.Tree.String()+`"`) || !strings.Contains(string(rj), `"clean":false`) || strings.Count(string(rj), `"tree"`) != 1 {
		t.Errorf("result json %s", rj)
	}
	js, err := json.Marshal(res.Conflicts)
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"path":"a","kind":"content","hunks":[{"base":{"start":2,"count":1},"ours":{"start":2,"count":1},"theirs":{"start":2,"count":1},"result":{"start":2,"count":5},"content":{"base":"2\n","ours":"X\n","theirs":"Y\n"}}]},{"path":"b","kind":"modify-delete"}]`
	if string(js) != want {
		t.Errorf("json\n%s\nwant\n%s", js, want)
	}
}

func TestMergeFastForwardUpToDate(t *testing.T) {
	s := memory.NewStorage()
	a := mustCommit(t, s, mustTree(t, s, map[string]f{"a": txt("1\n")}))
	b := mustCommit(t, s, mustTree(t, s, map[string]f{"a": txt("2\n")}), a)
	ctx := context.Background()
	res, err := Merge(ctx, s, a, b, Options{})
	if err != nil || !res.FastForward || res.UpToDate || !res.Clean || res.MergeBase != a {
		t.Errorf("ff: %+v %v", res, err)
	}
	res, err = Merge(ctx, s, b, a, Options{})
	if err != nil || res.FastForward || !res.UpToDate || !res.Clean || res.MergeBase != a {
		t.Errorf("up to date: %+v %v", res, err)
	}
	res, err = Merge(ctx, s, b, b, Options{})
	if err != nil || !res.UpToDate {
		t.Errorf("same: %+v %v", res, err)
	}
	_, err = Merge(ctx, s, a, plumbing.NewHash("1234567890123456789012345678901234567890"), Options{})
	if lockstep.ErrorCode(err) != lockstep.ENOTFOUND {
		t.Errorf("missing commit: %v", err)
	}
	if _, err := Merge(ctx, s, a, b, Options{MaxFileBytes: -1}); lockstep.ErrorCode(err) != lockstep.EINVALID {
		// a fast-forward needs no options check; make it a real merge
		c := mustCommit(t, s, mustTree(t, s, map[string]f{"a": txt("1\n"), "c": txt("c\n")}), a)
		if _, err := Merge(ctx, s, b, c, Options{MaxFileBytes: -1}); lockstep.ErrorCode(err) != lockstep.EINVALID {
			t.Errorf("negative MaxFileBytes: %v", err)
		}
	}
}

func TestMergeUnrelated(t *testing.T) {
	s := memory.NewStorage()
	a := mustCommit(t, s, mustTree(t, s, map[string]f{"a": txt("1\n"), "same": txt("s\n")}))
	b := mustCommit(t, s, mustTree(t, s, map[string]f{"b": txt("2\n"), "same": txt("s\n")}))
	res, err := Merge(context.Background(), s, a, b, Options{Deep: true})
	if err != nil || !res.Clean || !res.MergeBase.IsZero() {
		t.Fatalf("%+v %v", res, err)
	}
	if got := readFiles(t, s, res.Tree); len(got) != 3 {
		t.Errorf("files %v", got)
	}
}

// TestPreflightWritesNothing: a merge into an Overlay leaves the base
// store untouched and collects exactly the new objects.
func TestPreflightWritesNothing(t *testing.T) {
	s, o, th := scenario(t, map[string]f{"d/a": txt(ten), "k": txt("k\n")},
		map[string]f{"d/a": txt(strings.Replace(ten, "2\n", "two\n", 1)), "k": txt("k\n")},
		map[string]f{"d/a": txt(strings.Replace(ten, "9\n", "nine\n", 1)), "k": txt("K\n")})
	before := len(s.Objects)
	ov := NewOverlay(s)
	res, err := Merge(context.Background(), ov, o, th, Options{Deep: true})
	if err != nil || !res.Clean {
		t.Fatalf("%+v %v", res, err)
	}
	if len(s.Objects) != before {
		t.Errorf("base store grew from %d to %d objects", before, len(s.Objects))
	}
	// merged blob d/a, tree d, root tree
	objs := ov.Objects()
	if len(objs) != 3 || objs[len(objs)-1].Hash() != res.Tree {
		t.Errorf("overlay has %d objects, last %v; want 3 ending with %s", len(objs), objs, res.Tree)
	}
	if _, err := ov.EncodedObject(plumbing.TreeObject, res.Tree); err != nil {
		t.Error(err)
	}
	// Conflicted merge without markers writes nothing, even to the overlay.
	ov2 := NewOverlay(s)
	s2o := mustCommit(t, s, mustTree(t, s, map[string]f{"d/a": txt("x\n"), "k": txt("k\n")}), o)
	if res, err := Merge(context.Background(), ov2, s2o, th, Options{Deep: true}); err != nil || res.Clean || ov2.Len() != 0 {
		t.Errorf("conflicted: %+v %v, %d objects", res, err, ov2.Len())
	}
}

// TestConcurrentPreflights: merges share one read-only base store, each
// into its own Overlay (run with -race).
func TestConcurrentPreflights(t *testing.T) {
	s, o, th := scenario(t, map[string]f{"d/a": txt(ten), "k": txt("k\n")},
		map[string]f{"d/a": txt(strings.Replace(ten, "2\n", "two\n", 1)), "k": txt("k\n")},
		map[string]f{"d/a": txt(strings.Replace(ten, "9\n", "nine\n", 1)), "k": txt("K\n")})
	want, err := Merge(context.Background(), NewOverlay(s), o, th, Options{Deep: true})
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		go func() {
			ov := NewOverlay(s)
			for j := 0; j < 20; j++ {
				res, err := Merge(context.Background(), ov, o, th, Options{Deep: true})
				if err == nil && res.Tree != want.Tree {
					err = fmt.Errorf("tree %s, want %s", res.Tree, want.Tree)
				}
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for i := 0; i < 8; i++ {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// countingStore counts tree reads.
type countingStore struct {
	Store
	trees int
}

func (c *countingStore) EncodedObject(t plumbing.ObjectType, h plumbing.Hash) (plumbing.EncodedObject, error) {
	if t == plumbing.TreeObject {
		c.trees++
	}
	return c.Store.EncodedObject(t, h)
}

// TestReadsOnlyChangedSubtrees: 100 directories, one file changed per
// side: the merge reads the three root trees and the changed directories.
func TestReadsOnlyChangedSubtrees(t *testing.T) {
	base := map[string]f{}
	for d := 0; d < 100; d++ {
		for i := 0; i < 10; i++ {
			base[fmt.Sprintf("d%d/f%d", d, i)] = txt(fmt.Sprintf("%d %d\n", d, i))
		}
	}
	ours, theirs := map[string]f{}, map[string]f{}
	for k, v := range base {
		ours[k], theirs[k] = v, v
	}
	ours["d3/f1"] = txt("ours\n")
	theirs["d7/f2"] = txt("theirs\n")
	s, o, th := scenario(t, base, ours, theirs)
	cs := &countingStore{Store: s}
	res, err := Merge(context.Background(), cs, o, th, Options{Deep: true})
	if err != nil || !res.Clean {
		t.Fatal(res, err)
	}
	if cs.trees > 3 {
		t.Errorf("read %d trees, want the 3 roots only (changed dirs are taken whole)", cs.trees)
	}
}

// TestCrissCross: two best common ancestors. The virtual base must make
// the merge match git merge-tree.
func TestCrissCross(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	dir := tempDir(t)
	im := &importer{blobs: map[string]int{}}
	lines := func(xs ...string) []byte { return []byte(strings.Join(xs, "\n") + "\n") }
	base := genTree{"f": {mode: "100644", data: lines("1", "2", "3", "4", "5", "6", "7", "8", "9")}}
	bm := im.commit("refs/heads/base", 0, base, 1700000000)
	a1t := genTree{"f": {mode: "100644", data: lines("A", "2", "3", "4", "5", "6", "7", "8", "9")}}
	b1t := genTree{"f": {mode: "100644", data: lines("1", "2", "3", "4", "5", "6", "7", "8", "B")}}
	a1 := im.commit("refs/heads/a", bm, a1t, 1700000001)
	b1 := im.commit("refs/heads/b", bm, b1t, 1700000002)
	both := lines("A", "2", "3", "4", "5", "6", "7", "8", "B")
	// a2 = merge(a1, b1) + edit line 4; b2 = merge(b1, a1) + edit line 6.
	mergeCommit := func(ref string, first, second int, data []byte, when int) int {
		m := im.commit(ref, first, genTree{"f": {mode: "100644", data: data}}, when)
		// add the second parent: rewrite the last "from" line
		s := im.buf.String()
		i := strings.LastIndex(s, fmt.Sprintf("from :%d\n", first))
		im.buf.Reset()
		im.buf.WriteString(s[:i] + fmt.Sprintf("from :%d\nmerge :%d\n", first, second) + s[i+len(fmt.Sprintf("from :%d\n", first)):])
		return m
	}
	a2 := mergeCommit("refs/heads/a", a1, b1, []byte(strings.Replace(string(both), "4\n", "four\n", 1)), 1700000003)
	b2 := mergeCommit("refs/heads/b", b1, a1, []byte(strings.Replace(string(both), "6\n", "six\n", 1)), 1700000004)
	marks := runImport(t, dir, im.buf.Bytes())
	want := gitMergeTree(t, dir, nil, "a", "b")

	st := memoryCopy(t, dir)
	bases, err := MergeBases(context.Background(), st, marks[a2], marks[b2])
	if err != nil || len(bases) != 2 {
		t.Fatalf("bases %v %v", bases, err)
	}
	res, err := Merge(context.Background(), NewOverlay(st), marks[a2], marks[b2], Options{Deep: true})
	if err != nil {
		t.Fatal(err)
	}
	if !want.clean || !res.Clean || res.Tree != want.tree {
		t.Errorf("git clean=%v tree=%s; we clean=%v tree=%s", want.clean, want.tree, res.Clean, res.Tree)
	}
	// Deterministic virtual base.
	ov1, ov2 := NewOverlay(st), NewOverlay(st)
	v1, err1 := MergeBase(context.Background(), ov1, marks[a2], marks[b2])
	v2, err2 := MergeBase(context.Background(), ov2, marks[b2], marks[a2])
	if err1 != nil || err2 != nil || v1 != v2 || v1 == bases[0] || v1 == bases[1] {
		t.Errorf("virtual bases %s %s (%v %v)", v1, v2, err1, err2)
	}
}

// memoryCopy loads every object of the repository at dir into a memory
// storage (through git cat-file), for tests on go-git's memory store.
func memoryCopy(tb testing.TB, dir string) *memory.Storage {
	tb.Helper()
	s := memory.NewStorage()
	out := gitRun(tb, dir, nil, "cat-file", "--batch-all-objects", "--batch-check=%(objectname) %(objecttype)")
	var hs []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		hs = append(hs, l)
	}
	sort.Strings(hs)
	for _, l := range hs {
		fs := strings.Fields(l)
		data := gitRun(tb, dir, nil, "cat-file", fs[1], fs[0])
		obj := s.NewEncodedObject()
		t, _ := plumbing.ParseObjectType(fs[1])
		obj.SetType(t)
		obj.SetSize(int64(len(data)))
		w, _ := obj.Writer()
		w.Write(data)
		w.Close()
		if h, _ := s.SetEncodedObject(obj); h.String() != fs[0] {
			tb.Fatalf("copy %s: got %s", fs[0], h)
		}
	}
	return s
}

// TestMergeBasesOracle compares MergeBases with git merge-base --all on
// random commit graphs (merges, criss-crosses, several roots).
func TestMergeBasesOracle(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	dir := tempDir(t)
	r := rand.New(rand.NewSource(5))
	im := &importer{blobs: map[string]int{}}
	var commits []int
	for i := 0; i < 300; i++ {
		tree := genTree{"f": {mode: "100644", data: []byte(fmt.Sprintf("%d\n", i))}}
		parent := 0
		if len(commits) > 0 && r.Intn(40) != 0 {
			parent = commits[len(commits)-1-r.Intn(min(len(commits), 8))]
		}
		m := im.commit(fmt.Sprintf("refs/heads/x%d", i), parent, tree, 1700000000+i*10+r.Intn(5))
		if parent != 0 && len(commits) > 3 && r.Intn(4) == 0 {
			second := commits[r.Intn(len(commits))]
			if second != parent {
				s := im.buf.String()
				from := fmt.Sprintf("from :%d\n", parent)
				k := strings.LastIndex(s, from)
				im.buf.Reset()
				im.buf.WriteString(s[:k] + from + fmt.Sprintf("merge :%d\n", second) + s[k+len(from):])
			}
		}
		commits = append(commits, m)
	}
	marks := runImport(t, dir, im.buf.Bytes())
	st := filesystem.NewStorage(osfs.New(dir), cache.NewObjectLRUDefault())
	multi := 0
	for i := 0; i < 200; i++ {
		a, b := marks[commits[r.Intn(len(commits))]], marks[commits[r.Intn(len(commits))]]
		cmd := exec.Command("git", "merge-base", "--all", a.String(), b.String())
		cmd.Dir = dir
		out, _ := cmd.Output() // exit 1: no common ancestor
		want := strings.Fields(string(out))
		sort.Strings(want)
		got, err := MergeBases(context.Background(), st, a, b)
		if err != nil {
			t.Fatal(err)
		}
		var gs []string
		for _, h := range got {
			gs = append(gs, h.String())
		}
		sort.Strings(gs)
		if fmt.Sprint(gs) != fmt.Sprint(want) {
			t.Errorf("merge-base %s %s: got %v, git %v", a, b, gs, want)
		}
		if len(want) > 1 {
			multi++
		}
	}
	t.Logf("merge-base oracle: 200 pairs, %d with several best common ancestors", multi)
}

func TestMergeDeletesEverything(t *testing.T) {
	s, o, th := scenario(t, map[string]f{"a": txt("a\n"), "b": txt("b\n")}, map[string]f{"b": txt("b\n")}, map[string]f{"a": txt("a\n")})
	ov := NewOverlay(memory.NewStorage())
	res, err := Merge(context.Background(), &readThrough{s, ov}, o, th, Options{})
	if err != nil || !res.Clean || res.Tree != EmptyTree() {
		t.Fatalf("%+v %v", res, err)
	}
	if err := ov.HasEncodedObject(res.Tree); err != nil {
		t.Errorf("empty tree not written: %v", err)
	}
}

// readThrough reads from r and writes to w.
type readThrough struct {
	r Store
	w *Overlay
}

func (x *readThrough) EncodedObject(t plumbing.ObjectType, h plumbing.Hash) (plumbing.EncodedObject, error) {
	return x.r.EncodedObject(t, h)
}
func (x *readThrough) HasEncodedObject(h plumbing.Hash) error { return x.r.HasEncodedObject(h) }
func (x *readThrough) SetEncodedObject(o plumbing.EncodedObject) (plumbing.Hash, error) {
	return x.w.SetEncodedObject(o)
}

func TestMergeTreesFlagsAndCancel(t *testing.T) {
	s := memory.NewStorage()
	b := mustTree(t, s, map[string]f{"a": txt("1\n")})
	o := mustTree(t, s, map[string]f{"a": txt("2\n")})
	ctx := context.Background()
	res, err := MergeTrees(ctx, s, b, b, o, Options{})
	if err != nil || !res.FastForward || res.Tree != o || res.MergeBase != b {
		t.Errorf("fast-forward: %+v %v", res, err)
	}
	res, err = MergeTrees(ctx, s, b, o, b, Options{})
	if err != nil || !res.UpToDate || res.Tree != o {
		t.Errorf("up to date: %+v %v", res, err)
	}
	res, err = MergeTrees(ctx, s, plumbing.ZeroHash, o, o, Options{})
	if err != nil || !res.Clean || res.Tree != o {
		t.Errorf("zero base: %+v %v", res, err)
	}
	th := mustTree(t, s, map[string]f{"a": txt("1\n"), "b": txt("b\n")})
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := MergeTrees(cctx, s, b, o, th, Options{}); err != context.Canceled {
		t.Errorf("cancelled: %v", err)
	}
	if _, err := MergeTrees(ctx, s, b, o, plumbing.NewHash("1234567890123456789012345678901234567890"), Options{}); lockstep.ErrorCode(err) != lockstep.ENOTFOUND {
		t.Errorf("missing tree: %v", err)
	}
}
