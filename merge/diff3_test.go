package merge

import (
	"bytes"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

var diff3TableCases = []struct {
	name               string
	base, ours, theirs string
	want               string
	clean              bool
}{
	{"empty", "", "", "", "", true},
	{"ours only", "a\nb\nc\n", "a\nB\nc\n", "a\nb\nc\n", "a\nB\nc\n", true},
	{"theirs only", "a\nb\nc\n", "a\nb\nc\n", "a\nb\nC\n", "a\nb\nC\n", true},
	{"different hunks", "a\nb\nc\nd\ne\n", "A\nb\nc\nd\ne\n", "a\nb\nc\nd\nE\n", "A\nb\nc\nd\nE\n", true},
	{"identical change", "a\nb\nc\n", "a\nX\nc\n", "a\nX\nc\n", "a\nX\nc\n", true},
	{"adjacent lines conflict", "a\nb\nc\nd\n", "a\nB\nc\nd\n", "a\nb\nC\nd\n",
		"a\n<<<<<<< ours\nB\nc\n=======\nb\nC\n>>>>>>> theirs\nd\n", false},
	{"same line", "a\nb\nc\n", "a\nX\nc\n", "a\nY\nc\n",
		"a\n<<<<<<< ours\nX\n=======\nY\n>>>>>>> theirs\nc\n", false},
	{"zealous refinement", "a\nb\nc\n", "a\nX\nsame\nc\n", "a\nY\nsame\nc\n",
		"a\n<<<<<<< ours\nX\n=======\nY\n>>>>>>> theirs\nsame\nc\n", false},
	{"no trailing newline, one side", "a\nb\nc", "a\nb\nc\n", "A\nb\nc", "A\nb\nc\n", true},
	{"no trailing newline conflict", "a\nb", "a\nX", "a\nY",
		"a\n<<<<<<< ours\nX\n=======\nY\n>>>>>>> theirs\n", false},
	{"crlf conflict", "a\r\nb\r\n", "a\r\nX\r\n", "a\r\nY\r\n",
		"a\r\n<<<<<<< ours\r\nX\r\n=======\r\nY\r\n>>>>>>> theirs\r\n", false},
	{"add at end both", "a\n", "a\nb\n", "a\nc\n",
		"a\n<<<<<<< ours\nb\n=======\nc\n>>>>>>> theirs\n", false},
	{"delete vs edit", "a\nb\nc\n", "a\nc\n", "a\nB\nc\n",
		"a\n<<<<<<< ours\n=======\nB\n>>>>>>> theirs\nc\n", false},
	{"both delete same", "a\nb\nc\n", "a\nc\n", "a\nc\n", "a\nc\n", true},
	{"two-way add", "", "x\ny\n", "x\ny\n", "x\ny\n", true},
}

func TestDiff3Table(t *testing.T) {
	tests := diff3TableCases
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, hunks, clean := Diff3([]byte(tt.base), []byte(tt.ours), []byte(tt.theirs), DefaultLabels)
			if string(got) != tt.want || clean != tt.clean {
				t.Errorf("got clean=%v\n%q\nwant clean=%v\n%q", clean, got, tt.clean, tt.want)
			}
			if clean != (len(hunks) == 0) {
				t.Errorf("clean=%v with %d hunks", clean, len(hunks))
			}
		})
	}
}

func TestDiff3Hunks(t *testing.T) {
	_, hunks, clean := Diff3([]byte("a\nb\nc\n"), []byte("a\nX\nc\n"), []byte("a\nY\nc\n"), Labels{Ours: "o", Theirs: "t", Base: "b", ShowBase: true})
	if clean || len(hunks) != 1 {
		t.Fatalf("clean=%v hunks=%v", clean, hunks)
	}
	want := Hunk{Base: LineRange{2, 1}, Ours: LineRange{2, 1}, Theirs: LineRange{2, 1}, Result: LineRange{2, 7},
		Content: HunkContent{Base: "b\n", Ours: "X\n", Theirs: "Y\n"}}
	if hunks[0] != want {
		t.Errorf("hunk %+v, want %+v", hunks[0], want)
	}
}

