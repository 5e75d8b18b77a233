package merge

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The line-merge oracle: Diff3 against git itself, byte for byte.
//
//   - Histogram (Diff3's default) against git merge-tree --write-tree,
//     i.e. merge-ort's ll_merge: every generated triple is one file of a
//     single three-commit repository, so one git call merges thousands of
//     them; the merged blobs (markers included) and the conflicted paths
//     are compared, in the default and the diff3 conflict style.
//   - Myers at merge-file's level against git merge-file (git 2.39 has no
//     --diff-algorithm; its merge-file diffs with xdiff's Myers), default
//     and --diff3 style, one process per triple.
//
// go test runs a few thousand triples (-short: a few hundred);
// -merge.oracle=N or MERGE_ORACLE_N=N runs N histogram triples (and N/5
// merge-file ones), MERGE_ORACLE_SEED explores other seeds.

var oracleN = flag.Int("merge.oracle", 0, "line-merge oracle: number of generated triples (0: default for the mode)")

func oracleSize(def, short int) int {
	if *oracleN > 0 {
		return *oracleN
	}
	if v, err := strconv.Atoi(os.Getenv("MERGE_ORACLE_N")); err == nil && v > 0 {
		return v
	}
	if testing.Short() {
		return short
	}
	return def
}

func oracleSeed() int64 {
	if v, err := strconv.ParseInt(os.Getenv("MERGE_ORACLE_SEED"), 10, 64); err == nil {
		return v
	}
	return 1
}

type triple struct{ base, ours, theirs []byte }

// genTriples mixes prose-like files with few duplicates, prose with many,
// and code-shaped files (import blocks, moves, reorderings, repeated
// lines).
func genTriples(seed int64, n int) []triple {
	r := rand.New(rand.NewSource(seed))
	tg := &textGen{r: rand.New(rand.NewSource(seed + 1))}
	tg2 := &textGen{r: rand.New(rand.NewSource(seed + 2)), vocab: 2}
	cg := &codeGen{r: rand.New(rand.NewSource(seed + 3))}
	out := make([]triple, n)
	for i := range out {
		var b, o, t []byte
		switch k := r.Intn(10); {
		case k < 3:
			b, o, t = tg.triple()
		case k < 5:
			b, o, t = tg2.triple()
		default:
			b, o, t = cg.triple()
		}
		out[i] = triple{b, o, t}
	}
	return out
}

