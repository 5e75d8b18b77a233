package merge

import (
	"sort"

	"github.com/lockstep-hq/lockstep/gitobj"
)

// Conflict kinds added by rename detection.
const (
	KindRenameRename    = "rename/rename"    // one file renamed differently on both sides (1to2), or two files renamed to one path (2to1)
	KindRenameDelete    = "rename/delete"    // renamed on one side, deleted on the other
	KindRenameAdd       = "rename/add"       // renamed on one side onto a path the other side added
	KindDirectoryRename = "directory_rename" // a file added in a directory the other side renamed: moved with it
)

// pstate is one path's three versions after renames moved them (merge-ort's
// conflict_info stages).
type pstate struct {
	st      [3]*entry // base, ours, theirs (file parts)
	removed bool      // resolved by removal (the source of a rename)
	// conflict is a rename conflict recorded at this path whatever the
	// content merge says; keep: the side whose version stays for a
	// rename/delete (1 or 2).
	conflict string
	keep     int
	// label: the kind given to a content conflict at this path (a
	// rename/add merges cleanly when both contents agree).
	label   string
	oldPath string
	paths   []string
	hunks   []Hunk
	// dirMoved: a directory rename moved the file here (a conflict in
	// merge-ort's default mode whatever the content merge says).
	dirMoved bool
}

func (m *merger) readTree(h gitobj.Hash) ([]entry, error) {
	h = norm(h)
	if m.trees == nil {
		m.trees = map[gitobj.Hash][]entry{}
	}
	if t, ok := m.trees[h]; ok {
		return t, nil
	}
	t, err := readTree(m.s, h)
	if err != nil {
		return nil, err
	}
	m.trees[h] = t
	return t, nil
}

// lookupFile returns the file (non-tree) entry at path in tree root, nil
// when there is none.
func (m *merger) lookupFile(root gitobj.Hash, path string) (*entry, error) {
	h := root
	for {
		name, rest := path, ""
		for i := 0; i < len(path); i++ {
			if path[i] == '/' {
				name, rest = path[:i], path[i+1:]
				break
			}
		}
		ents, err := m.readTree(h)
		if err != nil {
			return nil, err
		}
		var found *entry
		for i := range ents {
			if ents[i].Name == name && (rest == "") != ents[i].isTree() {
				found = &ents[i]
				break
			}
		}
		if found == nil {
			return nil, nil
		}
		if rest == "" {
			e := *found
			return &e, nil
		}
		h, path = found.Hash, rest
	}
}

