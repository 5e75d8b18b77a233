package merge

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/storage/filesystem"
)

// file is one path of a generated tree.
type genFile struct {
	mode string // "100644", "100755", "120000"
	data []byte
}

type genTree map[string]genFile

func (t genTree) clone() genTree {
	c := make(genTree, len(t))
	for k, v := range t {
		c[k] = v
	}
	return c
}

// valid reports whether no path is both a file and a directory.
func (t genTree) valid() bool {
	for p := range t {
		for d := filepath.Dir(p); d != "."; d = filepath.Dir(d) {
			if _, ok := t[d]; ok {
				return false
			}
		}
	}
	return true
}

func (t genTree) paths() []string {
	ps := make([]string, 0, len(t))
	for p := range t {
		ps = append(ps, p)
	}
	sort.Strings(ps)
	return ps
}

// scenarioGen makes seeded merge scenarios: a base tree and two edited
// copies.
type scenarioGen struct {
	r    *rand.Rand
	text *textGen
	seq  int
}

var genDirs = []string{"", "", "a/", "a/b/", "c/", "a/b/d/"}

func (g *scenarioGen) newPath() string {
	g.seq++
	return fmt.Sprintf("%sf%d.txt", genDirs[g.r.Intn(len(genDirs))], g.r.Intn(12))
}

func (g *scenarioGen) content() []byte {
	st := textStyle{crlf: g.r.Intn(10) == 0, noEOL: g.r.Intn(6) == 0}
	if g.r.Intn(25) == 0 {
		return append([]byte("bin\x00"), st.join(g.text.base())...)
	}
	return st.join(g.text.base())
}

func (g *scenarioGen) base() genTree {
	t := genTree{}
	n := 2 + g.r.Intn(7)
	for len(t) < n {
		p := g.newPath()
		f := genFile{mode: "100644", data: g.content()}
		switch g.r.Intn(12) {
		case 0:
			f.mode = "100755"
		case 1:
			f = genFile{mode: "120000", data: []byte(fmt.Sprintf("target%d", g.r.Intn(5)))}
		}
		t[p] = f
		if !t.valid() {
			delete(t, p)
		}
	}
	return t
}

// editText applies textGen edits to data, keeping its line-end style.
func (g *scenarioGen) editText(data []byte) []byte {
	st := textStyle{crlf: bytes.Contains(data, []byte("\r\n")), noEOL: len(data) > 0 && data[len(data)-1] != '\n'}
	s := string(data)
	eol := "\n"
	if st.crlf {
		eol = "\r\n"
	}
	s = strings.TrimSuffix(s, eol)
	var lines []string
	if s != "" {
		lines = strings.Split(s, eol)
	}
	out := st.join(g.text.edit(lines))
	if g.r.Intn(15) == 0 {
		st.noEOL = !st.noEOL
		out = st.join(g.text.edit(lines))
	}
	return out
}

func (g *scenarioGen) mutate(t genTree, ops int) genTree {
	t = t.clone()
	for k := 0; k < ops; k++ {
		ps := t.paths()
		if len(ps) == 0 {
			t[g.newPath()] = genFile{mode: "100644", data: g.content()}
			continue
		}
		p := ps[g.r.Intn(len(ps))]
		f := t[p]
		before := t.clone()
		switch op := g.r.Intn(20); {
		case op < 9: // edit content
			if f.mode == "120000" {
				f.data = []byte(fmt.Sprintf("target%d", g.r.Intn(5)))
			} else {
				f.data = g.editText(f.data)
			}
			t[p] = f
		case op < 11: // add
			t[g.newPath()] = genFile{mode: "100644", data: g.content()}
		case op < 13: // delete
			delete(t, p)
		case op < 14: // rename (delete + add, maybe with an edit)
			delete(t, p)
			if g.r.Intn(2) == 0 && f.mode != "120000" {
				f.data = g.editText(f.data)
			}
			t[g.newPath()] = f
		case op < 16: // mode flip
			switch f.mode {
			case "100644":
				f.mode = "100755"
			case "100755":
				f.mode = "100644"
			}
			t[p] = f
		case op < 17: // file becomes a directory
			delete(t, p)
			t[p+"/g.txt"] = genFile{mode: "100644", data: g.content()}
		case op < 18: // type change: regular <-> symlink
			if f.mode == "120000" {
				t[p] = genFile{mode: "100644", data: g.content()}
			} else {
				t[p] = genFile{mode: "120000", data: []byte("target9")}
			}
		default: // edit and flip
			if f.mode != "120000" {
				f.data = g.editText(f.data)
				if f.mode == "100644" {
					f.mode = "100755"
				} else {
					f.mode = "100644"
				}
				t[p] = f
			}
		}
		if !t.valid() {
			t = before
		}
	}
	return t
}

