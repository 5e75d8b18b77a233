package merge

// This file is the line diff under Diff3, written after git's xdiff
// (xprepare.c, xdiffi.c, xhistogram.c) so that edit scripts, and therefore
// clean/conflict verdicts and conflict layouts, are the ones git computes:
//
//   - Histogram (what merge-ort, git merge and git merge-tree use): the
//     histogram diff of xhistogram.c, which splits the files around the
//     longest common run of lines that are rare in the base region, and
//     falls back to the classic diff for a region whose common lines all
//     occur more than 64 times.
//   - Myers (what git merge-file uses up to git 2.43): xdiff's classic
//     diff: common prefix and suffix trimmed, lines without a match in the
//     other file discarded (and frequent lines among them, the
//     xdl_cleanup_records heuristic), then xdiff's Myers with its cost
//     heuristics (not a minimal diff on large inputs).
//
// Both are followed by xdl_change_compact without the indent heuristic
// (merges never set XDF_INDENT_HEURISTIC; diff.indentHeuristic only applies
// to git diff's output) and xdl_build_script.

// DiffAlgorithm selects the line diff of a line merge.
type DiffAlgorithm int

const (
	// Histogram is git's histogram diff, the one merge-ort uses: git
	// merge, git merge-tree, git rebase, git cherry-pick.
	Histogram DiffAlgorithm = iota
	// Myers is xdiff's classic diff, the default of git merge-file (git
	// 2.39; newer git has merge-file --diff-algorithm).
	Myers
)

// String is the name git uses for the algorithm.
func (a DiffAlgorithm) String() string {
	if a == Myers {
		return "myers"
	}
	return "histogram"
}

// xdiffErr is a region that xhistogram.c refuses (a hash chain of 64
// distinct lines): git's merge fails on such input. It cannot happen on
// the lines of real files in practice; the merge reports a whole-file
// conflict.
type xdiffErr struct{}

func (xdiffErr) Error() string { return "histogram: hash chain too long" }

// classifier gives the lines of one diff xdiff's class numbers: classes
// are numbered in order of first appearance, file 1 then file 2, and the
// number of occurrences in each file is counted. Input lines are global
// ids (interner); the scratch array maps them back after use.
type classifier struct {
	local []int32 // global id -> local class + 1
}

func (c *classifier) classify(a, b []int32) (ca, cb []int32, len1, len2 []int32) {
	if need := maxID(a, b) + 1; need > len(c.local) {
		c.local = make([]int32, need+need/4)
	}
	ca, cb = make([]int32, len(a)), make([]int32, len(b))
	n := int32(0)
	for pass, src := range [2][]int32{a, b} {
		dst := ca
		if pass == 1 {
			dst = cb
		}
		for i, g := range src {
			l := c.local[g]
			if l == 0 {
				n++
				l = n
				c.local[g] = l
				len1 = append(len1, 0)
				len2 = append(len2, 0)
			}
			dst[i] = l - 1
			if pass == 0 {
				len1[l-1]++
			} else {
				len2[l-1]++
			}
		}
	}
	for _, g := range a {
		c.local[g] = 0
	}
	for _, g := range b {
		c.local[g] = 0
	}
	return ca, cb, len1, len2
}

func maxID(a, b []int32) int {
	m := int32(-1)
	for _, v := range a {
		if v > m {
			m = v
		}
	}
	for _, v := range b {
		if v > m {
			m = v
		}
	}
	return int(m)
}

// xdiff returns the edit script from a to b (lines as global ids), as
// xdl_do_diff + xdl_change_compact (both ways) + xdl_build_script.
func (c *classifier) xdiff(a, b []int32, algo DiffAlgorithm) ([]change, error) {
	ca, cb, len1, len2 := c.classify(a, b)
	f1, f2 := newXfile(ca), newXfile(cb)
	if algo == Myers {
		classicDiff(ca, cb, len1, len2, f1.rchg[1:], f2.rchg[1:])
	} else {
		h := histogram{a: ca, b: cb, nclass: len(len1), r1: f1.rchg[1:], r2: f2.rchg[1:]}
		if err := h.diff(1, len(ca), 1, len(cb)); err != nil {
			return nil, err
		}
	}
	compact(f1, f2)
	compact(f2, f1)
	return buildScript(f1, f2), nil
}

// ---- classic diff (xprepare.c + xdiffi.c) ----

