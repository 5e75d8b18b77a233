package merge

import (
	"fmt"
	"math/rand"
	"sort"
	"strings"
)

// textGen generates related text files for the oracle tests. It is seeded
// and deterministic.
type textGen struct {
	r   *rand.Rand
	seq int
	// vocab: one line in vocab is drawn from a small set (duplicates);
	// 0 means 5.
	vocab int
}

func (g *textGen) vocabEvery() int {
	if g.vocab == 0 {
		return 5
	}
	return g.vocab
}

var vocab = []string{"", "}", "{", "\treturn nil", "end", "x"}

func (g *textGen) line() string {
	g.seq++
	if g.r.Intn(g.vocabEvery()) == 0 {
		return vocab[g.r.Intn(len(vocab))]
	}
	return fmt.Sprintf("line %d %c", g.seq, 'a'+rune(g.r.Intn(26)))
}

// base returns the lines of a new file (without line ends).
func (g *textGen) base() []string {
	n := g.r.Intn(25)
	out := make([]string, n)
	for i := range out {
		out[i] = g.line()
	}
	return out
}

// edit returns a modified copy of lines.
func (g *textGen) edit(lines []string) []string {
	out := append([]string(nil), lines...)
	ops := 1 + g.r.Intn(3)
	for k := 0; k < ops; k++ {
		switch op := g.r.Intn(5); {
		case op == 0 || len(out) == 0: // insert
			i := g.r.Intn(len(out) + 1)
			n := 1 + g.r.Intn(3)
			ins := make([]string, n)
			for j := range ins {
				ins[j] = g.line()
			}
			out = append(out[:i], append(ins, out[i:]...)...)
		case op == 1: // delete
			i := g.r.Intn(len(out))
			n := 1 + g.r.Intn(3)
			if i+n > len(out) {
				n = len(out) - i
			}
			out = append(out[:i], out[i+n:]...)
		default: // modify
			i := g.r.Intn(len(out))
			n := 1 + g.r.Intn(2)
			for j := i; j < i+n && j < len(out); j++ {
				out[j] = g.line()
			}
		}
	}
	return out
}

type textStyle struct {
	crlf  bool
	noEOL bool
}

func (st textStyle) join(lines []string) []byte {
	if len(lines) == 0 {
		return nil
	}
	eol := "\n"
	if st.crlf {
		eol = "\r\n"
	}
	s := strings.Join(lines, eol)
	if !st.noEOL {
		s += eol
	}
	return []byte(s)
}

// triple returns base, ours and theirs contents.
func (g *textGen) triple() (b, o, t []byte) {
	st := textStyle{crlf: g.r.Intn(8) == 0, noEOL: g.r.Intn(5) == 0}
	bl := g.base()
	ol := g.edit(bl)
	var tl []string
	switch g.r.Intn(6) {
	case 0:
		tl = append([]string(nil), ol...) // identical change
	case 1:
		tl = g.edit(ol) // ours' change plus more
	default:
		tl = g.edit(bl)
	}
	so, stt := st, st
	if g.r.Intn(10) == 0 {
		so.noEOL = !so.noEOL
	}
	if g.r.Intn(10) == 0 {
		stt.noEOL = !stt.noEOL
	}
	return st.join(bl), so.join(ol), stt.join(tl)
}

// codeGen generates related text files shaped like source code: import
// blocks, functions with braces and blank lines, repeated lines ("}",
// "return nil", ""), and edits that move, reorder and duplicate lines as
// well as insert, delete and modify them. These are the shapes on which
// the histogram and Myers diffs disagree. Seeded and deterministic.
type codeGen struct {
	r   *rand.Rand
	seq int
}

var codeImports = []string{`"bytes"`, `"context"`, `"errors"`, `"fmt"`, `"io"`, `"os"`, `"path/filepath"`, `"sort"`, `"strings"`, `"sync"`, `"time"`, `"net/http"`, `"github.com/a/b"`, `"github.com/c/d"`}

var codeRepeated = []string{"}", "", "\treturn nil", "\t}", "\t\treturn err", "\tif err != nil {", "\t\t}", ")", "\tdefer mu.Unlock()"}

func (g *codeGen) stmt() string {
	g.seq++
	if g.r.Intn(3) == 0 {
		return codeRepeated[g.r.Intn(len(codeRepeated))]
	}
	switch g.r.Intn(4) {
	case 0:
		return fmt.Sprintf("\tx%d := f%d(y)", g.seq, g.r.Intn(9))
	case 1:
		return fmt.Sprintf("\tif v%d > %d {", g.seq, g.r.Intn(100))
	case 2:
		return fmt.Sprintf("\t// step %d", g.seq)
	default:
		return fmt.Sprintf("\tcall%d(ctx, %q)", g.r.Intn(20), fmt.Sprint(g.seq))
	}
}