// prepareRenames detects the renames of both sides and decides the paths
// they touch (merge-ort's process_renames), leaving the rest of the merge
// to the tree walk, which asks m.forced for these paths.
func (m *merger) prepareRenames(base, ours, theirs gitobj.Hash) error {
	base, ours, theirs = norm(base), norm(ours), norm(theirs)
	if base == ours || base == theirs || ours == theirs {
		return nil
	}
	if rel, err := m.scanRelevant(base, ours, theirs, false, false); err != nil || !rel {
		return err
	}
	d1, d2 := newSideDiff(), newSideDiff()
	if err := m.diffSide(d1, "", base, ours); err != nil {
		return err
	}
	if err := m.diffSide(d2, "", base, theirs); err != nil {
		return err
	}
	d1.sortPaths()
	d2.sortPaths()
	det := &renameDetector{m: m, sizes: map[gitobj.Hash]int64{}, spans: map[gitobj.Hash]*spanCount{}}
	limit := m.opts.RenameLimit
	if limit == 0 {
		limit = DefaultRenameLimit
	}
	r1, err := det.detect(1, d1, d2, limit)
	if err != nil {
		return err
	}
	r2, err := det.detect(2, d2, d1, limit)
	if err != nil {
		return err
	}
	if len(r1) == 0 && len(r2) == 0 {
		return nil
	}
	roots := [3]gitobj.Hash{base, ours, theirs}
	m.forced = map[string]*pstate{}
	get := func(p string) (*pstate, error) {
		if ps, ok := m.forced[p]; ok {
			return ps, nil
		}
		ps := &pstate{}
		for i, r := range roots {
			e, err := m.lookupFile(r, p)
			if err != nil {
				return nil, err
			}
			ps.st[i] = e
		}
		m.forced[p] = ps
		return ps, nil
	}
	all := append(append([]rename{}, r1...), r2...)
	if !m.opts.virtual {
		if all, err = m.directoryRenames(all, d1, d2, get); err != nil {
			return err
		}
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].src.path < all[j].src.path })
	for i := 0; i < len(all); i++ {
		rn := all[i]
		if rn.src.path == rn.dst.path {
			continue
		}
		old, err := get(rn.src.path)
		if err != nil {
			return err
		}
		if old.removed {
			continue
		}
		if i+1 < len(all) && all[i+1].src.path == rn.src.path {
			r1, r2 := rn, all[i+1]
			i++
			if r1.side == 2 {
				r1, r2 = r2, r1
			}
			t1, err := get(r1.dst.path)
			if err != nil {
				return err
			}
			if r1.dst.path == r2.dst.path {
				// Both sides renamed it the same way.
				t1.st[0] = old.st[0]
				old.removed = true
				continue
			}
			t2, err := get(r2.dst.path)
			if err != nil {
				return err
			}
			// rename/rename(1to2): the content merge goes to both paths.
			merged, clean, hunks, err := m.quietFile(r1.dst.path, old.st[0], t1.st[1], t2.st[2])
			if err != nil {
				return err
			}
			m1, m2 := merged, merged
			if !clean && merged != nil && t1.st[1] != nil && sameEntry(merged, t1.st[1]) && len(hunks) == 0 {
				m2 = t2.st[2] // binary: each path keeps its side
			}
			t1.st[1], t2.st[2] = m1, m2
			paths := []string{rn.src.path, r1.dst.path, r2.dst.path}
			for _, ps := range []*pstate{t1, t2, old} {
				ps.conflict, ps.oldPath, ps.paths = KindRenameRename, rn.src.path, paths
			}
			if !clean {
				t1.hunks, t2.hunks = hunks, hunks
			}
			continue
		}
		x, y := rn.side, 3-rn.side
		nw, err := get(rn.dst.path)
		if err != nil {
			return err
		}
		sourceDeleted := old.st[y] == nil
		collision := nw.st[y] != nil
		typeChanged := !sourceDeleted && isRegular(old.st[y]) != isRegular(nw.st[x])
		if typeChanged && collision {
			collision = false
		}
		paths := []string{rn.src.path, rn.dst.path}
		switch {
		case collision && !sourceDeleted:
			// rename/add or rename/rename(2to1): merge the renamed file
			// into its side; the path then holds an add/add.
			var st [3]*entry
			st[0], st[x], st[y] = old.st[0], nw.st[x], old.st[y]
			merged, _, _, err := m.quietFile(rn.dst.path, st[0], st[1], st[2])
			if err != nil {
				return err
			}
			nw.st[x] = merged
			kind := KindRenameAdd
			if nw.label != "" {
				kind = KindRenameRename // rename/rename(2to1)
			}
			nw.label, nw.oldPath, nw.paths = kind, rn.src.path, append(nw.paths, paths...)
		case collision && sourceDeleted:
			nw.conflict, nw.oldPath, nw.paths = KindRenameDelete, rn.src.path, paths
		default:
			nw.st[0] = old.st[0]
			switch {
			case typeChanged:
				// rename vs type change: the old path keeps the other
				// side's new type as an add; the new path is a
				// modify/delete (merge-ort's stale match mask).
				old.st[0] = nil
				nw.conflict, nw.oldPath, nw.paths, nw.keep = KindModifyDelete, rn.src.path, paths, x
			case sourceDeleted:
				nw.conflict, nw.oldPath, nw.paths, nw.keep = KindRenameDelete, rn.src.path, paths, x
			default:
				nw.st[y] = old.st[y]
				if nw.oldPath == "" {
					nw.oldPath = rn.src.path
				}
			}
		}
		if !typeChanged {
			// Resolved by removal, cleanly, whatever was recorded there
			// before (merge-ort's merged.clean = 1).
			old.removed, old.conflict = true, ""
		}
	}
	m.forcedDirs = map[string]bool{"": true}
	m.forcedKids = map[string][]string{}
	for p := range m.forced {
		m.forcedKids[parentDir(p)] = append(m.forcedKids[parentDir(p)], baseName(p))
		for d := parentDir(p); d != ""; d = parentDir(d) {
			if m.forcedDirs[d] {
				break
			}
			m.forcedDirs[d] = true
			m.forcedKids[parentDir(d)] = append(m.forcedKids[parentDir(d)], baseName(d))
		}
	}
	return nil
}