func (g *scenarioGen) scenario() (b, o, t genTree) {
	b = g.base()
	o = g.mutate(b, 1+g.r.Intn(3))
	switch g.r.Intn(8) {
	case 0: // theirs makes ours' changes and more
		t = g.mutate(o, 1+g.r.Intn(2))
	case 1: // theirs edits the same files as ours
		t = b.clone()
		for _, p := range o.paths() {
			if bf, ok := b[p]; ok && bf.mode != "120000" && o[p].mode != "120000" && !bytes.Equal(bf.data, o[p].data) {
				nf := bf
				nf.data = g.editText(bf.data)
				t[p] = nf
			}
		}
		if !t.valid() {
			t = g.mutate(b, 1)
		}
	default:
		t = g.mutate(b, 1+g.r.Intn(3))
	}
	return b, o, t
}

// fastImport writes trees as commits with git fast-import and returns the
// commit oids by mark.
type importer struct {
	buf   bytes.Buffer
	mark  int
	blobs map[string]int
}

func (im *importer) blob(data []byte) int {
	if m, ok := im.blobs[string(data)]; ok {
		return m
	}
	im.mark++
	fmt.Fprintf(&im.buf, "blob\nmark :%d\ndata %d\n", im.mark, len(data))
	im.buf.Write(data)
	im.buf.WriteByte('\n')
	im.blobs[string(data)] = im.mark
	return im.mark
}

func (im *importer) commit(ref string, parent int, t genTree, when int) int {
	marks := map[string]int{}
	for _, p := range t.paths() {
		marks[p] = im.blob(t[p].data)
	}
	im.mark++
	fmt.Fprintf(&im.buf, "commit %s\nmark :%d\ncommitter T <t@example.com> %d +0000\ndata 0\n", ref, im.mark, when)
	if parent > 0 {
		fmt.Fprintf(&im.buf, "from :%d\n", parent)
	}
	im.buf.WriteString("deleteall\n")
	for _, p := range t.paths() {
		fmt.Fprintf(&im.buf, "M %s :%d %s\n", t[p].mode, marks[p], p)
	}
	im.buf.WriteByte('\n')
	return im.mark
}

func runImport(tb testing.TB, dir string, stream []byte) map[int]plumbing.Hash {
	tb.Helper()
	gitRun(tb, dir, nil, "init", "-q", "--bare", ".")
	marksFile := filepath.Join(dir, "marks")
	gitRun(tb, dir, stream, "fast-import", "--quiet", "--export-marks="+marksFile)
	data, err := os.ReadFile(marksFile)
	if err != nil {
		tb.Fatal(err)
	}
	out := map[int]plumbing.Hash{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		var m int
		var h string
		if _, err := fmt.Sscanf(sc.Text(), ":%d %s", &m, &h); err == nil {
			out[m] = plumbing.NewHash(h)
		}
	}
	return out
}

func gitRun(tb testing.TB, dir string, stdin []byte, args ...string) []byte {
	tb.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		tb.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return out
}

type gitMerge struct {
	clean     bool
	tree      plumbing.Hash
	conflicts []string // paths with stages, sorted, unique
	messages  string
}

func gitMergeTree(tb testing.TB, dir string, extra []string, ours, theirs string) gitMerge {
	tb.Helper()
	args := append(append([]string{}, extra...), "merge-tree", "--write-tree", "--messages", ours, theirs)
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
	out, err := cmd.Output()
	res := gitMerge{clean: err == nil}
	if err != nil {
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
			tb.Fatalf("git merge-tree: %v\n%s", err, out)
		}
	}
	parts := strings.SplitN(string(out), "\n\n", 2)
	lines := strings.Split(strings.TrimSpace(parts[0]), "\n")
	res.tree = plumbing.NewHash(lines[0])
	seen := map[string]bool{}
	for _, l := range lines[1:] {
		i := strings.IndexByte(l, '\t')
		if i < 0 {
			continue
		}
		p := l[i+1:]
		// A file moved aside by a file/directory conflict ("f~ours"):
		// we report it at its own path.
		if j := strings.LastIndex(p, "~"); j > 0 {
			p = p[:j]
		}
		if !seen[p] {
			seen[p] = true
			res.conflicts = append(res.conflicts, p)
		}
	}
	sort.Strings(res.conflicts)
	if len(parts) > 1 {
		res.messages = parts[1]
	}
	return res
}

