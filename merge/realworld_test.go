package merge

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// realWorldCases are merges of the shapes that real histories contain and
// on which a Myers-based merge and git's merge-ort (histogram) disagree or
// nearly do. histClean is git merge-tree's verdict (merge-ort), myersClean
// git merge-file's (git 2.39, Myers); TestRealWorldCases checks both
// verdicts and compares the output with git byte for byte.
var realWorldCases = []struct {
	name                  string
	base, ours, theirs    string
	histClean, myersClean bool
}{
	{
		name:      "go imports: one side moves a run of imports down, the other adds one inside it",
		base:      "package p\n\nimport (\n\t\"errors\"\n\t\"io\"\n\t\"path/filepath\"\n\t\"strings\"\n\t\"time\"\n\t\"net/http\"\n\t\"github.com/a/b\"\n\t\"github.com/c/d\"\n)\n\nfunc F() error {\n\treturn nil\n}\n",
		ours:      "package p\n\nimport (\n\t\"errors\"\n\t\"io\"\n\t\"path/filepath\"\n\t\"sort\"\n\t\"strings\"\n\t\"time\"\n\t\"net/http\"\n\t\"github.com/a/b\"\n\t\"github.com/c/d\"\n)\n\nfunc F() error {\n\treturn nil\n}\n",
		theirs:    "package p\n\nimport (\n\t\"errors\"\n\t\"time\"\n\t\"net/http\"\n\t\"github.com/c/d\"\n\t\"github.com/a/b\"\n\t\"io\"\n\t\"path/filepath\"\n\t\"strings\"\n)\n\nfunc F() error {\n\treturn nil\n}\n",
		histClean: true, myersClean: false,
	},
	{
		name:   "go imports: one side sorts, the other adds",
		base:   "package p\n\nimport (\n\t\"os\"\n\t\"fmt\"\n\t\"strings\"\n\t\"bytes\"\n)\n\nfunc f() {}\n",
		ours:   "package p\n\nimport (\n\t\"bytes\"\n\t\"fmt\"\n\t\"os\"\n\t\"strings\"\n)\n\nfunc f() {}\n",
		theirs: "package p\n\nimport (\n\t\"os\"\n\t\"fmt\"\n\t\"strings\"\n\t\"bytes\"\n\t\"time\"\n)\n\nfunc f() {}\n",
	},
	{
		name:      "go imports: one side moves a line into a group, the other adds to the group",
		base:      "import (\n\t\"context\"\n\t\"fmt\"\n\n\t\"github.com/a/b\"\n\t\"net/http\"\n)\n",
		ours:      "import (\n\t\"context\"\n\t\"fmt\"\n\t\"net/http\"\n\n\t\"github.com/a/b\"\n)\n",
		theirs:    "import (\n\t\"context\"\n\t\"errors\"\n\t\"fmt\"\n\n\t\"github.com/a/b\"\n\t\"net/http\"\n)\n",
		histClean: true, myersClean: true,
	},
	{
		name:      "reordered statements, edit three lines below",
		base:      "func f() error {\n\ta := 1\n\tb := 2\n\tc := 3\n\td := 4\n\te := 5\n\tf := 6\n\treturn nil\n}\n",
		ours:      "func f() error {\n\tb := 2\n\ta := 1\n\tc := 3\n\td := 4\n\te := 5\n\tf := 6\n\treturn nil\n}\n",
		theirs:    "func f() error {\n\ta := 1\n\tb := 2\n\tc := 3\n\td := 4\n\te := 50\n\tf := 6\n\treturn nil\n}\n",
		histClean: true, myersClean: true,
	},
	{
		name:      "function moved down, other side edits it",
		base:      "func a() {\n\tx()\n}\n\nfunc b() {\n\ty()\n}\n\nfunc c() {\n\tz()\n}\n",
		ours:      "func b() {\n\ty()\n}\n\nfunc c() {\n\tz()\n}\n\nfunc a() {\n\tx()\n}\n",
		theirs:    "func a() {\n\tx()\n}\n\nfunc b() {\n\ty2()\n}\n\nfunc c() {\n\tz()\n}\n",
		histClean: true, myersClean: true,
	},
	{
		name:      "both add functions after different closing braces",
		base:      "func a() {\n\treturn\n}\n\nfunc b() {\n\treturn\n}\n\nfunc c() {\n\treturn\n}\n",
		ours:      "func a() {\n\treturn\n}\n\nfunc a2() {\n\treturn\n}\n\nfunc b() {\n\treturn\n}\n\nfunc c() {\n\treturn\n}\n",
		theirs:    "func a() {\n\treturn\n}\n\nfunc b() {\n\treturn\n}\n\nfunc c() {\n\treturn\n}\n\nfunc c2() {\n\treturn\n}\n",
		histClean: true, myersClean: true,
	},
	{
		name:   "yaml list: one side reorders, the other appends",
		base:   "steps:\n  - run: go vet\n  - run: go test\n  - run: go build\ncache: true\n",
		ours:   "steps:\n  - run: go build\n  - run: go vet\n  - run: go test\ncache: true\n",
		theirs: "steps:\n  - run: go vet\n  - run: go test\n  - run: go build\n  - run: staticcheck\ncache: true\n",
	},
	{
		name:      "go.mod: both add requires in different places",
		base:      "module m\n\ngo 1.22\n\nrequire (\n\tgithub.com/a/a v1.0.0\n\tgithub.com/c/c v1.0.0\n\tgithub.com/e/e v1.0.0\n\tgithub.com/g/g v1.0.0\n)\n",
		ours:      "module m\n\ngo 1.22\n\nrequire (\n\tgithub.com/a/a v1.0.0\n\tgithub.com/b/b v1.0.0\n\tgithub.com/c/c v1.0.0\n\tgithub.com/e/e v1.0.0\n\tgithub.com/g/g v1.0.0\n)\n",
		theirs:    "module m\n\ngo 1.22\n\nrequire (\n\tgithub.com/a/a v1.0.0\n\tgithub.com/c/c v1.0.0\n\tgithub.com/e/e v1.0.0\n\tgithub.com/f/f v1.0.0\n\tgithub.com/g/g v1.0.0\n)\n",
		histClean: true, myersClean: true,
	},
	{
		name:   "go.mod: both bump the same require differently",
		base:   "require (\n\tgithub.com/a/a v1.0.0\n\tgithub.com/b/b v1.0.0\n)\n",
		ours:   "require (\n\tgithub.com/a/a v1.1.0\n\tgithub.com/b/b v1.0.0\n)\n",
		theirs: "require (\n\tgithub.com/a/a v1.2.0\n\tgithub.com/b/b v1.0.0\n)\n",
	},
	{
		name:   "changelog: both add an entry at the top",
		base:   "# Changes\n\n## 1.0\n- first\n",
		ours:   "# Changes\n\n## 1.1\n- ours\n\n## 1.0\n- first\n",
		theirs: "# Changes\n\n## 1.1\n- theirs\n\n## 1.0\n- first\n",
	},
	{
		name:   "crlf file, conflict",
		base:   "a\r\nb\r\nc\r\n",
		ours:   "a\r\nB1\r\nc\r\n",
		theirs: "a\r\nB2\r\nc\r\n",
	},
	{
		name:   "no newline at end, both append",
		base:   "a\nb",
		ours:   "a\nb\nours",
		theirs: "a\nb\ntheirs",
	},
	{
		name:      "identical change and a separate one",
		base:      "a\nb\nc\nd\ne\nf\n",
		ours:      "a\nB\nc\nd\ne\nf\n",
		theirs:    "a\nB\nc\nd\ne\nF\n",
		histClean: true, myersClean: true,
	},
	{
		name:   "empty base, both add different content",
		base:   "",
		ours:   "x\ny\n",
		theirs: "x\nz\n",
	},
	{
		name:      "blank-line separated blocks, both insert into the same gap",
		base:      "a\n\n\n\nb\n",
		ours:      "a\n\nours\n\n\nb\n",
		theirs:    "a\n\n\ntheirs\n\nb\n",
		histClean: true, myersClean: true,
	},
	{
		name:      "repeated closing braces, edits in two nested blocks",
		base:      "if a {\n\tif b {\n\t\tx()\n\t}\n}\nif c {\n\tif d {\n\t\ty()\n\t}\n}\n",
		ours:      "if a {\n\tif b {\n\t\tx()\n\t}\n\tw()\n}\nif c {\n\tif d {\n\t\ty()\n\t}\n}\n",
		theirs:    "if a {\n\tif b {\n\t\tx()\n\t}\n}\nif c {\n\tif d {\n\t\ty()\n\t}\n\tv()\n}\n",
		histClean: true, myersClean: true,
	},
}

