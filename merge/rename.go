package merge

import (
	"sort"
	"strings"

	"github.com/lockstep-hq/lockstep/gitobj"
)

// Rename detection as git's merge-ort runs diffcore-rename on each side of
// a merge (see the package comment, "Renames").

const (
	maxScore = 60000.0 // git's MAX_SCORE
	// DefaultRenameScore is the similarity (out of 60000, git's scale)
	// above which a delete and an add pair up: 50%, git's default.
	defaultRenameScore = 30000
	// DefaultRenameLimit bounds the inexact rename matrix: with more than
	// limit² source×destination pairs left after exact and basename
	// matches, only those are kept (git's merge.renameLimit default).
	DefaultRenameLimit = 7000
	numCandidatePerDst = 4
)

// emptyBlob is the oid of the empty blob; git never pairs it (rename_empty
// is off in merges).
var emptyBlob = gitobj.ComputeHash(gitobj.BlobObject, nil)

// pathEntry is a file (non-tree entry) at a full path.
type pathEntry struct {
	path string
	e    entry
}

// sideDiff is what one side changed against the base, file by file.
type sideDiff struct {
	adds, dels []pathEntry          // in path order (git's diff queue order)
	mods       map[string]bool      // files present in both with another mode or oid
	delSet     map[string]bool      // paths of dels
	addDirs    map[string]bool      // directories holding an added file
	rmDirs     map[string]bool      // directories of the base that are gone on this side
	addByPath  map[string]pathEntry // adds by path
}

func newSideDiff() *sideDiff {
	return &sideDiff{mods: map[string]bool{}, delSet: map[string]bool{}, addDirs: map[string]bool{},
		rmDirs: map[string]bool{}, addByPath: map[string]pathEntry{}}
}

// diffSide walks base and side where they differ and records file adds,
// deletes and modifications.
func (m *merger) diffSide(d *sideDiff, path string, b, s gitobj.Hash) error {
	b, s = norm(b), norm(s)
	if b == s {
		return nil
	}
	if err := m.ctx.Err(); err != nil {
		return err
	}
	be, err := m.readTree(b)
	if err != nil {
		return err
	}
	se, err := m.readTree(s)
	if err != nil {
		return err
	}
	type pair struct{ b, s *entry }
	names := map[string]*pair{}
	var order []string
	get := func(n string) *pair {
		x, ok := names[n]
		if !ok {
			x = &pair{}
			names[n] = x
			order = append(order, n)
		}
		return x
	}
	for i := range be {
		get(be[i].Name).b = &be[i]
	}
	for i := range se {
		get(se[i].Name).s = &se[i]
	}
	// Full paths in byte order are git's traversal order for files.
	sort.Slice(order, func(i, j int) bool { return join(path, order[i]) < join(path, order[j]) })
	for _, n := range order {
		x := names[n]
		if sameEntry(x.b, x.s) {
			continue
		}
		p := join(path, n)
		bt, st := x.b.isTree(), x.s.isTree()
		if bt && !st {
			d.rmDirs[p] = true
		}
		if bt || st {
			var bh, sh gitobj.Hash
			if bt {
				bh = x.b.Hash
			}
			if st {
				sh = x.s.Hash
			}
			if err := m.diffSide(d, p, bh, sh); err != nil {
				return err
			}
		}
		bf, sf := x.b != nil && !bt, x.s != nil && !st
		switch {
		case bf && sf:
			d.mods[p] = true
		case bf:
			d.dels = append(d.dels, pathEntry{p, *x.b})
			d.delSet[p] = true
		case sf:
			d.adds = append(d.adds, pathEntry{p, *x.s})
			d.addByPath[p] = pathEntry{p, *x.s}
			d.addDirs[path] = true
		}
	}
	return nil
}