// gitMergeTreeFiles merges each triple as one file of a three-commit
// repository with git merge-tree. It returns the merged contents, which
// files conflicted, and the base label git used (the abbreviated merge
// base).
func gitMergeTreeFiles(tb testing.TB, dir string, ts []triple, diff3Style bool) ([][]byte, []bool, string) {
	tb.Helper()
	if _, err := os.Stat(filepath.Join(dir, "HEAD")); err != nil {
		var st bytes.Buffer
		mark := 0
		blob := func(data []byte) int {
			mark++
			fmt.Fprintf(&st, "blob\nmark :%d\ndata %d\n", mark, len(data))
			st.Write(data)
			st.WriteByte('\n')
			return mark
		}
		commit := func(ref string, parent int, side func(triple) []byte) int {
			marks := make([]int, len(ts))
			for i, t := range ts {
				marks[i] = blob(side(t))
			}
			mark++
			fmt.Fprintf(&st, "commit refs/heads/%s\nmark :%d\ncommitter T <t@example.com> 1700000000 +0000\ndata 0\n", ref, mark)
			if parent > 0 {
				fmt.Fprintf(&st, "from :%d\n", parent)
			}
			for i := range ts {
				fmt.Fprintf(&st, "M 100644 :%d f%06d.txt\n", marks[i], i)
			}
			st.WriteByte('\n')
			return mark
		}
		bm := commit("base", 0, func(t triple) []byte { return t.base })
		commit("ours", bm, func(t triple) []byte { return t.ours })
		commit("theirs", bm, func(t triple) []byte { return t.theirs })
		gitRun(tb, dir, nil, "init", "-q", "--bare", ".")
		gitRun(tb, dir, st.Bytes(), "fast-import", "--quiet")
	}
	args := []string{"merge-tree", "--write-tree", "--name-only", "--no-messages", "ours", "theirs"}
	if diff3Style {
		args = append([]string{"-c", "merge.conflictStyle=diff3"}, args...)
	}
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
	out, err := cmd.Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
			tb.Fatalf("git merge-tree: %v\n%s", err, out)
		}
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	tree := lines[0]
	conflicted := make([]bool, len(ts))
	for _, l := range lines[1:] {
		var i int
		if _, err := fmt.Sscanf(l, "f%06d.txt", &i); err == nil {
			conflicted[i] = true
		}
	}
	// Blob ids from ls-tree: "tree:path" lookups would inflate the whole
	// tree once per path.
	oids := make([]string, len(ts))
	for _, l := range strings.Split(strings.TrimSpace(string(gitRun(tb, dir, nil, "ls-tree", tree))), "\n") {
		var mode, typ, oid string
		var i int
		if _, err := fmt.Sscanf(l, "%s %s %s\tf%06d.txt", &mode, &typ, &oid, &i); err == nil {
			oids[i] = oid
		}
	}
	var in bytes.Buffer
	for _, oid := range oids {
		fmt.Fprintf(&in, "%s\n", oid)
	}
	cat := exec.Command("git", "cat-file", "--batch")
	cat.Dir = dir
	cat.Stdin = &in
	raw, err := cat.Output()
	if err != nil {
		tb.Fatalf("git cat-file: %v", err)
	}
	br := bufio.NewReader(bytes.NewReader(raw))
	merged := make([][]byte, len(ts))
	for i := range ts {
		hdr, err := br.ReadString('\n')
		if err != nil {
			tb.Fatal(err)
		}
		f := strings.Fields(hdr)
		if len(f) != 3 {
			tb.Fatalf("cat-file: %q", hdr)
		}
		size, _ := strconv.Atoi(f[2])
		merged[i] = make([]byte, size)
		if _, err := io.ReadFull(br, merged[i]); err != nil {
			tb.Fatal(err)
		}
		br.ReadByte()
	}
	if os.Getenv("MERGE_ORACLE_KEEP") != "" {
		tb.Logf("repository kept: %s", dir)
	}
	base := strings.TrimSpace(string(gitRun(tb, dir, nil, "rev-parse", "--short", "base")))
	return merged, conflicted, base
}

// TestLineMergeOracleMergeTree: Diff3 (histogram, zealous) equals
// merge-ort's content merge byte for byte, in both conflict styles.
func TestLineMergeOracleMergeTree(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	n := oracleSize(2000, 300)
	ts := genTriples(oracleSeed(), n)
	dir := tempDir(t)
	if d := os.Getenv("MERGE_ORACLE_KEEP"); d != "" {
		dir = d
	}
	for _, diff3Style := range []bool{false, true} {
		want, wantConflict, baseLabel := gitMergeTreeFiles(t, dir, ts, diff3Style)
		labels := Labels{Ours: "ours", Theirs: "theirs", Base: baseLabel, ShowBase: diff3Style}
		var bad, conflicts int
		for i, tr := range ts {
			got, hunks, clean := Diff3(tr.base, tr.ours, tr.theirs, labels)
			if !clean {
				conflicts++
				checkHunks(t, got, hunks, tr.base, tr.ours, tr.theirs)
			}
			if clean == wantConflict[i] || !bytes.Equal(got, want[i]) {
				bad++
				if bad <= 3 {
					t.Errorf("diff3=%v triple %d: clean=%v git clean=%v\nbase %q\nours %q\ntheirs %q\ngot  %q\nwant %q",
						diff3Style, i, clean, !wantConflict[i], tr.base, tr.ours, tr.theirs, got, want[i])
				}
			}
		}
		t.Logf("merge-tree oracle (histogram, diff3 style %v): %d triples, %d with conflicts, %d differ from git", diff3Style, n, conflicts, bad)
	}
}

