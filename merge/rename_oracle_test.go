package merge

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"strconv"
	"testing"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/storage/filesystem"
)

// renameGen makes merge scenarios about renames: files moved (same or new
// basename, another directory), moved and edited, moved on both sides,
// moved on one side and deleted, edited or re-added on the other, and
// whole directories moved.
type renameGen struct {
	*scenarioGen
}

var renameDirs = []string{"", "a/", "a/b/", "c/", "d/e/"}

func (g *renameGen) path() string {
	return fmt.Sprintf("%sf%d.txt", renameDirs[g.r.Intn(len(renameDirs))], g.r.Intn(8))
}

func (g *renameGen) text() []byte {
	n := 6 + g.r.Intn(20)
	st := textStyle{crlf: g.r.Intn(12) == 0}
	lines := make([]string, n)
	for i := range lines {
		lines[i] = g.scenarioGen.text.line()
	}
	return st.join(lines)
}

func (g *renameGen) base() genTree {
	t := genTree{}
	n := 3 + g.r.Intn(6)
	for len(t) < n {
		p := g.path()
		t[p] = genFile{mode: "100644", data: g.text()}
		if !t.valid() {
			delete(t, p)
		}
	}
	return t
}

// mutate applies ops edits, most of them renames.
func (g *renameGen) mutate(t genTree, ops int) genTree {
	t = t.clone()
	for k := 0; k < ops; k++ {
		ps := t.paths()
		if len(ps) == 0 {
			t[g.path()] = genFile{mode: "100644", data: g.text()}
			continue
		}
		p := ps[g.r.Intn(len(ps))]
		f := t[p]
		before := t.clone()
		switch op := g.r.Intn(20); {
		case op < 5: // edit
			f.data = g.editText(f.data)
			t[p] = f
		case op < 9: // pure rename
			delete(t, p)
			t[g.path()] = f
		case op < 12: // rename and edit
			delete(t, p)
			f.data = g.editText(f.data)
			t[g.path()] = f
		case op < 13: // rename keeping the basename
			delete(t, p)
			t[renameDirs[g.r.Intn(len(renameDirs))]+baseName(p)] = f
		case op < 14: // delete
			delete(t, p)
		case op < 15: // add
			t[g.path()] = genFile{mode: "100644", data: g.text()}
		case op < 16: // add a copy-like file (similar to an existing one)
			t[g.path()] = genFile{mode: "100644", data: g.editText(f.data)}
		case op < 18: // move a whole directory
			dir := parentDir(p)
			to := renameDirs[g.r.Intn(len(renameDirs))]
			for _, q := range ps {
				if parentDir(q) == dir {
					ff := t[q]
					delete(t, q)
					t[to+baseName(q)] = ff
				}
			}
		default: // mode flip
			if f.mode == "100644" {
				f.mode = "100755"
			} else {
				f.mode = "100644"
			}
			t[p] = f
		}
		if !t.valid() {
			t = before
		}
	}
	return t
}

func (g *renameGen) scenario() (b, o, t genTree) {
	b = g.base()
	o = g.mutate(b, 1+g.r.Intn(3))
	switch g.r.Intn(4) {
	case 0: // theirs edits what ours touched
		t = b.clone()
		for _, p := range b.paths() {
			if g.r.Intn(2) == 0 {
				f := t[p]
				f.data = g.editText(f.data)
				t[p] = f
			}
		}
	default:
		t = g.mutate(b, 1+g.r.Intn(3))
	}
	return b, o, t
}

// TestRenameOracle compares Merge (Deep, renames on) with git merge-tree
// --write-tree on generated rename scenarios: the same tree oid when git
// is clean, the same conflicted paths when it is not. With renames off it
// checks the option: the merge must equal git's with -X no-renames.
func TestRenameOracle(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	n := 600
	if testing.Short() {
		n = 100
	}
	dir := tempDir(t)
	if d := os.Getenv("MERGE_ORACLE_DIR"); d != "" {
		dir = d // keep the repository to look at a case
	}
	seed := int64(7)
	if v, err := strconv.ParseInt(os.Getenv("MERGE_ORACLE_SEED"), 10, 64); err == nil {
		seed = v
	}
	g := &renameGen{&scenarioGen{r: rand.New(rand.NewSource(seed)), text: &textGen{r: rand.New(rand.NewSource(seed + 1)), vocab: 8}}}
	im := &importer{blobs: map[string]int{}}
	type kase struct{ ours, theirs int }
	cases := make([]kase, n)
	for i := range cases {
		b, o, th := g.scenario()
		bm := im.commit(fmt.Sprintf("refs/heads/r%d-base", i), 0, b, 1700000000+i)
		cases[i].ours = im.commit(fmt.Sprintf("refs/heads/r%d-ours", i), bm, o, 1700000001+i)
		cases[i].theirs = im.commit(fmt.Sprintf("refs/heads/r%d-theirs", i), bm, th, 1700000002+i)
	}
	marks := runImport(t, dir, im.buf.Bytes())
	st := filesystem.NewStorage(osfs.New(dir), cache.NewObjectLRUDefault())
	ctx := context.Background()
	var same, clean, renamed, failed int
	for i, c := range cases {
		oursRef, theirsRef := fmt.Sprintf("r%d-ours", i), fmt.Sprintf("r%d-theirs", i)
		want := gitMergeTree(t, dir, nil, oursRef, theirsRef)
		got, err := Merge(ctx, NewOverlay(st), marks[c.ours], marks[c.theirs], Options{Deep: true})
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if mentionsRename(want.messages) {
			renamed++
		}
		if !matches(got, want) {
			failed++
			t.Errorf("case %d (%s %s): git clean=%v tree=%s conflicts=%v\nmessages:\n%s\nwe: clean=%v tree=%s conflicts=%v (%+v)",
				i, oursRef, theirsRef, want.clean, want.tree, want.conflicts, want.messages, got.Clean, got.Tree, conflictPaths(got), got.Conflicts)
			continue
		}
		same++
		if want.clean {
			clean++
		}
		// Conflict records: every conflict names a kind, rename
		// conflicts their paths, and no hunk is empty on every side.
		for _, cf := range got.Conflicts {
			if cf.Kind == "" {
				t.Errorf("case %d: conflict %s without a kind", i, cf.Path)
			}
			if (cf.Kind == KindRenameDelete || cf.Kind == KindRenameRename || cf.Kind == KindRenameAdd) && len(cf.Paths) < 2 {
				t.Errorf("case %d: %s conflict at %s does not name its paths: %+v", i, cf.Kind, cf.Path, cf)
			}
			for _, h := range cf.Hunks {
				if h.Base.Count == 0 && h.Ours.Count == 0 && h.Theirs.Count == 0 {
					t.Errorf("case %d: empty hunk in %s: %+v", i, cf.Path, h)
				}
			}
		}
	}
	t.Logf("rename oracle: %d scenarios, %d with rename conflicts in git's messages; %d agree with git (%d clean with the same tree oid), %d differ",
		n, renamed, same, clean, failed)
	if renamed < n/8 {
		t.Errorf("only %d of %d scenarios involve renames", renamed, n)
	}
}