// sortPaths keeps adds and dels in full-path order (a directory's entries
// were appended after recursing, so re-sort once at the end).
func (d *sideDiff) sortPaths() {
	sort.SliceStable(d.adds, func(i, j int) bool { return d.adds[i].path < d.adds[j].path })
	sort.SliceStable(d.dels, func(i, j int) bool { return d.dels[i].path < d.dels[j].path })
}

// rename is one detected rename on a side (1 ours, 2 theirs).
type rename struct {
	src, dst pathEntry
	side     int
	score    int
}

// relevant reports whether a source deleted on this side matters to the
// merge (merge-ort's relevant_sources): the other side changed the file
// (content), or added files in a directory this side removed (location,
// for directory renames).
func relevantSource(src string, other, self *sideDiff) bool {
	if other.delSet[src] || other.mods[src] {
		return true
	}
	for d := parentDir(src); ; d = parentDir(d) {
		if other.addDirs[d] && self.rmDirs[d] {
			return true
		}
		if d == "" {
			return false
		}
	}
}

func parentDir(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[:i]
	}
	return ""
}

func baseName(p string) string {
	return p[strings.LastIndexByte(p, '/')+1:]
}

// basenameSame is git's basename_same: the last path components match.
func basenameSame(a, b string) bool {
	return baseName(a) == baseName(b)
}

// spanCount is git's hash_chars result: per span hash, bytes, sorted.
type spanCount struct {
	hash []uint32
	cnt  []uint32
	size int64
}

const spanHashBase = 107927

// countFinalSpan: git before 2.44 ignores the bytes after the last LF (or
// 64-byte chunk), so a last line without a newline never counts as copied;
// later versions count it. We match the git this project checks against
// (2.39).
const countFinalSpan = false

// hashSpans cuts data into chunks ending at LF or 64 bytes and counts the
// bytes per chunk hash, as git's diffcore-delta does (CR of CRLF ignored
// in text).
func hashSpans(data []byte) *spanCount {
	text := !isBinary(data)
	counts := map[uint32]uint32{}
	var accum1, accum2 uint32
	n := uint32(0)
	for i := 0; i < len(data); i++ {
		c := uint32(data[i])
		old1 := accum1
		if text && c == '\r' && i+1 < len(data) && data[i+1] == '\n' {
			continue
		}
		accum1 = (accum1 << 7) ^ (accum2 >> 25)
		accum2 = (accum2 << 7) ^ (old1 >> 25)
		accum1 += c
		n++
		if n < 64 && c != '\n' {
			continue
		}
		counts[(accum1+accum2*0x61)%spanHashBase] += n
		n = 0
		accum1, accum2 = 0, 0
	}
	if n > 0 && countFinalSpan {
		counts[(accum1+accum2*0x61)%spanHashBase] += n
	}
	sc := &spanCount{hash: make([]uint32, 0, len(counts)), size: int64(len(data))}
	for h := range counts {
		sc.hash = append(sc.hash, h)
	}
	sort.Slice(sc.hash, func(i, j int) bool { return sc.hash[i] < sc.hash[j] })
	sc.cnt = make([]uint32, len(sc.hash))
	for i, h := range sc.hash {
		sc.cnt[i] = counts[h]
	}
	return sc
}

// copied is diffcore_count_changes' src_copied.
func copied(s, d *spanCount) uint64 {
	var sc uint64
	j := 0
	for i, h := range s.hash {
		for j < len(d.hash) && d.hash[j] < h {
			j++
		}
		var dc uint32
		if j < len(d.hash) && d.hash[j] == h {
			dc = d.cnt[j]
			j++
		}
		if s.cnt[i] < dc {
			sc += uint64(s.cnt[i])
		} else {
			sc += uint64(dc)
		}
	}
	return sc
}

// renameDetector holds blob sizes and span counts for one merge.
type renameDetector struct {
	m     *merger
	sizes map[gitobj.Hash]int64
	spans map[gitobj.Hash]*spanCount
}