func isRegular(e *entry) bool {
	return e != nil && e.Mode&0o170000 == 0o100000
}

// quietFile merges three file versions like m.file without recording
// conflicts; clean reports whether the merge had none.
func (m *merger) quietFile(path string, b, o, t *entry) (*entry, bool, []Hunk, error) {
	n := len(m.conflicts)
	res, _, err := m.file(path, b, o, t)
	if err != nil {
		return nil, false, nil, err
	}
	clean := len(m.conflicts) == n
	var hunks []Hunk
	for _, c := range m.conflicts[n:] {
		hunks = append(hunks, c.Hunks...)
	}
	m.conflicts = m.conflicts[:n]
	if res != nil {
		e := *res
		res = &e
	}
	return res, clean, hunks, nil
}

// forcedFile decides the file part of a path touched by a rename.
func (m *merger) forcedFile(path string, ps *pstate) (*entry, []entry, error) {
	if ps.removed {
		if ps.conflict != "" {
			m.renameConflict(path, ps, nil)
		}
		return nil, nil, nil
	}
	if ps.keep != 0 {
		// merge-ort's modify/delete branch: the renamed side's version
		// stays (the base's in a virtual merge base).
		m.renameConflict(path, ps, nil)
		if m.opts.virtual {
			return ps.st[0], nil, nil
		}
		return ps.st[ps.keep], nil, nil
	}
	n := len(m.conflicts)
	var res *entry
	var aside []entry
	var err error
	if ps.conflict == KindRenameRename && ps.st[0] == nil && (ps.st[1] == nil) != (ps.st[2] == nil) {
		// one target of a rename/rename(1to2): the merged content.
		res = ps.st[1]
		if res == nil {
			res = ps.st[2]
		}
	} else {
		res, aside, err = m.file(path, ps.st[0], ps.st[1], ps.st[2])
		if err != nil {
			return nil, nil, err
		}
	}
	if ps.conflict != "" {
		var hunks []Hunk
		for _, c := range m.conflicts[n:] {
			hunks = append(hunks, c.Hunks...)
		}
		if len(hunks) == 0 {
			hunks = ps.hunks
		}
		m.conflicts = m.conflicts[:n]
		m.renameConflict(path, ps, hunks)
	} else if ps.oldPath != "" {
		for i := n; i < len(m.conflicts); i++ {
			m.conflicts[i].OldPath = ps.oldPath
			if ps.label != "" {
				m.conflicts[i].Kind, m.conflicts[i].Paths = ps.label, ps.paths
			}
		}
	}
	return res, aside, nil
}

func (m *merger) renameConflict(path string, ps *pstate, hunks []Hunk) {
	m.conflicts = append(m.conflicts, Conflict{Path: path, Kind: ps.conflict, OldPath: ps.oldPath, Paths: ps.paths, Hunks: hunks})
}

// Relevance of a directory removed on a side, as merge-ort's dirs_removed.
const (
	dirNotRelevant = iota
	dirForAncestor
	dirForSelf
)

