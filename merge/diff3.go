package merge

import (
	"bytes"
	"strings"
)

// LineRange is a range of lines in one file. Start is 1-based; for an empty
// range (Count 0) Start is the line before which the missing lines would
// stand (so 1 means "at the top").
type LineRange struct {
	Start int `json:"start"`
	Count int `json:"count"`
}

// Hunk is one conflicting region of a line merge: the lines of the base,
// ours and theirs files (each in its own numbering) that could not be
// reconciled, and, when markers were written, the conflict block in the
// merged output ("<<<<<<<" through ">>>>>>>" inclusive).
//
// As in git, conflicts are refined ("zealous" merge): the Ours and Theirs
// ranges are shrunk to the lines that really differ. Base then covers the
// base lines of the whole unrefined conflict.
type Hunk struct {
	Base   LineRange `json:"base"`
	Ours   LineRange `json:"ours"`
	Theirs LineRange `json:"theirs"`
	Result LineRange `json:"result"`
	// Content is each side's lines of the hunk, for a reviewer (each
	// side cut at MaxHunkContent bytes).
	Content HunkContent `json:"content"`
}

// HunkContent is the text of a conflicting hunk on each side.
type HunkContent struct {
	Base      string `json:"base"`
	Ours      string `json:"ours"`
	Theirs    string `json:"theirs"`
	Truncated bool   `json:"truncated,omitempty"`
}

// MaxHunkContent bounds the text a hunk carries per side.
const MaxHunkContent = 4 << 10

func hunkText(recs [][]byte, truncated *bool) string {
	var b strings.Builder
	for _, r := range recs {
		if b.Len()+len(r) > MaxHunkContent {
			*truncated = true
			break
		}
		b.Write(r)
	}
	return b.String()
}

// Labels name the sides in conflict markers. Empty labels give bare
// markers ("<<<<<<<"). With ShowBase, conflicts are written diff3 style
// with a "||||||| base" section and, as git does for that style, they are
// not refined.
type Labels struct {
	Ours, Base, Theirs string
	ShowBase           bool
	// MarkerSize is the length of the marker runs; 0 means 7.
	MarkerSize int
	// Algorithm is the line diff: Histogram (the zero value, what git
	// merge and git merge-tree use) or Myers (git merge-file's default).
	Algorithm DiffAlgorithm
}

// DefaultLabels are the labels git merge-tree would print for branches
// named ours and theirs.
var DefaultLabels = Labels{Ours: "ours", Base: "base", Theirs: "theirs"}

// Merge levels, as in xdiff.
const (
	levelEager        = 1 // identical changes on both sides are not a conflict
	levelZealous      = 2 // + conflicts refined, conflicts < 4 lines apart joined
	levelZealousAlnum = 3 // + conflicts separated by lines without letters or digits joined (git merge-file)
)

const markerSize = 7

// Diff3 merges ours and theirs, two descendants of base, line by line like
// git's xdiff merge (the "zealous" level and, by default, the histogram
// diff used by git merge and git merge-tree): changes on both sides that overlap or touch (adjacent lines)
// conflict unless they are identical. merged is the result with conflict
// markers around every conflict; hunks describe the conflicts; clean reports
// that there were none (merged then has no markers). A file without a
// trailing newline is handled as git does: a conflict side that ends
// without one gets one before the next marker.
func Diff3(base, ours, theirs []byte, labels Labels) (merged []byte, hunks []Hunk, clean bool) {
	return diff3(base, ours, theirs, labels, levelZealous)
}

type mchunk struct {
	mode     int // 0 conflict, 1 ours, 2 theirs, 4 identical after refinement
	i0, chg0 int // base
	i1, chg1 int // ours
	i2, chg2 int // theirs
}

type mfile struct {
	recs [][]byte
	ids  []int32
}