func (r *renameDetector) size(h gitobj.Hash) (int64, error) {
	if s, ok := r.sizes[h]; ok {
		return s, nil
	}
	obj, err := r.m.s.EncodedObject(gitobj.BlobObject, h)
	if err != nil {
		return 0, notFound(err, "blob", h)
	}
	r.sizes[h] = obj.Size()
	return obj.Size(), nil
}

func (r *renameDetector) span(h gitobj.Hash) (*spanCount, error) {
	if s, ok := r.spans[h]; ok {
		return s, nil
	}
	data, err := readObject(r.m.s, gitobj.BlobObject, h)
	if err != nil {
		return nil, err
	}
	s := hashSpans(data)
	r.spans[h] = s
	return s, nil
}

// similarity is git's estimate_similarity (0..60000).
func (r *renameDetector) similarity(src, dst *entry, minScore int) (int, error) {
	if src.Mode&0o170000 != 0o100000 || dst.Mode&0o170000 != 0o100000 {
		return 0, nil
	}
	ss, err := r.size(src.Hash)
	if err != nil {
		return 0, err
	}
	ds, err := r.size(dst.Hash)
	if err != nil {
		return 0, err
	}
	maxSize, baseSize := ss, ds
	if ds > ss {
		maxSize, baseSize = ds, ss
	}
	delta := maxSize - baseSize
	if float64(maxSize)*(maxScore-float64(minScore)) < float64(delta)*maxScore {
		return 0, nil
	}
	sc, err := r.span(src.Hash)
	if err != nil {
		return 0, err
	}
	dc, err := r.span(dst.Hash)
	if err != nil {
		return 0, err
	}
	if ds == 0 {
		return 0, nil
	}
	return int(float64(copied(sc, dc)) * maxScore / float64(maxSize)), nil
}

type diffScore struct {
	src, dst  int
	score     int
	nameScore int
}

// scoreCompare is git's score_compare (>0: a sorts after b).
func scoreCompare(a, b *diffScore) int {
	if a.dst < 0 {
		if 0 <= b.dst {
			return 1
		}
		return 0
	}
	if b.dst < 0 {
		return -1
	}
	if a.score == b.score {
		return b.nameScore - a.nameScore
	}
	return b.score - a.score
}

