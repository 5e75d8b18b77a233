package merge

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/gitobj"
)

// Conflict kinds.
const (
	KindContent      = "content"       // both sides changed the file differently
	KindAddAdd       = "add-add"       // both sides added the path with different contents
	KindModifyDelete = "modify-delete" // one side changed the path, the other deleted it
	KindMode         = "mode"          // both sides changed the mode differently (or added it with different modes)
	KindType         = "type"          // file vs directory, or regular file vs symlink vs submodule
)

// DefaultMaxFileBytes is the MaxFileBytes used when Options leaves it 0.
const DefaultMaxFileBytes = 8 << 20

// Options control a merge. The zero value is a path-level merge without
// markers.
type Options struct {
	// Deep merges files changed on both sides line by line (Diff3).
	// Without it any path changed differently on both sides conflicts.
	Deep bool
	// Markers makes Result.Tree the merged tree even when there are
	// conflicts, like git merge-tree --write-tree: files with content
	// conflicts hold conflict markers (binary, symlink and too large files
	// keep ours), modify/delete keeps the modified file, mode conflicts
	// keep ours' mode, and a file that collides with a directory or with a
	// file of another type is stored beside it as "name~<label>". In the
	// oracle runs these trees equal git's except where a conflict's
	// layout differs (see the package comment).
	Markers bool
	// OursLabel, TheirsLabel and BaseLabel name the sides in markers
	// (defaults "ours", "theirs", "base").
	OursLabel, TheirsLabel, BaseLabel string
	// ShowBase writes diff3-style markers with a "||||||| base" section.
	ShowBase bool
	// MaxFileBytes: files larger than this are not line-merged (a path
	// conflict instead). 0 means DefaultMaxFileBytes.
	MaxFileBytes int64
	// NoRenames turns rename detection off (git merge -s ort -X
	// no-renames): a rename is then a delete plus an add. The default
	// detects renames like git's merge-ort.
	NoRenames bool
	// RenameLimit bounds the inexact rename matrix (git's
	// merge.renameLimit): when more than RenameLimit² source×destination
	// pairs remain after exact and basename matches, only those count.
	// 0 means DefaultRenameLimit; negative means no limit.
	RenameLimit int
	// Commits, when set, shares the commits a merge reads (its two tips
	// and the merge-base walk's) with the other merges given the same
	// cache (see CommitCache).
	Commits *CommitCache
	// Bases, when set, keeps the merge bases of (ours, theirs) for the
	// next merge of the same two commits (see BaseCache).
	Bases *BaseCache

	// virtual: this merge builds a virtual merge base. As in git's inner
	// merges, modify/delete, type and binary conflicts keep the base
	// version and markers are two characters longer.
	virtual bool
}

func (o Options) labels() Labels {
	l := Labels{Ours: o.OursLabel, Theirs: o.TheirsLabel, Base: o.BaseLabel, ShowBase: o.ShowBase}
	if o.virtual {
		l.MarkerSize = markerSize + 2
	}
	if l.Ours == "" {
		l.Ours = "ours"
	}
	if l.Theirs == "" {
		l.Theirs = "theirs"
	}
	if l.Base == "" {
		l.Base = "base"
	}
	return l
}

// Result is the outcome of a merge.
type Result struct {
	// Clean is true when there are no conflicts.
	Clean bool `json:"clean"`
	// Tree is the merged tree. It is zero when the merge is not clean and
	// Options.Markers is off.
	Tree gitobj.Hash `json:"tree"`
	// MergeBase is the commit used as base (a virtual commit for
	// criss-cross histories, zero when the commits share no history).
	// MergeTrees sets it to the base tree it was given.
	MergeBase gitobj.Hash `json:"merge_base"`
	// FastForward: theirs descends from ours; Tree is theirs' tree.
	FastForward bool `json:"fast_forward"`
	// UpToDate: ours already contains theirs; Tree is ours' tree.
	UpToDate bool `json:"up_to_date"`
	// Conflicts, sorted by path.
	Conflicts []Conflict `json:"conflicts,omitempty"`
}

// MarshalJSON writes the oids as hex strings ("" for zero), the form the
// HTTP API uses; gitobj.Hash alone would encode as an array of numbers.
func (r Result) MarshalJSON() ([]byte, error) {
	hex := func(h gitobj.Hash) string {
		if h.IsZero() {
			return ""
		}
		return h.String()
	}
	type plain Result
	return json.Marshal(struct {
		Tree      string `json:"tree"`
		MergeBase string `json:"merge_base"`
		plain
	}{hex(r.Tree), hex(r.MergeBase), plain(r)})
}