func TestRealWorldCases(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	for _, rw := range realWorldCases {
		t.Run(rw.name, func(t *testing.T) {
			b, o, th := []byte(rw.base), []byte(rw.ours), []byte(rw.theirs)
			for _, diff3Style := range []bool{false, true} {
				dir := tempDir(t)
				want, conflicted, baseLabel := gitMergeTreeFiles(t, dir, []triple{{b, o, th}}, diff3Style)
				got, hunks, clean := Diff3(b, o, th, Labels{Ours: "ours", Theirs: "theirs", Base: baseLabel, ShowBase: diff3Style})
				checkHunks(t, got, hunks, b, o, th)
				if clean == conflicted[0] || !bytes.Equal(got, want[0]) {
					t.Errorf("histogram, diff3=%v: clean=%v git=%v\ngot:\n%s\nwant:\n%s", diff3Style, clean, !conflicted[0], got, want[0])
				}
				if !diff3Style && clean != rw.histClean {
					t.Errorf("histogram: clean=%v, table says %v", clean, rw.histClean)
				}
				gw, gclean := gitMergeFile(t, dir, b, o, th, diff3Style)
				mg, _, mclean := diff3(b, o, th, Labels{Ours: "ours", Base: "base", Theirs: "theirs", ShowBase: diff3Style, Algorithm: Myers}, levelZealousAlnum)
				if mclean != gclean || !bytes.Equal(mg, gw) {
					t.Errorf("myers, diff3=%v: clean=%v git=%v\ngot:\n%s\nwant:\n%s", diff3Style, mclean, gclean, mg, gw)
				}
				if !diff3Style && mclean != rw.myersClean {
					t.Errorf("myers: clean=%v, table says %v", mclean, rw.myersClean)
				}
			}
		})
	}
}