// base returns the lines of a new file.
func (g *codeGen) base() []string {
	var out []string
	if g.r.Intn(4) == 0 {
		// repetitive: a few distinct lines only
		n := g.r.Intn(40)
		for i := 0; i < n; i++ {
			out = append(out, codeRepeated[g.r.Intn(4)])
		}
		return out
	}
	out = append(out, "package p", "")
	if g.r.Intn(4) != 0 {
		out = append(out, "import (")
		perm := g.r.Perm(len(codeImports))[:2+g.r.Intn(7)]
		sort.Ints(perm)
		for _, k := range perm {
			out = append(out, "\t"+codeImports[k])
		}
		out = append(out, ")", "")
	}
	funcs := 1 + g.r.Intn(4)
	for f := 0; f < funcs; f++ {
		g.seq++
		out = append(out, fmt.Sprintf("func F%d(ctx context.Context) error {", g.seq))
		for n := 1 + g.r.Intn(8); n > 0; n-- {
			out = append(out, g.stmt())
		}
		out = append(out, "\treturn nil", "}", "")
	}
	return out
}

// edit returns a modified copy of lines.
func (g *codeGen) edit(lines []string) []string {
	out := append([]string(nil), lines...)
	for k := 1 + g.r.Intn(3); k > 0; k-- {
		if len(out) == 0 {
			out = append(out, g.stmt())
			continue
		}
		i := g.r.Intn(len(out))
		switch g.r.Intn(9) {
		case 0: // insert
			n := 1 + g.r.Intn(3)
			ins := make([]string, n)
			for j := range ins {
				ins[j] = g.stmt()
			}
			out = append(out[:i], append(ins, out[i:]...)...)
		case 1: // insert an import (sorted position if there is a block)
			imp := "\t" + codeImports[g.r.Intn(len(codeImports))]
			at := i
			for j, l := range out {
				if l == "import (" {
					at = j + 1
					for at < len(out) && out[at] != ")" && out[at] < imp {
						at++
					}
					break
				}
			}
			out = append(out[:at], append([]string{imp}, out[at:]...)...)
		case 2: // delete
			n := min(1+g.r.Intn(3), len(out)-i)
			out = append(out[:i], out[i+n:]...)
		case 3, 4: // modify
			out[i] = g.stmt()
		case 5: // move a block of lines elsewhere
			n := min(1+g.r.Intn(3), len(out)-i)
			blk := append([]string(nil), out[i:i+n]...)
			rest := append(append([]string(nil), out[:i]...), out[i+n:]...)
			j := g.r.Intn(len(rest) + 1)
			out = append(rest[:j], append(blk, rest[j:]...)...)
		case 6: // swap adjacent lines
			if i+1 < len(out) {
				out[i], out[i+1] = out[i+1], out[i]
			}
		case 7: // duplicate a line or block
			n := min(1+g.r.Intn(2), len(out)-i)
			blk := append([]string(nil), out[i:i+n]...)
			out = append(out[:i+n], append(blk, out[i+n:]...)...)
		default: // sort (or reverse) a range: a reordering
			n := min(2+g.r.Intn(5), len(out)-i)
			part := out[i : i+n]
			if g.r.Intn(2) == 0 {
				sort.Strings(part)
			} else {
				for a, b := 0, len(part)-1; a < b; a, b = a+1, b-1 {
					part[a], part[b] = part[b], part[a]
				}
			}
		}
	}
	return out
}

// triple returns base, ours and theirs contents.
func (g *codeGen) triple() (b, o, t []byte) {
	st := textStyle{crlf: g.r.Intn(8) == 0, noEOL: g.r.Intn(6) == 0}
	bl := g.base()
	ol := g.edit(bl)
	var tl []string
	switch g.r.Intn(8) {
	case 0:
		tl = append([]string(nil), ol...) // identical change
	case 1:
		tl = g.edit(ol) // ours' change plus more
	default:
		tl = g.edit(bl)
	}
	so, stt := st, st
	if g.r.Intn(12) == 0 {
		so.noEOL = !so.noEOL
	}
	if g.r.Intn(12) == 0 {
		stt.noEOL = !stt.noEOL
	}
	return st.join(bl), so.join(ol), stt.join(tl)
}