// TestLineMergeOracleMergeFile: the Myers engine at merge-file's level
// equals git merge-file byte for byte, default and --diff3.
func TestLineMergeOracleMergeFile(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	n := oracleSize(2000, 300) / 5
	ts := genTriples(oracleSeed()+100, n)
	dir := tempDir(t)
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	var bad, conflicts int
	for i, tr := range ts {
		pb, po, pt := write("base", tr.base), write("ours", tr.ours), write("theirs", tr.theirs)
		for _, diff3Style := range []bool{false, true} {
			args := []string{"merge-file", "-p", "-L", "ours", "-L", "base", "-L", "theirs", po, pb, pt}
			if diff3Style {
				args = append(args[:2], append([]string{"--diff3"}, args[2:]...)...)
			}
			want, err := exec.Command("git", args...).Output()
			gitClean := err == nil
			if err != nil {
				if _, ok := err.(*exec.ExitError); !ok {
					t.Fatal(err)
				}
			}
			labels := Labels{Ours: "ours", Base: "base", Theirs: "theirs", ShowBase: diff3Style, Algorithm: Myers}
			got, hunks, clean := diff3(tr.base, tr.ours, tr.theirs, labels, levelZealousAlnum)
			checkHunks(t, got, hunks, tr.base, tr.ours, tr.theirs)
			if !clean {
				conflicts++
			}
			if clean != gitClean || !bytes.Equal(got, want) {
				bad++
				if bad <= 3 {
					t.Errorf("diff3=%v triple %d: clean=%v git clean=%v\nbase %q\nours %q\ntheirs %q\ngot  %q\nwant %q",
						diff3Style, i, clean, gitClean, tr.base, tr.ours, tr.theirs, got, want)
				}
			}
		}
	}
	t.Logf("merge-file oracle (myers): %d triples x 2 styles, %d with conflicts, %d differ from git", n, conflicts, bad)
}

// largeEdited is a file of n lines (vocabulary v: smaller means more
// repeated lines) and two sides with e random edits each (replace,
// insert, delete, move), large enough for xdiff's cost heuristics
// (edit cost above 256) and the histogram fall-back to matter.
func largeEdited(seed int64, n, v, e int) triple {
	r := rand.New(rand.NewSource(seed))
	line := func() string { return fmt.Sprintf("l%d\n", r.Intn(v)) }
	bl := make([]string, n)
	for i := range bl {
		bl[i] = line()
	}
	side := func() []byte {
		s := append([]string(nil), bl...)
		for k := 0; k < e; k++ {
			i := r.Intn(len(s))
			switch r.Intn(4) {
			case 0:
				s[i] = line()
			case 1:
				s = append(s[:i], append([]string{line(), line()}, s[i:]...)...)
			case 2:
				s = append(s[:i], s[min(i+3, len(s)):]...)
			default:
				blk := append([]string(nil), s[i:min(i+5, len(s))]...)
				s = append(s[:i], s[min(i+5, len(s)):]...)
				j := r.Intn(len(s) + 1)
				s = append(s[:j], append(blk, s[j:]...)...)
			}
		}
		return []byte(strings.Join(s, ""))
	}
	return triple{[]byte(strings.Join(bl, "")), side(), side()}
}

// shuffled is a file of n lines whose ours cuts it into blocks of 10-40
// lines and permutes them (long snakes, edit cost in the thousands:
// xdl_split's snake heuristic and its cost cut-off both run); theirs
// edits a few lines.
func shuffled(seed int64, n, v int) triple {
	r := rand.New(rand.NewSource(seed))
	bl := make([]string, n)
	for i := range bl {
		bl[i] = fmt.Sprintf("l%d\n", r.Intn(v))
	}
	var blocks [][]string
	for i := 0; i < n; {
		j := min(i+10+r.Intn(31), n)
		blocks = append(blocks, bl[i:j])
		i = j
	}
	r.Shuffle(len(blocks), func(i, j int) { blocks[i], blocks[j] = blocks[j], blocks[i] })
	var o []string
	for _, b := range blocks {
		o = append(o, b...)
	}
	th := append([]string(nil), bl...)
	for k := 0; k < 30; k++ {
		th[r.Intn(n)] = fmt.Sprintf("t%d\n", k)
	}
	return triple{[]byte(strings.Join(bl, "")), []byte(strings.Join(o, "")), []byte(strings.Join(th, ""))}
}