const (
	kpdisRun     = 4    // XDL_KPDIS_RUN
	maxEqLimit   = 1024 // XDL_MAX_EQLIMIT
	simscanWin   = 100  // XDL_SIMSCAN_WINDOW
	maxCostMin   = 256  // XDL_MAX_COST_MIN
	heurMinCost  = 256  // XDL_HEUR_MIN_COST
	snakeCnt     = 20   // XDL_SNAKE_CNT
	kHeur        = 4    // XDL_K_HEUR
	lineMax      = int(^uint(0) >> 1)
	histMaxChain = 64
)

func bogosqrt(n int) int {
	i := 1
	for ; n > 0; n >>= 2 {
		i <<= 1
	}
	return i
}

// classicDiff marks the changed lines of a and b (class ids; len1/len2
// their occurrence counts in a and b) in r1 and r2, as xdl_do_diff does
// without an algorithm flag.
func classicDiff(a, b []int32, len1, len2 []int32, r1, r2 []bool) {
	n1, n2 := len(a), len(b)
	// xdl_trim_ends
	lim := min(n1, n2)
	i := 0
	for i < lim && a[i] == b[i] {
		i++
	}
	dstart := i
	lim -= i
	i = 0
	for i < lim && a[n1-1-i] == b[n2-1-i] {
		i++
	}
	dend1, dend2 := n1-i-1, n2-i-1

	// xdl_cleanup_records
	dis1, dis2 := make([]byte, n1+1), make([]byte, n2+1)
	mlim := min(bogosqrt(n1), maxEqLimit)
	for i := dstart; i <= dend1; i++ {
		switch nm := int(len2[a[i]]); {
		case nm == 0:
			dis1[i] = 0
		case nm >= mlim:
			dis1[i] = 2
		default:
			dis1[i] = 1
		}
	}
	mlim = min(bogosqrt(n2), maxEqLimit)
	for i := dstart; i <= dend2; i++ {
		switch nm := int(len1[b[i]]); {
		case nm == 0:
			dis2[i] = 0
		case nm >= mlim:
			dis2[i] = 2
		default:
			dis2[i] = 1
		}
	}
	var rindex1, rindex2 []int
	var ha1, ha2 []int32
	for i := dstart; i <= dend1; i++ {
		if dis1[i] == 1 || (dis1[i] == 2 && !cleanMmatch(dis1, i, dstart, dend1)) {
			rindex1 = append(rindex1, i)
			ha1 = append(ha1, a[i])
		} else {
			r1[i] = true
		}
	}
	for i := dstart; i <= dend2; i++ {
		if dis2[i] == 1 || (dis2[i] == 2 && !cleanMmatch(dis2, i, dstart, dend2)) {
			rindex2 = append(rindex2, i)
			ha2 = append(ha2, b[i])
		} else {
			r2[i] = true
		}
	}

	nr1, nr2 := len(ha1), len(ha2)
	ndiags := nr1 + nr2 + 3
	kv := make([]int, 2*ndiags+2)
	env := myersEnv{
		ha1: ha1, ha2: ha2, rindex1: rindex1, rindex2: rindex2, r1: r1, r2: r2,
		kvdf: kv[:ndiags], kvdb: kv[ndiags:], koff: nr2 + 1,
		mxcost: max(bogosqrt(ndiags), maxCostMin),
	}
	env.recsCmp(0, nr1, 0, nr2, false)
}

// cleanMmatch is xdl_clean_mmatch: whether a line with many matches
// sits in a run of lines without matches and should be discarded too.
func cleanMmatch(dis []byte, i, s, e int) bool {
	if i-s > simscanWin {
		s = i - simscanWin
	}
	if e-i > simscanWin {
		e = i + simscanWin
	}
	rdis0, rpdis0 := 0, 1
	for r := 1; i-r >= s; r++ {
		if dis[i-r] == 0 {
			rdis0++
		} else if dis[i-r] == 2 {
			rpdis0++
		} else {
			break
		}
	}
	if rdis0 == 0 {
		return false
	}
	rdis1, rpdis1 := 0, 1
	for r := 1; i+r <= e; r++ {
		if dis[i+r] == 0 {
			rdis1++
		} else if dis[i+r] == 2 {
			rpdis1++
		} else {
			break
		}
	}
	if rdis1 == 0 {
		return false
	}
	rdis1 += rdis0
	rpdis1 += rpdis0
	return rpdis1*kpdisRun < rpdis1+rdis1
}