// Conflict is one conflicting path.
type Conflict struct {
	Path string `json:"path"`
	Kind string `json:"kind"`
	// OldPath is the path the file had in the merge base when it was
	// renamed (Path is then its new path).
	OldPath string `json:"old_path,omitempty"`
	// Paths names every path of a rename conflict: the old path first,
	// then the new one(s) (rename/rename(1to2): both sides' new paths).
	Paths []string `json:"paths,omitempty"`
	// Hunks are set for content and add-add conflicts that were line
	// merged (Options.Deep on text files).
	Hunks []Hunk `json:"hunks,omitempty"`
}

// Merge merges commit theirs into commit ours. It finds the merge base
// (MergeBase), then merges the trees (MergeTrees). New objects (merged
// blobs and trees) are written to s only when the result is clean or
// Options.Markers is set; pass an Overlay for a preflight.
//
// Errors: not_found if a commit or an object they name is missing;
// ctx.Err() when cancelled; anything else is internal.
func Merge(ctx context.Context, s Store, ours, theirs gitobj.Hash, opts Options) (*Result, error) {
	ov := NewOverlay(s)
	// The two tips through the walker: from the shared commit cache
	// (opts.Commits) when a merge of this network read them before (a
	// repeated preflight reads and parses neither), else read once and
	// kept for the walk.
	w := newWalker(ov)
	w.shared = opts.Commits
	oc, err := w.commit(ours)
	if err != nil {
		return nil, err
	}
	tc, err := w.commit(theirs)
	if err != nil {
		return nil, err
	}
	if ours == theirs {
		return &Result{Clean: true, UpToDate: true, Tree: oc.tree, MergeBase: ours}, nil
	}
	bases, err := w.mergeBases(ctx, opts.Bases, ours, theirs)
	if err != nil {
		return nil, err
	}
	for _, b := range bases {
		if b == theirs {
			return &Result{Clean: true, UpToDate: true, Tree: oc.tree, MergeBase: theirs}, nil
		}
		if b == ours {
			return &Result{Clean: true, FastForward: true, Tree: tc.tree, MergeBase: ours}, nil
		}
	}
	base, err := w.virtualBase(ctx, bases, 0)
	if err != nil {
		return nil, err
	}
	baseTree := emptyTree
	if !base.IsZero() {
		bc, err := w.commit(base)
		if err != nil {
			return nil, err
		}
		baseTree = bc.tree
	}
	res, err := mergeTrees(ctx, ov, baseTree, oc.tree, tc.tree, opts)
	if err != nil {
		return nil, err
	}
	res.MergeBase = base
	if res.Clean || opts.Markers {
		if err := ov.flushTo(s, res.Tree); err != nil {
			return nil, fmt.Errorf("write merge objects: %w", err)
		}
	}
	return res, nil
}

// MergeTrees merges trees ours and theirs against base (all tree oids; the
// zero hash means the empty tree). FastForward and UpToDate are set when
// base equals ours or theirs. Objects are written as in Merge; errors too.
func MergeTrees(ctx context.Context, s Store, base, ours, theirs gitobj.Hash, opts Options) (*Result, error) {
	ov := NewOverlay(s)
	res, err := mergeTrees(ctx, ov, base, ours, theirs, opts)
	if err != nil {
		return nil, err
	}
	res.MergeBase = base
	norm := func(h gitobj.Hash) gitobj.Hash {
		if h.IsZero() {
			return emptyTree
		}
		return h
	}
	switch {
	case norm(ours) == norm(theirs) || norm(base) == norm(theirs):
		res.UpToDate = true
	case norm(base) == norm(ours):
		res.FastForward = true
	}
	if res.Clean || opts.Markers {
		if err := ov.flushTo(s, res.Tree); err != nil {
			return nil, fmt.Errorf("write merge objects: %w", err)
		}
	}
	return res, nil
}

func mergeTrees(ctx context.Context, s Store, base, ours, theirs gitobj.Hash, opts Options) (*Result, error) {
	if opts.MaxFileBytes == 0 {
		opts.MaxFileBytes = DefaultMaxFileBytes
	}
	if opts.MaxFileBytes < 0 {
		return nil, lockstep.Errorf(lockstep.EINVALID, "max file bytes must not be negative")
	}
	if opts.RenameLimit < 0 {
		opts.RenameLimit = -1
	}
	m := &merger{ctx: ctx, s: s, opts: opts, labels: opts.labels()}
	if !opts.NoRenames {
		if err := m.prepareRenames(base, ours, theirs); err != nil {
			return nil, err
		}
	}
	tree, err := m.tree("", base, ours, theirs)
	if err != nil {
		return nil, err
	}
	sort.Slice(m.conflicts, func(i, j int) bool { return m.conflicts[i].Path < m.conflicts[j].Path })
	res := &Result{Clean: len(m.conflicts) == 0, Tree: tree, Conflicts: m.conflicts}
	if !res.Clean && !opts.Markers {
		res.Tree = gitobj.ZeroHash
	}
	return res, nil
}

