package merge

import (
	"bytes"
	"flag"
	"fmt"
	"hash/fnv"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// FuzzDiff3 fuzzes the line merge. For any three inputs and options
// (algorithm, conflict style) it checks:
//
//   - no panic, and every hunk is a marker block holding its ours and
//     theirs lines (checkHunks);
//   - merging X with itself (base = ours = theirs = X) gives X, clean, and
//     a one-sided change (X, X, Y), (X, Y, X) or an identical one
//     (X, Y, Y) gives Y, clean;
//   - a clean merge of disjoint edits contains both: the base's lines
//     made unique, ours replaces one line, theirs another at least two
//     lines away;
//   - the output equals git merge-file's (Myers) or git merge-tree's
//     (histogram, one-file repository) byte for byte: on every seed when
//     go test runs the seeds (1/8 of them with -short), and on a
//     hash-selected 1/64 of the inputs under -fuzz (git is too slow for
//     every one).
func FuzzDiff3(f *testing.F) {
	for _, tt := range diff3TableCases {
		f.Add([]byte(tt.base), []byte(tt.ours), []byte(tt.theirs), uint8(0))
		f.Add([]byte(tt.base), []byte(tt.ours), []byte(tt.theirs), uint8(3))
	}
	for i, tr := range genTriples(99, 40) {
		f.Add(tr.base, tr.ours, tr.theirs, uint8(i%4))
	}
	for _, rw := range realWorldCases {
		f.Add([]byte(rw.base), []byte(rw.ours), []byte(rw.theirs), uint8(0))
	}
	fuzzing := flag.Lookup("test.fuzz") != nil && flag.Lookup("test.fuzz").Value.String() != ""
	haveGit := true
	if _, err := exec.LookPath("git"); err != nil {
		haveGit = false
	}
	f.Fuzz(func(t *testing.T, base, ours, theirs []byte, opts uint8) {
		if len(base)+len(ours)+len(theirs) > 1<<16 {
			return
		}
		labels := Labels{Ours: "ours", Base: "base", Theirs: "theirs", ShowBase: opts&1 != 0}
		if opts&2 != 0 {
			labels.Algorithm = Myers
		}
		got, hunks, clean := Diff3(base, ours, theirs, labels)
		if clean != (len(hunks) == 0) {
			t.Fatalf("clean=%v with %d hunks", clean, len(hunks))
		}
		checkHunks(t, got, hunks, base, ours, theirs)

		for _, c := range []struct{ b, o, t, want []byte }{
			{base, base, base, base}, {base, base, ours, ours}, {base, ours, base, ours}, {base, ours, ours, ours},
		} {
			m, hs, ok := Diff3(c.b, c.o, c.t, labels)
			if !ok || len(hs) != 0 || !bytes.Equal(m, c.want) {
				t.Fatalf("trivial merge: clean=%v\nbase %q\nours %q\ntheirs %q\ngot %q", ok, c.b, c.o, c.t, m)
			}
		}

		// Disjoint edits.
		lines := splitLines(base)
		if len(lines) >= 3 {
			var ub, uo, ut bytes.Buffer
			i := int(opts) % (len(lines) - 2)
			j := i + 2 + int(opts)%(len(lines)-i-2)
			for k, l := range lines {
				u := fmt.Sprintf("%d %s", k, bytes.TrimRight(l, "\n"))
				if k == len(lines)-1 && l[len(l)-1] != '\n' {
					u = fmt.Sprintf("%d %s", k, l) // keep a missing final newline
				} else {
					u += "\n"
				}
				ub.WriteString(u)
				switch k {
				case i:
					uo.WriteString("ours edit\n")
					ut.WriteString(u)
				case j:
					uo.WriteString(u)
					ut.WriteString("theirs edit\n")
				default:
					uo.WriteString(u)
					ut.WriteString(u)
				}
			}
			m, _, ok := Diff3(ub.Bytes(), uo.Bytes(), ut.Bytes(), labels)
			if !ok || !bytes.Contains(m, []byte("ours edit\n")) || !bytes.Contains(m, []byte("theirs edit\n")) ||
				len(splitLines(m)) != len(lines) {
				t.Fatalf("disjoint edits (lines %d, %d): clean=%v\nbase %q\nours %q\ntheirs %q\ngot %q", i, j, ok, ub.Bytes(), uo.Bytes(), ut.Bytes(), m)
			}
		}

		if !haveGit || isBinary(base) || isBinary(ours) || isBinary(theirs) {
			return
		}
		h := fnv.New32a()
		h.Write(base)
		h.Write(ours)
		h.Write(theirs)
		switch {
		case fuzzing && h.Sum32()%64 != 0:
			return
		case !fuzzing && testing.Short() && h.Sum32()%8 != 0:
			return
		}
		dir := t.TempDir()
		if labels.Algorithm == Myers {
			want, wantClean := gitMergeFile(t, dir, base, ours, theirs, labels.ShowBase)
			m, _, ok := diff3(base, ours, theirs, labels, levelZealousAlnum)
			if ok != wantClean || !bytes.Equal(m, want) {
				t.Fatalf("git merge-file differs: clean=%v git=%v\nbase %q\nours %q\ntheirs %q\ngot  %q\nwant %q", ok, wantClean, base, ours, theirs, m, want)
			}
			return
		}
		want, conflicted, baseLabel := gitMergeTreeFiles(t, dir, []triple{{base, ours, theirs}}, labels.ShowBase)
		labels.Base = baseLabel
		m, _, ok := Diff3(base, ours, theirs, labels)
		if ok == conflicted[0] || !bytes.Equal(m, want[0]) {
			t.Fatalf("git merge-tree differs: clean=%v git=%v\nbase %q\nours %q\ntheirs %q\ngot  %q\nwant %q", ok, !conflicted[0], base, ours, theirs, m, want[0])
		}
	})
}

// gitMergeFile runs git merge-file -p with labels ours, base, theirs.
func gitMergeFile(tb testing.TB, dir string, base, ours, theirs []byte, diff3Style bool) ([]byte, bool) {
	tb.Helper()
	var paths []string
	for name, data := range map[string][]byte{"base": base, "ours": ours, "theirs": theirs} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	args := []string{"merge-file", "-p"}
	if diff3Style {
		args = append(args, "--diff3")
	}
	for _, n := range []string{"ours", "base", "theirs"} {
		args = append(args, "-L", n)
		paths = append(paths, filepath.Join(dir, n))
	}
	out, err := exec.Command("git", append(args, paths...)...).Output()
	if err != nil {
		if _, ok := err.(*exec.ExitError); !ok {
			tb.Fatal(err)
		}
	}
	return out, err == nil
}