// dirRelevance: for a directory self removed, whether the other side added
// files directly in it (self) or in a removed ancestor (ancestor).
func dirRelevance(d string, self, other *sideDiff) (int, bool) {
	if !self.rmDirs[d] {
		return 0, false
	}
	if other.addDirs[d] {
		return dirForSelf, true
	}
	for a := d; a != ""; {
		a = parentDir(a)
		if self.rmDirs[a] && other.addDirs[a] {
			return dirForAncestor, true
		}
	}
	return dirNotRelevant, true
}

// dirRenamesOf is get_provisional_directory_renames: for every removed
// directory, where most of its renamed files went (no majority: none).
func dirRenamesOf(rs []rename, self, other *sideDiff) map[string]string {
	counts := map[string]map[string]int{}
	for _, rn := range rs {
		oldD, newD := parentDir(rn.src.path), parentDir(rn.dst.path)
		oldC, newC := baseName(rn.src.path), baseName(rn.dst.path)
		for first := true; ; first = false {
			flag, removed := dirRelevance(oldD, self, other)
			if !removed || rn.src.path == oldD {
				break
			}
			if !first && oldC != newC {
				break
			}
			if flag == dirForSelf || first {
				if counts[oldD] == nil {
					counts[oldD] = map[string]int{}
				}
				counts[oldD][newD]++
			}
			if flag == dirNotRelevant || oldD == "" || newD == "" {
				break
			}
			oldC, newC = baseName(oldD), baseName(newD)
			oldD, newD = parentDir(oldD), parentDir(newD)
		}
	}
	out := map[string]string{}
	for d, c := range counts {
		if flag, _ := dirRelevance(d, self, other); flag == dirNotRelevant {
			continue
		}
		best, max, tie := "", 0, false
		for nd, n := range c {
			switch {
			case n > max:
				best, max, tie = nd, n, false
			case n == max:
				tie = true
			}
		}
		if max > 0 && !tie {
			out[d] = best
		}
	}
	return out
}

// renamedDir returns the deepest directory of path renamed in dirs.
func renamedDir(path string, dirs map[string]string) (string, string, bool) {
	for d := parentDir(path); ; d = parentDir(d) {
		if nd, ok := dirs[d]; ok && d != "" {
			return d, nd, true
		}
		if d == "" {
			return "", "", false
		}
	}
}

func applyDirRename(path, oldD, newD string) string {
	rest := path[len(oldD)+1:]
	if newD == "" {
		return rest
	}
	return newD + "/" + rest
}