type merger struct {
	ctx       context.Context
	s         Store
	opts      Options
	labels    Labels
	conflicts []Conflict

	trees      map[gitobj.Hash][]entry // trees read (rename detection reads them first)
	forced     map[string]*pstate      // paths touched by renames
	forcedDirs map[string]bool         // their directories ("" included)
	forcedKids map[string][]string     // directory -> names of forced paths and dirs in it
}

func (m *merger) conflict(path, kind string, hunks []Hunk) {
	m.conflicts = append(m.conflicts, Conflict{Path: path, Kind: kind, Hunks: hunks})
}

func norm(h gitobj.Hash) gitobj.Hash {
	if h.IsZero() {
		return emptyTree
	}
	return h
}

func join(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// tree merges three trees. Only subtrees whose oids differ are read.
func (m *merger) tree(path string, b, o, t gitobj.Hash) (gitobj.Hash, error) {
	b, o, t = norm(b), norm(o), norm(t)
	if !m.forcedDirs[path] {
		switch {
		case o == t, b == t:
			return o, nil
		case b == o:
			return t, nil
		}
	}
	if err := m.ctx.Err(); err != nil {
		return gitobj.ZeroHash, err
	}
	be, err := m.readTree(b)
	if err != nil {
		return gitobj.ZeroHash, err
	}
	oe, err := m.readTree(o)
	if err != nil {
		return gitobj.ZeroHash, err
	}
	te, err := m.readTree(t)
	if err != nil {
		return gitobj.ZeroHash, err
	}
	type triple struct{ b, o, t *entry }
	names := make(map[string]*triple, len(oe)+4)
	var order []string
	get := func(n string) *triple {
		x, ok := names[n]
		if !ok {
			x = &triple{}
			names[n] = x
			order = append(order, n)
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
	for _, n := range m.forcedKids[path] {
		get(n) // a path a directory rename created
	}
	sort.Strings(order)
	out := make([]entry, 0, len(oe)+4)
	for _, name := range order {
		x := names[name]
		p := join(path, name)
		_, forced := m.forced[p]
		switch {
		case forced || m.forcedDirs[p]:
		case sameEntry(x.o, x.t), sameEntry(x.b, x.t):
			if x.o != nil {
				out = append(out, *x.o)
			}
			continue
		case sameEntry(x.b, x.o):
			if x.t != nil {
				out = append(out, *x.t)
			}
			continue
		}
		// Both sides changed the name differently. A name can hold a
		// tree and a file at different times: merge the tree parts and the
		// file parts separately, as git's index does.
		treePart := func(e *entry) gitobj.Hash {
			if e.isTree() {
				return e.Hash
			}
			return emptyTree
		}
		filePart := func(e *entry) *entry {
			if e == nil || e.isTree() {
				return nil
			}
			return e
		}
		sub := emptyTree
		if x.b.isTree() || x.o.isTree() || x.t.isTree() || m.forcedDirs[p] {
			sub, err = m.tree(p, treePart(x.b), treePart(x.o), treePart(x.t))
			if err != nil {
				return gitobj.ZeroHash, err
			}
		}
		n := len(m.conflicts)
		var file *entry
		var aside []entry
		if ps, ok := m.forced[p]; ok {
			file, aside, err = m.forcedFile(p, ps)
		} else {
			file, aside, err = m.file(p, filePart(x.b), filePart(x.o), filePart(x.t))
		}
		if err != nil {
			return gitobj.ZeroHash, err
		}
		for _, a := range aside {
			a.Name = name + a.Name
			out = append(out, a)
		}
		switch {
		case sub != emptyTree && file != nil:
			if len(m.conflicts) == n {
				m.conflict(p, KindType, nil)
			}
			out = append(out, entry{Name: name, Mode: modeDir, Hash: sub})
			label := m.labels.Ours
			if filePart(x.o) == nil || !sameEntry(file, x.o) {
				label = m.labels.Theirs
			}
			f := *file
			f.Name = name + "~" + label
			out = append(out, f)
		case sub != emptyTree:
			out = append(out, entry{Name: name, Mode: modeDir, Hash: sub})
		case file != nil:
			f := *file
			f.Name = name
			out = append(out, f)
		}
	}
	return writeTree(m.s, out)
}

type kindOf int

const (
	kindRegular kindOf = iota
	kindSymlink
	kindGitlink
)

func fileKind(mode fileMode) kindOf {
	switch mode {
	case modeSymlink:
		return kindSymlink
	case modeSubmodule:
		return kindGitlink
	}
	return kindRegular
}

// file merges three non-tree entries (nil: absent). It returns the entry to
// keep (nil: none), entries to store beside it (their Name is the suffix
// to add: "~<label>") and records conflicts.
func (m *merger) file(path string, b, o, t *entry) (*entry, []entry, error) {
	switch {
	case sameEntry(o, t), sameEntry(b, t):
		return o, nil, nil
	case sameEntry(b, o):
		return t, nil, nil
	case o == nil:
		m.conflict(path, KindModifyDelete, nil)
		if m.opts.virtual {
			return b, nil, nil
		}
		return t, nil, nil
	case t == nil:
		m.conflict(path, KindModifyDelete, nil)
		if m.opts.virtual {
			return b, nil, nil
		}
		return o, nil, nil
	}
	if fileKind(o.Mode) != fileKind(t.Mode) {
		m.conflict(path, KindType, nil)
		if m.opts.virtual {
			return b, nil, nil // git's inner merge: the merge base's version
		}
		// Like git: a regular file moves aside to "name~<label>" and the
		// other kind keeps the path; two non-regular kinds both move.
		oa, ta := *o, *t
		oa.Name, ta.Name = "~"+m.labels.Ours, "~"+m.labels.Theirs
		switch {
		case fileKind(o.Mode) == kindRegular:
			return t, []entry{oa}, nil
		case fileKind(t.Mode) == kindRegular:
			return o, []entry{ta}, nil
		}
		return nil, []entry{oa, ta}, nil
	}
	res := *o
	modeOK := true
	switch {
	case o.Mode == t.Mode:
	case b != nil && b.Mode == o.Mode:
		res.Mode = t.Mode
	case b != nil && b.Mode == t.Mode:
	default:
		modeOK = false
	}
	kind := KindContent
	if b == nil {
		kind = KindAddAdd
	}
	switch {
	case o.Hash == t.Hash:
	case b != nil && b.Hash == o.Hash:
		res.Hash = t.Hash
	case b != nil && b.Hash == t.Hash:
	case !m.opts.Deep || fileKind(o.Mode) != kindRegular:
		m.conflict(path, kind, nil)
		return &res, nil, nil
	default:
		var bh gitobj.Hash
		if b != nil && fileKind(b.Mode) == kindRegular {
			bh = b.Hash
		}
		h, hunks, clean, err := m.content(bh, o.Hash, t.Hash)
		if err != nil {
			return nil, nil, err
		}
		res.Hash = h
		if !clean {
			m.conflict(path, kind, hunks)
			return &res, nil, nil
		}
	}
	if !modeOK {
		m.conflict(path, KindMode, nil)
	}
	return &res, nil, nil
}

// content line-merges three blobs (zero base: empty). A binary or too large
// file is a conflict without hunks and keeps ours.
func (m *merger) content(b, o, t gitobj.Hash) (gitobj.Hash, []Hunk, bool, error) {
	read := func(h gitobj.Hash) ([]byte, bool, error) {
		if h.IsZero() {
			return nil, true, nil
		}
		obj, err := m.s.EncodedObject(gitobj.BlobObject, h)
		if err != nil {
			return nil, false, notFound(err, "blob", h)
		}
		if obj.Size() > m.opts.MaxFileBytes {
			return nil, false, nil
		}
		data, err := objectBytes(obj)
		if err != nil {
			return nil, false, fmt.Errorf("read blob %s: %w", h, err)
		}
		return data, !isBinary(data), nil
	}
	bd, ok1, err := read(b)
	if err != nil {
		return o, nil, false, err
	}
	od, ok2, err := read(o)
	if err != nil {
		return o, nil, false, err
	}
	td, ok3, err := read(t)
	if err != nil {
		return o, nil, false, err
	}
	if !ok1 || !ok2 || !ok3 {
		if m.opts.virtual {
			// git keeps the base of a binary conflict in a virtual base
			// (an empty file for add/add).
			if b.IsZero() {
				h, err := writeBlob(m.s, nil)
				return h, nil, false, err
			}
			return b, nil, false, nil
		}
		return o, nil, false, nil
	}
	merged, hunks, clean := Diff3(bd, od, td, m.labels)
	if !clean && !m.opts.Markers {
		return o, hunks, false, nil
	}
	h, err := writeBlob(m.s, merged)
	if err != nil {
		return o, nil, false, fmt.Errorf("write blob: %w", err)
	}
	return h, hunks, clean, nil
}

// isBinary is git's buffer_is_binary: a NUL in the first 8000 bytes.
func isBinary(data []byte) bool {
	if len(data) > 8000 {
		data = data[:8000]
	}
	return bytes.IndexByte(data, 0) >= 0
}