// detect finds the renames of one side (self) given the other side's
// changes, as diffcore_rename_extended does for merge-ort.
func (r *renameDetector) detect(side int, self, other *sideDiff, limit int) ([]rename, error) {
	var srcs, dsts []pathEntry
	for _, p := range self.dels {
		if p.e.Hash != emptyBlob {
			srcs = append(srcs, p)
		}
	}
	for _, p := range self.adds {
		if p.e.Hash != emptyBlob {
			dsts = append(dsts, p)
		}
	}
	relevant := map[string]bool{}
	for _, s := range self.dels {
		if relevantSource(s.path, other, self) {
			relevant[s.path] = true
		}
	}
	if len(self.adds) == 0 || len(relevant) == 0 || len(srcs) == 0 || len(dsts) == 0 {
		return nil, nil
	}
	srcUsed := make([]bool, len(srcs))
	dstSrc := make([]int, len(dsts))
	dstScore := make([]int, len(dsts))
	for i := range dstSrc {
		dstSrc[i] = -1
	}
	// Exact renames: same oid (and mode unless both are regular files);
	// an unused source with the same basename wins, else the first.
	byHash := map[gitobj.Hash][]int{}
	for i, s := range srcs {
		byHash[s.e.Hash] = append(byHash[s.e.Hash], i)
	}
	isReg := func(m fileMode) bool { return m&0o170000 == 0o100000 }
	for di, d := range dsts {
		best, bestScore, tries := -1, -1, 100
		for _, si := range byHash[d.e.Hash] {
			s := srcs[si]
			if (!isReg(s.e.Mode) || !isReg(d.e.Mode)) && s.e.Mode != d.e.Mode {
				continue
			}
			if srcUsed[si] {
				continue
			}
			score := 1
			if basenameSame(s.path, d.path) {
				score++
			}
			if score > bestScore {
				best, bestScore = si, score
				if score == 2 {
					break
				}
			}
			tries--
			if tries == 0 {
				break
			}
		}
		if best >= 0 {
			srcUsed[best] = true
			dstSrc[di] = best
			dstScore[di] = maxScore
		}
	}
	// Sources left after exact renames.
	var left []int
	for i := range srcs {
		if !srcUsed[i] {
			left = append(left, i)
		}
	}
	// Basename matches: a relevant source whose basename is unique among
	// the sources left and among the destinations left pairs with that
	// destination at 75% similarity or more.
	minBasename := defaultRenameScore + int(0.5*float64(maxScore-defaultRenameScore))
	srcBase := map[string]int{}
	for _, i := range left {
		b := baseName(srcs[i].path)
		if _, ok := srcBase[b]; ok {
			srcBase[b] = -1
		} else {
			srcBase[b] = i
		}
	}
	dstBase := map[string]int{}
	for di := range dsts {
		if dstSrc[di] >= 0 {
			continue
		}
		b := baseName(dsts[di].path)
		if _, ok := dstBase[b]; ok {
			dstBase[b] = -1
		} else {
			dstBase[b] = di
		}
	}
	for _, i := range left {
		if !relevant[srcs[i].path] {
			continue
		}
		b := baseName(srcs[i].path)
		di, ok := dstBase[b]
		if !ok || srcBase[b] != i || di < 0 || dstSrc[di] >= 0 {
			continue
		}
		score, err := r.similarity(&srcs[i].e, &dsts[di].e, minBasename)
		if err != nil {
			return nil, err
		}
		if score < minBasename {
			continue
		}
		srcUsed[i] = true
		dstSrc[di] = i
		dstScore[di] = score
	}
	// The matrix: relevant sources left against destinations left.
	var msrc []int
	for _, i := range left {
		if !srcUsed[i] && relevant[srcs[i].path] {
			msrc = append(msrc, i)
		}
	}
	var mdst []int
	for di := range dsts {
		if dstSrc[di] < 0 {
			mdst = append(mdst, di)
		}
	}
	if len(msrc) > 0 && len(mdst) > 0 && (limit <= 0 || int64(len(msrc))*int64(len(mdst)) <= int64(limit)*int64(limit)) {
		mx := make([]diffScore, 0, len(mdst)*numCandidatePerDst)
		for _, di := range mdst {
			var slots [numCandidatePerDst]diffScore
			for k := range slots {
				slots[k].dst = -1
			}
			for _, si := range msrc {
				if err := r.m.ctx.Err(); err != nil {
					return nil, err
				}
				score, err := r.similarity(&srcs[si].e, &dsts[di].e, defaultRenameScore)
				if err != nil {
					return nil, err
				}
				o := diffScore{src: si, dst: di, score: score}
				if basenameSame(srcs[si].path, dsts[di].path) {
					o.nameScore = 1
				}
				worst := 0
				for k := 1; k < numCandidatePerDst; k++ {
					if scoreCompare(&slots[k], &slots[worst]) > 0 {
						worst = k
					}
				}
				if scoreCompare(&slots[worst], &o) > 0 {
					slots[worst] = o
				}
			}
			mx = append(mx, slots[:]...)
		}
		sort.SliceStable(mx, func(i, j int) bool { return scoreCompare(&mx[i], &mx[j]) < 0 })
		for _, c := range mx {
			if c.dst < 0 || c.score < defaultRenameScore {
				break
			}
			if dstSrc[c.dst] >= 0 || srcUsed[c.src] {
				continue
			}
			srcUsed[c.src] = true
			dstSrc[c.dst] = c.src
			dstScore[c.dst] = c.score
		}
	}
	var out []rename
	for di, si := range dstSrc {
		if si >= 0 {
			out = append(out, rename{src: srcs[si], dst: dsts[di], side: side, score: dstScore[di]})
		}
	}
	return out, nil
}