type myersEnv struct {
	ha1, ha2         []int32
	rindex1, rindex2 []int
	r1, r2           []bool
	kvdf, kvdb       []int // indexed by diagonal + koff
	koff             int
	mxcost           int
}

// recsCmp is xdl_recs_cmp.
func (e *myersEnv) recsCmp(off1, lim1, off2, lim2 int, needMin bool) {
	ha1, ha2 := e.ha1, e.ha2
	for off1 < lim1 && off2 < lim2 && ha1[off1] == ha2[off2] {
		off1++
		off2++
	}
	for off1 < lim1 && off2 < lim2 && ha1[lim1-1] == ha2[lim2-1] {
		lim1--
		lim2--
	}
	switch {
	case off1 == lim1:
		for ; off2 < lim2; off2++ {
			e.r2[e.rindex2[off2]] = true
		}
	case off2 == lim2:
		for ; off1 < lim1; off1++ {
			e.r1[e.rindex1[off1]] = true
		}
	default:
		i1, i2, minLo, minHi := e.split(off1, lim1, off2, lim2, needMin)
		e.recsCmp(off1, i1, off2, i2, minLo)
		e.recsCmp(i1, lim1, i2, lim2, minHi)
	}
}

// split is xdl_split: the middle snake of the box, or a heuristic cut
// when the search gets expensive.
func (e *myersEnv) split(off1, lim1, off2, lim2 int, needMin bool) (si1, si2 int, minLo, minHi bool) {
	ha1, ha2 := e.ha1, e.ha2
	k := e.koff
	kvdf, kvdb := e.kvdf, e.kvdb
	dmin, dmax := off1-lim2, lim1-off2
	fmid, bmid := off1-off2, lim1-lim2
	odd := (fmid-bmid)&1 != 0
	fmin, fmax := fmid, fmid
	bmin, bmax := bmid, bmid

	kvdf[k+fmid] = off1
	kvdb[k+bmid] = lim1
	for ec := 1; ; ec++ {
		gotSnake := false
		if fmin > dmin {
			fmin--
			kvdf[k+fmin-1] = -1
		} else {
			fmin++
		}
		if fmax < dmax {
			fmax++
			kvdf[k+fmax+1] = -1
		} else {
			fmax--
		}
		for d := fmax; d >= fmin; d -= 2 {
			var i1 int
			if kvdf[k+d-1] >= kvdf[k+d+1] {
				i1 = kvdf[k+d-1] + 1
			} else {
				i1 = kvdf[k+d+1]
			}
			prev1 := i1
			i2 := i1 - d
			for i1 < lim1 && i2 < lim2 && ha1[i1] == ha2[i2] {
				i1++
				i2++
			}
			if i1-prev1 > snakeCnt {
				gotSnake = true
			}
			kvdf[k+d] = i1
			if odd && bmin <= d && d <= bmax && kvdb[k+d] <= i1 {
				return i1, i2, true, true
			}
		}
		if bmin > dmin {
			bmin--
			kvdb[k+bmin-1] = lineMax
		} else {
			bmin++
		}
		if bmax < dmax {
			bmax++
			kvdb[k+bmax+1] = lineMax
		} else {
			bmax--
		}
		for d := bmax; d >= bmin; d -= 2 {
			var i1 int
			if kvdb[k+d-1] < kvdb[k+d+1] {
				i1 = kvdb[k+d-1]
			} else {
				i1 = kvdb[k+d+1] - 1
			}
			prev1 := i1
			i2 := i1 - d
			for i1 > off1 && i2 > off2 && ha1[i1-1] == ha2[i2-1] {
				i1--
				i2--
			}
			if prev1-i1 > snakeCnt {
				gotSnake = true
			}
			kvdb[k+d] = i1
			if !odd && fmin <= d && d <= fmax && i1 <= kvdf[k+d] {
				return i1, i2, true, true
			}
		}
		if needMin {
			continue
		}
		if gotSnake && ec > heurMinCost {
			best := 0
			for d := fmax; d >= fmin; d -= 2 {
				dd := d - fmid
				if dd < 0 {
					dd = -dd
				}
				i1 := kvdf[k+d]
				i2 := i1 - d
				v := (i1 - off1) + (i2 - off2) - dd
				if v > kHeur*ec && v > best &&
					off1+snakeCnt <= i1 && i1 < lim1 &&
					off2+snakeCnt <= i2 && i2 < lim2 {
					for kk := 1; ha1[i1-kk] == ha2[i2-kk]; kk++ {
						if kk == snakeCnt {
							best = v
							si1, si2 = i1, i2
							break
						}
					}
				}
			}
			if best > 0 {
				return si1, si2, true, false
			}
			best = 0
			for d := bmax; d >= bmin; d -= 2 {
				dd := d - bmid
				if dd < 0 {
					dd = -dd
				}
				i1 := kvdb[k+d]
				i2 := i1 - d
				v := (lim1 - i1) + (lim2 - i2) - dd
				if v > kHeur*ec && v > best &&
					off1 < i1 && i1 <= lim1-snakeCnt &&
					off2 < i2 && i2 <= lim2-snakeCnt {
					for kk := 0; ha1[i1+kk] == ha2[i2+kk]; kk++ {
						if kk == snakeCnt-1 {
							best = v
							si1, si2 = i1, i2
							break
						}
					}
				}
			}
			if best > 0 {
				return si1, si2, false, true
			}
		}
		if ec >= e.mxcost {
			fbest, fbest1 := -1, -1
			for d := fmax; d >= fmin; d -= 2 {
				i1 := min(kvdf[k+d], lim1)
				i2 := i1 - d
				if lim2 < i2 {
					i1, i2 = lim2+d, lim2
				}
				if fbest < i1+i2 {
					fbest = i1 + i2
					fbest1 = i1
				}
			}
			bbest, bbest1 := lineMax, lineMax
			for d := bmax; d >= bmin; d -= 2 {
				i1 := max(off1, kvdb[k+d])
				i2 := i1 - d
				if i2 < off2 {
					i1, i2 = off2+d, off2
				}
				if i1+i2 < bbest {
					bbest = i1 + i2
					bbest1 = i1
				}
			}
			if (lim1+lim2)-bbest < fbest-(off1+off2) {
				return fbest1, fbest - fbest1, true, false
			}
			return bbest1, bbest - bbest1, false, true
		}
	}
}