func diff3(base, ours, theirs []byte, labels Labels, level int) ([]byte, []Hunk, bool) {
	if labels.ShowBase && level > levelEager {
		level = levelEager
	}
	b := mfile{recs: splitLines(base)}
	o := mfile{recs: splitLines(ours)}
	t := mfile{recs: splitLines(theirs)}
	in := newInterner(len(b.recs) + len(b.recs)/8)
	b.ids, o.ids, t.ids = in.lines(b.recs), in.lines(o.recs), in.lines(t.recs)
	whole := func() ([]byte, []Hunk, bool) {
		// git's merge fails here (see xdiffErr); one conflict for the file.
		c := []mchunk{{mode: 0, chg0: len(b.recs), chg1: len(o.recs), chg2: len(t.recs)}}
		return render(&b, &o, &t, c, labels)
	}
	var cl classifier
	xs1, err1 := cl.xdiff(b.ids, o.ids, labels.Algorithm)
	xs2, err2 := cl.xdiff(b.ids, t.ids, labels.Algorithm)
	if err1 != nil || err2 != nil {
		return whole()
	}
	// xdl_merge: when one side made no change the result is the other
	// side, byte for byte.
	if len(xs1) == 0 {
		return append([]byte(nil), theirs...), nil, true
	}
	if len(xs2) == 0 {
		return append([]byte(nil), ours...), nil, true
	}
	var chunks []mchunk
	app := func(mode, i0, chg0, i1, chg1, i2, chg2 int) {
		if n := len(chunks); n > 0 {
			m := &chunks[n-1]
			if i1 <= m.i1+m.chg1 || i2 <= m.i2+m.chg2 {
				if mode != m.mode {
					m.mode = 0
				}
				m.chg0 = i0 + chg0 - m.i0
				m.chg1 = i1 + chg1 - m.i1
				m.chg2 = i2 + chg2 - m.i2
				return
			}
		}
		chunks = append(chunks, mchunk{mode, i0, chg0, i1, chg1, i2, chg2})
	}
	p, q := 0, 0
	for p < len(xs1) && q < len(xs2) {
		x1, x2 := xs1[p], xs2[q]
		if x1.i1+x1.chg1 < x2.i1 {
			app(1, x1.i1, x1.chg1, x1.i2, x1.chg2, x2.i2-x2.i1+x1.i1, x1.chg1)
			p++
			continue
		}
		if x2.i1+x2.chg1 < x1.i1 {
			app(2, x2.i1, x2.chg1, x1.i2-x1.i1+x2.i1, x2.chg1, x2.i2, x2.chg2)
			q++
			continue
		}
		if x1.i1 != x2.i1 || x1.chg1 != x2.chg1 || x1.chg2 != x2.chg2 ||
			!sameIDs(o.ids[x1.i2:x1.i2+x1.chg2], t.ids[x2.i2:x2.i2+x2.chg2]) {
			off := x1.i1 - x2.i1
			ffo := off + x1.chg1 - x2.chg1
			i0, i1, i2 := x1.i1, x1.i2, x2.i2
			if off > 0 {
				i0 -= off
				i1 -= off
			} else {
				i2 += off
			}
			chg0 := x1.i1 + x1.chg1 - i0
			chg1 := x1.i2 + x1.chg2 - i1
			chg2 := x2.i2 + x2.chg2 - i2
			if ffo < 0 {
				chg0 -= ffo
				chg1 -= ffo
			} else {
				chg2 += ffo
			}
			app(0, i0, chg0, i1, chg1, i2, chg2)
		}
		e1 := x1.i1 + x1.chg1
		e2 := x2.i1 + x2.chg1
		if e1 >= e2 {
			q++
		}
		if e2 >= e1 {
			p++
		}
	}
	for ; p < len(xs1); p++ {
		x1 := xs1[p]
		app(1, x1.i1, x1.chg1, x1.i2, x1.chg2, x1.i1+len(t.recs)-len(b.recs), x1.chg1)
	}
	for ; q < len(xs2); q++ {
		x2 := xs2[q]
		app(2, x2.i1, x2.chg1, x2.i1+len(o.recs)-len(b.recs), x2.chg1, x2.i2, x2.chg2)
	}
	if level >= levelZealous {
		var err error
		if chunks, err = refine(&cl, &o, &t, chunks, labels.Algorithm); err != nil {
			return whole()
		}
		chunks = simplify(&o, chunks, level > levelZealous)
	}
	return render(&b, &o, &t, chunks, labels)
}

func sameIDs(a, b []int32) bool {
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

// refine is xdl_refine_conflicts: diff the two sides of each conflict and
// keep only the differing parts as conflicts.
func refine(cl *classifier, o, t *mfile, in []mchunk, algo DiffAlgorithm) ([]mchunk, error) {
	out := make([]mchunk, 0, len(in))
	for _, m := range in {
		if m.mode != 0 || m.chg1 == 0 || m.chg2 == 0 {
			out = append(out, m)
			continue
		}
		xs, err := cl.xdiff(o.ids[m.i1:m.i1+m.chg1], t.ids[m.i2:m.i2+m.chg2], algo)
		if err != nil {
			return nil, err
		}
		if len(xs) == 0 {
			m.mode = 4
			out = append(out, m)
			continue
		}
		for _, x := range xs {
			out = append(out, mchunk{mode: 0, i0: m.i0, chg0: m.chg0,
				i1: m.i1 + x.i1, chg1: x.chg1, i2: m.i2 + x.i2, chg2: x.chg2})
		}
	}
	return out, nil
}

// simplify is xdl_simplify_non_conflicts: conflicts fewer than four lines
// apart (or, at the alnum level, separated only by lines without letters or
// digits) become one.
func simplify(o *mfile, in []mchunk, noAlnum bool) []mchunk {
	if len(in) == 0 {
		return in
	}
	out := []mchunk{in[0]}
	for _, n := range in[1:] {
		m := &out[len(out)-1]
		begin, end := m.i1+m.chg1, n.i1
		if m.mode != 0 || n.mode != 0 || (end-begin > 3 && (!noAlnum || containsAlnum(o.recs[begin:end]))) {
			out = append(out, n)
			continue
		}
		m.chg1 = n.i1 + n.chg1 - m.i1
		m.chg2 = n.i2 + n.chg2 - m.i2
		if e := n.i0 + n.chg0; e > m.i0+m.chg0 {
			m.chg0 = e - m.i0
		}
	}
	return out
}

func containsAlnum(recs [][]byte) bool {
	for _, r := range recs {
		for _, c := range r {
			if c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' {
				return true
			}
		}
	}
	return false
}

