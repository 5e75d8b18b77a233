package merge

import (
	"fmt"
	"math/rand"
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