// ---- histogram diff (xhistogram.c) ----

// histogram holds one diff's state. Lines are 1-based as in xhistogram.c;
// a and b hold class ids, r1 and r2 the changed flags (0-based).
type histogram struct {
	a, b   []int32
	nclass int
	r1, r2 []bool

	// per find_lcs, indexed by class (recPtr 0: no record) and by line
	recPtr  []int
	recCnt  []int
	next    []int // next occurrence of a line in the region, 0 if none
	touched []int32
	buckets []uint8
	// fallBack's occurrence counts, by class
	cnt1, cnt2 []int32
}

type region struct{ begin1, end1, begin2, end2 int }

// diff is histogram_diff over lines [line1, line1+count1) of a and
// [line2, line2+count2) of b.
func (h *histogram) diff(line1, count1, line2, count2 int) error {
	for {
		if count1 <= 0 && count2 <= 0 {
			return nil
		}
		if count1 == 0 {
			for ; count2 > 0; count2-- {
				h.r2[line2-1] = true
				line2++
			}
			return nil
		}
		if count2 == 0 {
			for ; count1 > 0; count1-- {
				h.r1[line1-1] = true
				line1++
			}
			return nil
		}
		var lcs region
		found, err := h.findLCS(&lcs, line1, count1, line2, count2)
		if err != nil {
			return err
		}
		if found {
			h.fallBack(line1, count1, line2, count2)
			return nil
		}
		if lcs.begin1 == 0 && lcs.begin2 == 0 {
			for ; count1 > 0; count1-- {
				h.r1[line1-1] = true
				line1++
			}
			for ; count2 > 0; count2-- {
				h.r2[line2-1] = true
				line2++
			}
			return nil
		}
		if err := h.diff(line1, lcs.begin1-line1, line2, lcs.begin2-line2); err != nil {
			return err
		}
		end1, end2 := line1+count1-1, line2+count2-1
		count1 = end1 - lcs.end1
		line1 = lcs.end1 + 1
		count2 = end2 - lcs.end2
		line2 = lcs.end2 + 1
	}
}