// TestHistogramVersusMyers: the table holds a merge on which the two
// algorithms disagree (the first: an import run moved down on one side,
// an import added inside it on the other, which merge-ort merges cleanly
// and a Myers merge reports as a conflict).
func TestHistogramVersusMyers(t *testing.T) {
	differ := 0
	for _, rw := range realWorldCases {
		if rw.histClean != rw.myersClean {
			differ++
		}
	}
	if differ == 0 {
		t.Fatal("no table case separates histogram from myers")
	}
}

// TestHistogramChainLimit: a region whose lines fill one of
// xhistogram.c's hash chains with 65 distinct lines makes git's merge
// fail ("Failed to execute internal merge"); Diff3 reports the whole file
// as one conflict instead of guessing.
func TestHistogramChainLimit(t *testing.T) {
	const n = 9000
	var d []string
	for i := 0; i < n; i++ {
		d = append(d, fmt.Sprintf("L%d\n", i))
	}
	// 65 earlier lines whose class numbers share bucket 0 of a 128-entry
	// table ((v + v>>7) & 127 == 0).
	var tail []string
	for v := 0; len(tail) < 65; v++ {
		if (v+v>>7)&127 == 0 {
			tail = append(tail, d[v])
		}
	}
	join := func(parts ...[]string) []byte {
		var b bytes.Buffer
		for _, p := range parts {
			for _, l := range p {
				b.WriteString(l)
			}
		}
		return b.Bytes()
	}
	base := join(d, tail)
	ours := join(d, []string{"X\n"}, tail)
	theirs := join([]string{"Y\n"}, d[1:], tail)
	merged, hunks, clean := Diff3(base, ours, theirs, DefaultLabels)
	if clean || len(hunks) != 1 || hunks[0].Base != (LineRange{1, n + 65}) || hunks[0].Ours.Count != n+66 {
		t.Fatalf("clean=%v hunks=%+v", clean, hunks)
	}
	checkHunks(t, merged, hunks, base, ours, theirs)
	// Myers has no such limit.
	if _, _, clean := Diff3(base, ours, theirs, Labels{Algorithm: Myers}); !clean {
		t.Error("myers: conflict")
	}
	if _, err := exec.LookPath("git"); err != nil {
		return
	}
	out, err := runMergeTree(t, tempDir(t), base, ours, theirs)
	if err == nil || !strings.Contains(string(out), "Failed to execute internal merge") {
		t.Errorf("git merge-tree: err=%v\n%s", err, out)
	}
}

// runMergeTree runs git merge-tree on a one-file repository and returns
// its combined output.
func runMergeTree(tb testing.TB, dir string, base, ours, theirs []byte) ([]byte, error) {
	tb.Helper()
	var st bytes.Buffer
	fmt.Fprintf(&st, "blob\nmark :1\ndata %d\n%s\nblob\nmark :2\ndata %d\n%s\nblob\nmark :3\ndata %d\n%s\n", len(base), base, len(ours), ours, len(theirs), theirs)
	for i, ref := range []string{"base", "ours", "theirs"} {
		fmt.Fprintf(&st, "commit refs/heads/%s\nmark :%d\ncommitter T <t@example.com> 1700000000 +0000\ndata 0\n", ref, 10+i)
		if i > 0 {
			st.WriteString("from :10\n")
		}
		fmt.Fprintf(&st, "M 100644 :%d f\n\n", i+1)
	}
	gitRun(tb, dir, nil, "init", "-q", "--bare", ".")
	gitRun(tb, dir, st.Bytes(), "fast-import", "--quiet")
	cmd := exec.Command("git", "merge-tree", "--write-tree", "ours", "theirs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
	return cmd.CombinedOutput()
}