// tempDir is t.TempDir on /dev/shm when available (git is faster there).
func tempDir(tb testing.TB) string {
	tb.Helper()
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		d, err := os.MkdirTemp("/dev/shm", "lockstep-merge-")
		if err == nil {
			tb.Cleanup(func() { os.RemoveAll(d) })
			return d
		}
	}
	return tb.TempDir()
}

// TestDiff3Properties: one-sided and identical changes always merge
// cleanly to the changed version.
func TestDiff3Properties(t *testing.T) {
	g := &textGen{r: rand.New(rand.NewSource(7))}
	for i := 0; i < 2000; i++ {
		b, o, _ := g.triple()
		for _, c := range []struct{ base, ours, theirs []byte }{{b, b, o}, {b, o, b}, {b, o, o}} {
			got, hunks, clean := Diff3(c.base, c.ours, c.theirs, DefaultLabels)
			if !clean || len(hunks) != 0 || !bytes.Equal(got, o) {
				t.Fatalf("case %d: clean=%v\nbase %q\nours %q\ntheirs %q\ngot %q", i, clean, c.base, c.ours, c.theirs, got)
			}
		}
	}
}

func largeTriple(n int) (b, o, t []byte) {
	var bb, ob, tb bytes.Buffer
	for i := 0; i < n; i++ {
		line := []byte("line " + strconv.Itoa(i) + " of a large file\n")
		bb.Write(line)
		switch {
		case i%1000 == 10:
			ob.WriteString("ours " + strconv.Itoa(i) + "\n")
			tb.Write(line)
		case i%1000 == 500:
			ob.Write(line)
			tb.WriteString("theirs " + strconv.Itoa(i) + "\n")
		default:
			ob.Write(line)
			tb.Write(line)
		}
	}
	return bb.Bytes(), ob.Bytes(), tb.Bytes()
}

// codeTriple is a 20,000-line Go-like file (import block, short
// functions, many repeated lines) with 20 edits per side, some of them
// moves and reorderings.
func codeTriple(n int) (b, o, t []byte) {
	var bl []string
	for i := 0; len(bl) < n; i++ {
		bl = append(bl, "func F"+strconv.Itoa(i)+"(ctx context.Context) error {",
			"\tif err := step"+strconv.Itoa(i)+"(ctx); err != nil {", "\t\treturn err", "\t}",
			"\treturn nil", "}", "")
	}
	bl = bl[:n]
	ol := append([]string(nil), bl...)
	tl := append([]string(nil), bl...)
	for k := 0; k < 20; k++ {
		i := (k*997 + 13) % (n - 10)
		ol[i+1], ol[i+2] = ol[i+2], ol[i+1] // reorder
		j := (k*991 + 503) % (n - 10)
		tl[j+1] = "\t// theirs " + strconv.Itoa(k)
	}
	join := func(ls []string) []byte { return []byte(strings.Join(ls, "\n") + "\n") }
	return join(bl), join(ol), join(tl)
}

// repeatedTriple is n lines drawn from four distinct ones ("}", "",
// "\treturn nil", "\t}"), 20 edits per side: the histogram diff falls
// back to the classic diff on such regions.
func repeatedTriple(n int) (b, o, t []byte) {
	r := rand.New(rand.NewSource(3))
	vocab := []string{"}", "", "\treturn nil", "\t}"}
	bl := make([]string, n)
	for i := range bl {
		bl[i] = vocab[r.Intn(len(vocab))]
	}
	ol := append([]string(nil), bl...)
	tl := append([]string(nil), bl...)
	for k := 0; k < 20; k++ {
		ol[(k*997+13)%n] = "ours " + strconv.Itoa(k)
		tl[(k*991+503)%n] = "theirs " + strconv.Itoa(k)
	}
	join := func(ls []string) []byte { return []byte(strings.Join(ls, "\n") + "\n") }
	return join(bl), join(ol), join(tl)
}