// TestOracleMergeTree compares Merge (Deep) with git merge-tree --write-tree
// on generated scenarios. When git is clean we must be clean with the same
// tree oid; when git conflicts we must conflict on the same paths.
func TestOracleMergeTree(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	n := 800
	if testing.Short() {
		n = 100
	}
	dir := tempDir(t)
	if d := os.Getenv("MERGE_ORACLE_DIR"); d != "" {
		dir = d
	}
	seed := int64(42)
	if v, err := strconv.ParseInt(os.Getenv("MERGE_ORACLE_SEED"), 10, 64); err == nil {
		seed = v // explore other scenarios; 42 is the committed baseline
	}
	g := &scenarioGen{r: rand.New(rand.NewSource(seed)), text: &textGen{r: rand.New(rand.NewSource(seed + 1))}}
	im := &importer{blobs: map[string]int{}}
	type kase struct{ ours, theirs int }
	cases := make([]kase, n)
	for i := range cases {
		b, o, th := g.scenario()
		bm := im.commit(fmt.Sprintf("refs/heads/c%d-base", i), 0, b, 1700000000+i)
		cases[i].ours = im.commit(fmt.Sprintf("refs/heads/c%d-ours", i), bm, o, 1700000001+i)
		cases[i].theirs = im.commit(fmt.Sprintf("refs/heads/c%d-theirs", i), bm, th, 1700000002+i)
	}
	marks := runImport(t, dir, im.buf.Bytes())
	// Which side commits contain a delete+add that git pairs as a rename
	// (git diff -M, the detection merge-ort uses, same 50% threshold)?
	var sides bytes.Buffer
	for _, c := range cases {
		fmt.Fprintf(&sides, "%s\n%s\n", marks[c.ours], marks[c.theirs])
	}
	renamed := map[plumbing.Hash]bool{}
	var cur plumbing.Hash
	for _, l := range strings.Split(string(gitRun(t, dir, sides.Bytes(), "diff-tree", "--stdin", "-r", "-M", "--name-status")), "\n") {
		switch {
		case len(l) == 40:
			cur = plumbing.NewHash(l)
		case strings.HasPrefix(l, "R"):
			renamed[cur] = true
		}
	}
	st := filesystem.NewStorage(osfs.New(dir), cache.NewObjectLRUDefault())
	ctx := context.Background()

	var compared, gitClean, gitConflict, renames int
	markerSame, markerTotal := map[string]int{}, map[string]int{}
	for i, c := range cases {
		oursRef, theirsRef := fmt.Sprintf("c%d-ours", i), fmt.Sprintf("c%d-theirs", i)
		want := gitMergeTree(t, dir, nil, oursRef, theirsRef)
		ov := NewOverlay(st)
		got, err := Merge(ctx, ov, marks[c.ours], marks[c.theirs], Options{Deep: true})
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if renamed[marks[c.ours]] || renamed[marks[c.theirs]] || mentionsRename(want.messages) {
			renames++ // compared like the rest since rename detection
		}
		if !matches(got, want) {
			t.Errorf("case %d (%s %s): git clean=%v tree=%s conflicts=%v\nmessages:\n%s\nwe: clean=%v tree=%s conflicts=%v",
				i, oursRef, theirsRef, want.clean, want.tree, want.conflicts, want.messages, got.Clean, got.Tree, conflictPaths(got))
			continue
		}
		compared++
		if want.clean {
			gitClean++
			continue
		}
		gitConflict++
		// With markers, git's conflicted tree should be ours too (same
		// labels as git: the branch names). Informational: see the log.
		mk, err := Merge(ctx, NewOverlay(st), marks[c.ours], marks[c.theirs], Options{Deep: true, Markers: true, OursLabel: oursRef, TheirsLabel: theirsRef})
		if err != nil {
			t.Fatal(err)
		}
		kinds := map[string]bool{}
		for _, cf := range mk.Conflicts {
			kinds[cf.Kind] = true
		}
		key := fmt.Sprint(sortedKeys(kinds))
		markerTotal[key]++
		if mk.Tree == want.tree {
			markerSame[key]++
		} else if os.Getenv("MERGE_ORACLE_VERBOSE") != "" {
			t.Logf("case %d: conflicted tree differs (%v)", i, key)
		}
	}
	t.Logf("merge-tree oracle: %d scenarios; %d compared (%d clean with identical tree oid, %d conflicted on the same paths); "+
		"%d of them with a rename git detected (compared too); "+
		"conflicted trees (Markers) identical to git's, by conflict kinds: %v of %v",
		n, compared, gitClean, gitConflict, renames, markerSame, markerTotal)
	if compared < 500 && !testing.Short() {
		t.Errorf("only %d of %d scenarios compared", compared, n)
	}
}

func conflictPaths(r *Result) []string {
	var ps []string
	for _, c := range r.Conflicts {
		ps = append(ps, c.Path)
	}
	sort.Strings(ps)
	return ps
}