// directoryRenames applies merge-ort's default directory rename handling
// (merge.directoryRenames=conflict): a file one side added (or renamed)
// into a directory the other side renamed moves with the directory and is
// reported as a directory_rename conflict at its new path.
func (m *merger) directoryRenames(all []rename, d1, d2 *sideDiff, get func(string) (*pstate, error)) ([]rename, error) {
	var rs [3][]rename
	for _, rn := range all {
		rs[rn.side] = append(rs[rn.side], rn)
	}
	diffs := [3]*sideDiff{nil, d1, d2}
	var dirs [3]map[string]string
	for x := 1; x <= 2; x++ {
		dirs[x] = dirRenamesOf(rs[x], diffs[x], diffs[3-x])
	}
	for d := range dirs[1] {
		if _, ok := dirs[2][d]; ok {
			delete(dirs[1], d)
			delete(dirs[2], d)
		}
	}
	if len(dirs[1]) == 0 && len(dirs[2]) == 0 {
		return all, nil
	}
	// The paths each side adds: renames' targets and plain adds.
	type cand struct {
		path   string
		rename int // index in all, -1 for a plain add
	}
	var cands [3][]cand
	isDst := [3]map[string]bool{nil, {}, {}}
	for i, rn := range all {
		cands[rn.side] = append(cands[rn.side], cand{rn.dst.path, i})
		isDst[rn.side][rn.dst.path] = true
	}
	for y := 1; y <= 2; y++ {
		for _, a := range diffs[y].adds {
			if !isDst[y][a.path] {
				cands[y] = append(cands[y], cand{a.path, -1})
			}
		}
	}
	// collisions[y]: new paths side y's files would get, with how many.
	var coll [3]map[string]int
	for y := 1; y <= 2; y++ {
		coll[y] = map[string]int{}
		for _, c := range cands[y] {
			if od, nd, ok := renamedDir(c.path, dirs[3-y]); ok {
				coll[y][applyDirRename(c.path, od, nd)]++
			}
		}
	}
	for y := 1; y <= 2; y++ {
		x := 3 - y
		for _, c := range cands[y] {
			if len(dirs[x]) == 0 || coll[x][c.path] > 0 {
				continue
			}
			od, nd, ok := renamedDir(c.path, dirs[x])
			if !ok {
				continue
			}
			if _, renamedToo := dirs[y][nd]; renamedToo {
				continue
			}
			np := applyDirRename(c.path, od, nd)
			if coll[y][np] > 1 {
				continue // several files for one path: git leaves them
			}
			in, err := get(np)
			if err != nil {
				return nil, err
			}
			if in.st[y] != nil {
				continue // in the way (git 2.39's path_in_way): git leaves it
			}
			from, err := get(c.path)
			if err != nil {
				return nil, err
			}
			in.st[y] = from.st[y]
			from.st[y] = nil
			if c.rename >= 0 {
				all[c.rename].dst.path = np
			}
			in.conflict, in.oldPath, in.paths, in.dirMoved = KindDirectoryRename, c.path, []string{c.path, np}, true
		}
	}
	return all, nil
}

// scanRelevant walks the subtrees all three versions disagree on and
// reports whether a side deleted a file the other side changed (or removed
// a directory the other side added files to): only then can a rename
// change the merge (merge-ort's relevant sources).
func (m *merger) scanRelevant(b, o, t gitobj.Hash, rm1, rm2 bool) (bool, error) {
	b, o, t = norm(b), norm(o), norm(t)
	// A side equal to the base has no sources and no adds here; two equal
	// sides may still have deleted the same files (relevant to both).
	if b == o || b == t {
		return false, nil
	}
	be, err := m.readTree(b)
	if err != nil {
		return false, err
	}
	oe, err := m.readTree(o)
	if err != nil {
		return false, err
	}
	te, err := m.readTree(t)
	if err != nil {
		return false, err
	}
	type triple struct{ b, o, t *entry }
	names := map[string]*triple{}
	get := func(n string) *triple {
		x, ok := names[n]
		if !ok {
			x = &triple{}
			names[n] = x
		}
		return x
	}
	for i := range be {
		get(be[i].Name).b = &be[i]
	}
	for i := range oe {
		get(oe[i].Name).o = &oe[i]
	}
	for i := range te {
		get(te[i].Name).t = &te[i]
	}
	file := func(e *entry) *entry {
		if e == nil || e.isTree() {
			return nil
		}
		return e
	}
	tree := func(e *entry) gitobj.Hash {
		if e.isTree() {
			return e.Hash
		}
		return emptyTree
	}
	for _, x := range names {
		fb, fo, ft := file(x.b), file(x.o), file(x.t)
		switch {
		case fb != nil && fo == nil && !sameEntry(fb, ft):
			return true, nil // deleted on ours, changed on theirs
		case fb != nil && ft == nil && !sameEntry(fb, fo):
			return true, nil
		case fb == nil && ft != nil && rm1, fb == nil && fo != nil && rm2:
			return true, nil // added in a directory the other side removed
		}
		if x.b.isTree() || x.o.isTree() || x.t.isTree() {
			r1 := rm1 || x.b.isTree() && !x.o.isTree()
			r2 := rm2 || x.b.isTree() && !x.t.isTree()
			found, err := m.scanRelevant(tree(x.b), tree(x.o), tree(x.t), r1, r2)
			if err != nil || found {
				return found, err
			}
		}
	}
	return false, nil
}
