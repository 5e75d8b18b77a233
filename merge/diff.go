package merge

import (
	"bytes"
)

// This file holds the line records and the edit-script plumbing shared by
// the diffs of xdiff.go: splitting into lines, global line ids,
// xdl_change_compact and xdl_build_script.

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
