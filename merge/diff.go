package merge

import (
	"bytes"
	"unicode/utf8"

	"github.com/sergi/go-diff/diffmatchpatch"
)

// This file is the line diff under Diff3. The edit script comes from the
// Myers implementation of github.com/sergi/go-diff (each distinct line is
// mapped to one rune, half-match heuristics and the timeout are off, so the
// script is minimal). It is then normalized the way git's xdiff does it
// (xdl_change_compact without the indent heuristic, which git does not use
// for merges): every group of changed lines is slid as far down as it goes,
// then back up to line up with a change group in the other file if one was
// met. This makes our hunk boundaries, and therefore clean/conflict
// decisions, equal to git's in nearly all cases; they can still differ when
// several minimal scripts exist that compaction does not unify.

// splitLines splits b into records that keep their "\n"; the last record
// may lack it.
func splitLines(b []byte) [][]byte {
	if len(b) == 0 {
		return nil
	}
	n := bytes.Count(b, []byte{'\n'})
	out := make([][]byte, 0, n+1)
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			out = append(out, b)
			break
		}
		out = append(out, b[:i+1:i+1])
		b = b[i+1:]
	}
	return out
}

// interner gives every distinct line a small id, shared by the three files
// of a merge so that ids compare across files.
type interner struct {
	ids map[string]int32
}

func newInterner(size int) *interner { return &interner{ids: make(map[string]int32, size)} }

func (in *interner) lines(recs [][]byte) []int32 {
	out := make([]int32, len(recs))
	for i, r := range recs {
		id, ok := in.ids[string(r)]
		if !ok {
			id = int32(len(in.ids))
			in.ids[string(r)] = id
		}
		out[i] = id
	}
	return out
}

// maxLines is the number of distinct lines the rune encoding can carry.
const maxLines = utf8.MaxRune - 0x800

func idRune(id int32) rune {
	if id < 0xD800 {
		return rune(id)
	}
	return rune(id) + 0x800 // skip the surrogate range
}

// change is one hunk of an edit script: lines [i1, i1+chg1) of file 1 are
// replaced by lines [i2, i2+chg2) of file 2.
type change struct {
	i1, chg1, i2, chg2 int
}

// xfile is one side of a diff: its line ids and the changed-line flags,
// with a false sentinel before the first and after the last line.
type xfile struct {
	ids  []int32
	rchg []bool
}

func newXfile(ids []int32) *xfile  { return &xfile{ids: ids, rchg: make([]bool, len(ids)+2)} }
func (f *xfile) ch(i int) bool     { return f.rchg[i+1] }
func (f *xfile) set(i int, v bool) { f.rchg[i+1] = v }

// diffIDs returns the normalized edit script from a to b.
func diffIDs(a, b []int32) []change {
	f1, f2 := newXfile(a), newXfile(b)
	// Common prefix and suffix first: cheap, and most merges touch little.
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	ma, mb := a[pre:len(a)-suf], b[pre:len(b)-suf]
	switch {
	case len(ma) == 0 && len(mb) == 0:
		return nil
	case len(ma) == 0:
		for i := range mb {
			f2.set(pre+i, true)
		}
	case len(mb) == 0:
		for i := range ma {
			f1.set(pre+i, true)
		}
	default:
		myers(ma, mb, f1, f2, pre)
	}
	compact(f1, f2)
	compact(f2, f1)
	return buildScript(f1, f2)
}

func myers(a, b []int32, f1, f2 *xfile, off int) {
	ra := make([]rune, len(a))
	for i, id := range a {
		ra[i] = idRune(id)
	}
	rb := make([]rune, len(b))
	for i, id := range b {
		rb[i] = idRune(id)
	}
	dmp := diffmatchpatch.New()
	dmp.DiffTimeout = 0 // no deadline, no half-match: a minimal script
	i1, i2 := off, off
	for _, d := range dmp.DiffMainRunes(ra, rb, false) {
		n := utf8.RuneCountInString(d.Text)
		switch d.Type {
		case diffmatchpatch.DiffEqual:
			i1 += n
			i2 += n
		case diffmatchpatch.DiffDelete:
			for k := 0; k < n; k++ {
				f1.set(i1+k, true)
			}
			i1 += n
		case diffmatchpatch.DiffInsert:
			for k := 0; k < n; k++ {
				f2.set(i2+k, true)
			}
			i2 += n
		}
	}
}

func buildScript(f1, f2 *xfile) []change {
	var out []change
	n1, n2 := len(f1.ids), len(f2.ids)
	i1, i2 := 0, 0
	for i1 < n1 || i2 < n2 {
		if f1.ch(i1) || f2.ch(i2) {
			s1, s2 := i1, i2
			for f1.ch(i1) {
				i1++
			}
			for f2.ch(i2) {
				i2++
			}
			out = append(out, change{i1: s1, chg1: i1 - s1, i2: s2, chg2: i2 - s2})
			continue
		}
		i1++
		i2++
	}
	return out
}

type group struct{ start, end int }

func groupInit(f *xfile) group {
	g := group{}
	for f.ch(g.end) {
		g.end++
	}
	return g
}

// next moves g to the next group; it reports false at the end of file.
func (g *group) next(f *xfile) bool {
	if g.end == len(f.ids) {
		return false
	}
	g.start = g.end + 1
	g.end = g.start
	for f.ch(g.end) {
		g.end++
	}
	return true
}

func (g *group) previous(f *xfile) bool {
	if g.start == 0 {
		return false
	}
	g.end = g.start - 1
	g.start = g.end
	for f.ch(g.start - 1) {
		g.start--
	}
	return true
}

func (g *group) slideDown(f *xfile) bool {
	if g.end < len(f.ids) && f.ids[g.start] == f.ids[g.end] {
		f.set(g.start, false)
		g.start++
		f.set(g.end, true)
		g.end++
		for f.ch(g.end) {
			g.end++
		}
		return true
	}
	return false
}

func (g *group) slideUp(f *xfile) bool {
	if g.start > 0 && f.ids[g.start-1] == f.ids[g.end-1] {
		g.start--
		f.set(g.start, true)
		g.end--
		f.set(g.end, false)
		for f.ch(g.start - 1) {
			g.start--
		}
		return true
	}
	return false
}

// compact is xdiff's xdl_change_compact without the indent heuristic.
func compact(f, fo *xfile) {
	g, go_ := groupInit(f), groupInit(fo)
	for {
		if g.end != g.start {
			var earliestEnd, endMatchingOther int
			for {
				size := g.end - g.start
				endMatchingOther = -1
				for g.slideUp(f) {
					go_.previous(fo)
				}
				earliestEnd = g.end
				if go_.end > go_.start {
					endMatchingOther = g.end
				}
				for g.slideDown(f) {
					go_.next(fo)
					if go_.end > go_.start {
						endMatchingOther = g.end
					}
				}
				if size == g.end-g.start {
					break
				}
			}
			if g.end != earliestEnd && endMatchingOther != -1 {
				for go_.end == go_.start {
					g.slideUp(f)
					go_.previous(fo)
				}
			}
		}
		if !g.next(f) {
			break
		}
		go_.next(fo)
	}
}