// fallBack is fall_back_to_classic_diff: the classic diff of the region
// as a file pair of its own.
func (h *histogram) fallBack(line1, count1, line2, count2 int) {
	sa, sb := h.a[line1-1:line1-1+count1], h.b[line2-1:line2-1+count2]
	// Class ids stay valid (equality is all the classic diff looks at);
	// occurrences are counted within the region.
	if len(h.cnt1) < h.nclass {
		h.cnt1, h.cnt2 = make([]int32, h.nclass), make([]int32, h.nclass)
	}
	for _, c := range sa {
		h.cnt1[c]++
	}
	for _, c := range sb {
		h.cnt2[c]++
	}
	classicDiff(sa, sb, h.cnt1, h.cnt2, h.r1[line1-1:line1-1+count1], h.r2[line2-1:line2-1+count2])
	for _, c := range sa {
		h.cnt1[c] = 0
	}
	for _, c := range sb {
		h.cnt2[c] = 0
	}
}

func (h *histogram) grow() {
	h.recPtr = make([]int, h.nclass)
	h.recCnt = make([]int, h.nclass)
	h.next = make([]int, len(h.a)+1)
}

func hashBits(size int) uint {
	val, bits := 1, uint(0)
	for val < size && bits < 32 {
		val <<= 1
		bits++
	}
	if bits == 0 {
		return 1
	}
	return bits
}

// findLCS is find_lcs: found reports that the region must fall back to
// the classic diff.
func (h *histogram) findLCS(lcs *region, line1, count1, line2, count2 int) (found bool, err error) {
	if h.recPtr == nil {
		h.grow()
	}
	defer func() {
		for _, c := range h.touched {
			h.recPtr[c] = 0
			h.recCnt[c] = 0
		}
		h.touched = h.touched[:0]
	}()
	// scanA. Records of xhistogram.c live in a hash table of 2^bits
	// chains; inserting a 65th distinct line into one chain fails the
	// diff. Only that failure depends on the table, so only the chain
	// lengths are kept.
	bits := hashBits(count1)
	mask := uint64(1)<<bits - 1
	if cap(h.buckets) < 1<<bits {
		h.buckets = make([]uint8, 1<<bits)
	}
	buckets := h.buckets[:1<<bits]
	clear(buckets)
	end1 := line1 + count1 - 1
	for ptr := end1; ptr >= line1; ptr-- {
		c := h.a[ptr-1]
		if h.recPtr[c] != 0 {
			h.next[ptr] = h.recPtr[c]
			h.recPtr[c] = ptr
			h.recCnt[c]++
			continue
		}
		v := uint64(c)
		bk := (v + v>>bits) & mask
		if buckets[bk] == histMaxChain {
			return false, xdiffErr{}
		}
		buckets[bk]++
		h.recPtr[c] = ptr
		h.recCnt[c] = 1
		h.next[ptr] = 0
		h.touched = append(h.touched, c)
	}

	st := lcsState{cnt: histMaxChain + 1}
	end2 := line2 + count2 - 1
	for bptr := line2; bptr <= end2; {
		bptr = h.tryLCS(&st, lcs, bptr, line1, end1, line2, end2)
	}
	return st.hasCommon && histMaxChain < st.cnt, nil
}

type lcsState struct {
	cnt       int
	hasCommon bool
}

// tryLCS is try_lcs. Only the record of b's line's class can match, so
// the chain walk of xhistogram.c reduces to that record.
func (h *histogram) tryLCS(st *lcsState, lcs *region, bptr, line1, end1, line2, end2 int) int {
	bnext := bptr + 1
	c := h.b[bptr-1]
	if int(c) >= len(h.recPtr) || h.recPtr[c] == 0 {
		return bnext
	}
	rcnt := h.recCnt[c]
	st.hasCommon = true
	if rcnt > st.cnt {
		return bnext
	}
	a, b := h.a, h.b
	as := h.recPtr[c]
	for {
		np := h.next[as]
		bs := bptr
		ae, be := as, bs
		rc := rcnt
		for line1 < as && line2 < bs && a[as-2] == b[bs-2] {
			as--
			bs--
			if 1 < rc {
				rc = min(rc, h.recCnt[a[as-1]])
			}
		}
		for ae < end1 && be < end2 && a[ae] == b[be] {
			ae++
			be++
			if 1 < rc {
				rc = min(rc, h.recCnt[a[ae-1]])
			}
		}
		if bnext <= be {
			bnext = be + 1
		}
		if lcs.end1-lcs.begin1 < ae-as || rc < st.cnt {
			*lcs = region{begin1: as, begin2: bs, end1: ae, end2: be}
			st.cnt = rc
		}
		if np == 0 {
			break
		}
		for np <= ae {
			np = h.next[np]
			if np == 0 {
				return bnext
			}
		}
		as = np
	}
	return bnext
}