func matches(got *Result, want gitMerge) bool {
	if want.clean {
		return got.Clean && got.Tree == want.tree
	}
	if got.Clean {
		return false
	}
	a, b := conflictPaths(got), want.conflicts
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func sortedKeys(m map[string]bool) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// TestOracleCrissCross compares Merge with git merge-tree on criss-cross
// histories: A2 (parents A1, B1) and B2 (parents B1, A1), each with its
// own edits, so that git builds a virtual merge base from A1 and B1.
func TestOracleCrissCross(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	n := 200
	if testing.Short() {
		n = 30
	}
	dir := tempDir(t)
	if d := os.Getenv("MERGE_ORACLE_DIR"); d != "" {
		dir = d
	}
	g := &scenarioGen{r: rand.New(rand.NewSource(77)), text: &textGen{r: rand.New(rand.NewSource(78))}}
	im := &importer{blobs: map[string]int{}}
	withMerge := func(first, second int) {
		s := im.buf.String()
		from := fmt.Sprintf("from :%d\n", first)
		k := strings.LastIndex(s, from)
		im.buf.Reset()
		im.buf.WriteString(s[:k] + from + fmt.Sprintf("merge :%d\n", second) + s[k+len(from):])
	}
	type kase struct{ a2, b2, a1, b1 int }
	cases := make([]kase, n)
	for i := range cases {
		b := g.base()
		a1t, b1t := g.mutate(b, 1+g.r.Intn(2)), g.mutate(b, 1+g.r.Intn(2))
		bm := im.commit(fmt.Sprintf("refs/heads/x%d-base", i), 0, b, 1700000000+10*i)
		a1 := im.commit(fmt.Sprintf("refs/heads/x%d-a", i), bm, a1t, 1700000001+10*i)
		b1 := im.commit(fmt.Sprintf("refs/heads/x%d-b", i), bm, b1t, 1700000002+10*i)
		a2 := im.commit(fmt.Sprintf("refs/heads/x%d-a", i), a1, g.mutate(a1t, 1), 1700000003+10*i)
		withMerge(a1, b1)
		b2 := im.commit(fmt.Sprintf("refs/heads/x%d-b", i), b1, g.mutate(b1t, 1), 1700000004+10*i)
		withMerge(b1, a1)
		cases[i] = kase{a2, b2, a1, b1}
	}
	marks := runImport(t, dir, im.buf.Bytes())
	var sides bytes.Buffer
	for _, c := range cases {
		for _, m := range []int{c.a1, c.b1} {
			fmt.Fprintf(&sides, "%s\n", marks[m])
		}
		fmt.Fprintf(&sides, "%s %s\n%s %s\n", marks[c.a2], marks[c.a1], marks[c.b2], marks[c.b1])
	}
	renamed := map[plumbing.Hash]bool{}
	var cur plumbing.Hash
	for _, l := range strings.Split(string(gitRun(t, dir, sides.Bytes(), "diff-tree", "--stdin", "-r", "-M", "--name-status")), "\n") {
		switch {
		case len(l) == 40:
			cur = plumbing.NewHash(l)
		case len(l) == 81:
			cur = plumbing.NewHash(l[:40])
		case strings.HasPrefix(l, "R"):
			renamed[cur] = true
		}
	}
	st := filesystem.NewStorage(osfs.New(dir), cache.NewObjectLRUDefault())
	var compared, clean, excluded int
	for i, c := range cases {
		aRef, bRef := fmt.Sprintf("x%d-a", i), fmt.Sprintf("x%d-b", i)
		want := gitMergeTree(t, dir, nil, aRef, bRef)
		if renamed[marks[c.a1]] || renamed[marks[c.b1]] || renamed[marks[c.a2]] || renamed[marks[c.b2]] || mentionsRename(want.messages) {
			excluded++ // counted, and compared like the rest since rename detection
		}
		got, err := Merge(context.Background(), NewOverlay(st), marks[c.a2], marks[c.b2], Options{Deep: true})
		if err != nil {
			t.Fatal(err)
		}
		if !matches(got, want) {
			t.Errorf("case %d (%s %s): git clean=%v tree=%s conflicts=%v\nmessages:\n%s\nwe: clean=%v tree=%s conflicts=%v",
				i, aRef, bRef, want.clean, want.tree, want.conflicts, want.messages, got.Clean, got.Tree, conflictPaths(got))
			continue
		}
		compared++
		if want.clean {
			clean++
		}
	}
	t.Logf("criss-cross oracle: %d cases, %d compared (%d clean with identical tree oid), %d of them with renames (compared too)", n, compared, clean, excluded)
}

// mentionsRename reports whether git's messages show rename detection. The
// "distinct types" conflict says "renamed one of them" about moving a side
// aside: that is not rename detection.
func mentionsRename(messages string) bool {
	m := strings.ReplaceAll(messages, "renamed one of them so each can be recorded somewhere", "")
	return strings.Contains(strings.ToLower(m), "rename")
}