// isEOLCRLF is xdiff's is_eol_crlf: 1 if line i ends in CRLF (for a last
// line without newline, the line before), 0 if LF, -1 if unknown.
func isEOLCRLF(recs [][]byte, i int) int {
	crlf := func(r []byte) int {
		if len(r) > 1 && r[len(r)-2] == '\r' {
			return 1
		}
		return 0
	}
	n := len(recs)
	if i < n-1 {
		return crlf(recs[i])
	}
	if n == 0 {
		return -1
	}
	if r := recs[i]; len(r) > 0 && r[len(r)-1] == '\n' {
		return crlf(r)
	}
	if i == 0 {
		return -1
	}
	return crlf(recs[i-1])
}

func needsCR(b, o, t *mfile, m *mchunk) bool {
	at := func(i int) int {
		if i > 0 {
			return i - 1
		}
		return 0
	}
	v := isEOLCRLF(o.recs, at(m.i1))
	if v != 0 {
		v = isEOLCRLF(t.recs, at(m.i2))
	}
	if v != 0 {
		v = isEOLCRLF(b.recs, 0)
	}
	return v > 0
}

type writer struct {
	buf   bytes.Buffer
	lines int
}

func (w *writer) copy(recs [][]byte, crlf, addNL bool) {
	for _, r := range recs {
		w.buf.Write(r)
	}
	w.lines += len(recs)
	if addNL && len(recs) > 0 {
		if r := recs[len(recs)-1]; len(r) == 0 || r[len(r)-1] != '\n' {
			if crlf {
				w.buf.WriteByte('\r')
			}
			w.buf.WriteByte('\n')
		}
	}
}

func (w *writer) marker(c byte, size int, label string, crlf bool) {
	w.buf.WriteString(strings.Repeat(string(c), size))
	if label != "" {
		w.buf.WriteByte(' ')
		w.buf.WriteString(label)
	}
	if crlf {
		w.buf.WriteByte('\r')
	}
	w.buf.WriteByte('\n')
	w.lines++
}

// render is xdl_fill_merge_buffer.
func render(b, o, t *mfile, chunks []mchunk, labels Labels) ([]byte, []Hunk, bool) {
	var w writer
	var hunks []Hunk
	size := labels.MarkerSize
	if size <= 0 {
		size = markerSize
	}
	i := 0
	for k := range chunks {
		m := &chunks[k]
		switch {
		case m.mode == 0:
			crlf := needsCR(b, o, t, m)
			w.copy(o.recs[i:m.i1], false, false)
			start := w.lines + 1
			w.marker('<', size, labels.Ours, crlf)
			w.copy(o.recs[m.i1:m.i1+m.chg1], crlf, true)
			if labels.ShowBase {
				w.marker('|', size, labels.Base, crlf)
				w.copy(b.recs[m.i0:m.i0+m.chg0], crlf, true)
			}
			w.marker('=', size, "", crlf)
			w.copy(t.recs[m.i2:m.i2+m.chg2], crlf, true)
			w.marker('>', size, labels.Theirs, crlf)
			h := Hunk{
				Base:   LineRange{m.i0 + 1, m.chg0},
				Ours:   LineRange{m.i1 + 1, m.chg1},
				Theirs: LineRange{m.i2 + 1, m.chg2},
				Result: LineRange{start, w.lines + 1 - start},
			}
			h.Content.Base = hunkText(b.recs[m.i0:m.i0+m.chg0], &h.Content.Truncated)
			h.Content.Ours = hunkText(o.recs[m.i1:m.i1+m.chg1], &h.Content.Truncated)
			h.Content.Theirs = hunkText(t.recs[m.i2:m.i2+m.chg2], &h.Content.Truncated)
			hunks = append(hunks, h)
		case m.mode&3 != 0:
			w.copy(o.recs[i:m.i1], false, false)
			if m.mode&1 != 0 {
				w.copy(o.recs[m.i1:m.i1+m.chg1], needsCR(b, o, t, m), m.mode&2 != 0)
			}
			if m.mode&2 != 0 {
				w.copy(t.recs[m.i2:m.i2+m.chg2], false, false)
			}
		default:
			continue
		}
		i = m.i1 + m.chg1
	}
	w.copy(o.recs[i:], false, false)
	return w.buf.Bytes(), hunks, len(hunks) == 0
}