// sparseSwaps is a file of n distinct lines whose ours swaps two adjacent
// lines every 25-35 lines (snakes longer than xdiff's 20, edit cost in
// the thousands: xdl_split's snake heuristic finds its cuts); theirs
// edits a few lines.
func sparseSwaps(seed int64, n int, reverse bool) triple {
	r := rand.New(rand.NewSource(seed))
	bl := make([]string, n)
	for i := range bl {
		bl[i] = fmt.Sprintf("l%d\n", i)
	}
	o := append([]string(nil), bl...)
	for i := 10; i+1 < n; i += 25 + r.Intn(11) {
		o[i], o[i+1] = o[i+1], o[i]
	}
	if reverse {
		// The first half scrambled instead: xdl_split's backward
		// heuristic finds the cut.
		for i := 0; i+1 < n/2; i++ {
			j := i + r.Intn(n/2-i)
			o[i], o[j] = o[j], o[i]
		}
	}
	th := append([]string(nil), bl...)
	for k := 0; k < 30; k++ {
		th[r.Intn(n)] = fmt.Sprintf("t%d\n", k)
	}
	return triple{[]byte(strings.Join(bl, "")), []byte(strings.Join(o, "")), []byte(strings.Join(th, ""))}
}

// TestLineMergeOracleLarge: large files with many edits, where xdiff's
// Myers cost heuristics cut the search and the histogram diff falls back,
// against git merge-tree and git merge-file.
func TestLineMergeOracleLarge(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	var ts []triple
	for i, p := range []struct{ n, v, e int }{{3000, 1 << 30, 300}, {3000, 50, 300}, {4000, 8, 400}, {2000, 3, 200}, {6000, 1 << 30, 1500}, {3000, 400, 800}} {
		ts = append(ts, largeEdited(int64(i)+oracleSeed(), p.n, p.v, p.e))
	}
	// 40,000 lines: xdiff's cost limit rises to 512, so the snake
	// heuristics (edit cost above 256; forward, and backward with the
	// first half scrambled) run before the cut-off. The long run (flag or
	// MERGE_ORACLE_N) adds the backward case and block shuffles.
	fwd := sparseSwaps(oracleSeed(), 40000, false)
	switch long := *oracleN > 0 || os.Getenv("MERGE_ORACLE_N") != ""; {
	case long:
		ts = append(ts, fwd, sparseSwaps(oracleSeed()+1, 40000, true), shuffled(oracleSeed(), 8000, 1<<30),
			shuffled(oracleSeed()+1, 8000, 3000), shuffled(oracleSeed()+2, 4000, 40), shuffled(oracleSeed()+3, 40000, 1<<30))
	case testing.Short():
		ts = ts[:3]
	default:
		ts = append(ts[:4], fwd)
	}
	dir := tempDir(t)
	for _, diff3Style := range []bool{false, true} {
		want, conflicted, baseLabel := gitMergeTreeFiles(t, dir, ts, diff3Style)
		for i, tr := range ts {
			got, _, clean := Diff3(tr.base, tr.ours, tr.theirs, Labels{Ours: "ours", Theirs: "theirs", Base: baseLabel, ShowBase: diff3Style})
			if clean == conflicted[i] || !bytes.Equal(got, want[i]) {
				t.Errorf("histogram, diff3=%v, file %d: clean=%v git=%v, %d vs %d bytes", diff3Style, i, clean, !conflicted[i], len(got), len(want[i]))
			}
			gw, gclean := gitMergeFile(t, tempDir(t), tr.base, tr.ours, tr.theirs, diff3Style)
			mg, _, mclean := diff3(tr.base, tr.ours, tr.theirs, Labels{Ours: "ours", Base: "base", Theirs: "theirs", ShowBase: diff3Style, Algorithm: Myers}, levelZealousAlnum)
			if mclean != gclean || !bytes.Equal(mg, gw) {
				t.Errorf("myers, diff3=%v, file %d: clean=%v git=%v, %d vs %d bytes", diff3Style, i, mclean, gclean, len(mg), len(gw))
			}
		}
	}
}