var benchTriples = []struct {
	name string
	gen  func(int) ([]byte, []byte, []byte)
}{{"distinct", largeTriple}, {"code", codeTriple}, {"repeated", repeatedTriple}}

// BenchmarkDiff3Large: a 20,000-line file, 20 edits per side, with each
// diff algorithm. Compare with BenchmarkGitMergeFileLarge (which includes
// process start, as a service calling git would pay it).
func BenchmarkDiff3Large(b *testing.B) {
	for _, tr := range benchTriples {
		for _, algo := range []DiffAlgorithm{Histogram, Myers} {
			b.Run(tr.name+"/"+algo.String(), func(b *testing.B) {
				base, ours, theirs := tr.gen(20000)
				l := DefaultLabels
				l.Algorithm = algo
				b.SetBytes(int64(len(base)))
				b.ReportAllocs()
				for i := 0; i < b.N; i++ {
					Diff3(base, ours, theirs, l)
				}
			})
		}
	}
}

// BenchmarkGitMergeFileLarge: git merge-file (myers) on the same triples,
// and git merge-tree (histogram) on a one-file repository holding them.
func BenchmarkGitMergeFileLarge(b *testing.B) {
	for _, tr := range benchTriples {
		base, ours, theirs := tr.gen(20000)
		dir := tempDir(b)
		for name, data := range map[string][]byte{"base": base, "ours": ours, "theirs": theirs} {
			if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
				b.Fatal(err)
			}
		}
		b.Run(tr.name+"/merge-file", func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				cmd := exec.Command("git", "merge-file", "-p", "ours", "base", "theirs")
				cmd.Dir = dir
				if _, err := cmd.Output(); err != nil {
					b.Fatal(err)
				}
			}
		})
		repo := filepath.Join(dir, "repo")
		if err := os.Mkdir(repo, 0o755); err != nil {
			b.Fatal(err)
		}
		gitMergeTreeFiles(b, repo, []triple{{base, ours, theirs}}, false)
		b.Run(tr.name+"/merge-tree", func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				cmd := exec.Command("git", "merge-tree", "--write-tree", "ours", "theirs")
				cmd.Dir = repo
				if _, err := cmd.Output(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// checkHunks: each hunk's Result range is a marker block of the output,
// and its Ours and Theirs ranges are the lines inside it.
func checkHunks(t *testing.T, merged []byte, hunks []Hunk, base, ours, theirs []byte) {
	t.Helper()
	out, o, th := splitLines(merged), splitLines(ours), splitLines(theirs)
	trim := func(r []byte) string { return strings.TrimRight(string(r), "\r\n") }
	for _, h := range hunks {
		blk := out[h.Result.Start-1 : h.Result.Start-1+h.Result.Count]
		if !strings.HasPrefix(trim(blk[0]), "<<<<<<<") || !strings.HasPrefix(trim(blk[len(blk)-1]), ">>>>>>>") {
			t.Fatalf("hunk %+v is not a marker block: %q", h, blk)
		}
		// The base section, when shown, starts right after the ours lines;
		// find it by position, not by scanning, since ours or theirs may
		// hold a line that looks like a marker.
		base := 0
		if 1+h.Ours.Count < len(blk) && strings.HasPrefix(trim(blk[1+h.Ours.Count]), "|||||||") {
			base = 1 + h.Base.Count
		}
		if h.Result.Count != h.Ours.Count+h.Theirs.Count+3+base {
			t.Fatalf("hunk %+v: block size", h)
		}
		for k := 0; k < h.Ours.Count; k++ {
			if trim(blk[1+k]) != trim(o[h.Ours.Start-1+k]) {
				t.Fatalf("hunk %+v: ours line %d %q vs %q", h, k, blk[1+k], o[h.Ours.Start-1+k])
			}
		}
		for k := 0; k < h.Theirs.Count; k++ {
			if trim(blk[2+h.Ours.Count+base+k]) != trim(th[h.Theirs.Start-1+k]) {
				t.Fatalf("hunk %+v: theirs line %d", h, k)
			}
		}
	}
}
