package gitstore

import (
	"fmt"
	"sort"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/lockstep-hq/lockstep"
)

// EditTree applies edits, in order, to the tree base (ZeroHash for an
// empty tree) and returns the new root tree and the objects to write
// (blobs and the trees on the edited paths; nothing is written here).
// Untouched subtrees are shared by hash, so the cost is proportional to
// the edited paths, not to the tree. Directories left empty disappear, as
// git cannot store them.
//
// Errors: invalid_argument for a path that fails ValidatePath, a
// .gitmodules or .gitattributes git fsck would refuse, a write
// through a path component that is a file, or a write onto a directory;
// not_found for a delete of a path that does not exist; too_large when a
// file exceeds lim.MaxFileBytes or the edits lim.MaxUploadBytes in all.
func (n *Network) EditTree(base plumbing.Hash, edits []TreeEdit, lim Limits) (plumbing.Hash, []plumbing.EncodedObject, error) {
	lim = lim.WithDefaults()
	if len(edits) > lim.MaxFiles {
		return plumbing.ZeroHash, nil, lockstep.Errorf(lockstep.ETOOLARGE, "%d edits: at most %d per request", len(edits), lim.MaxFiles)
	}
	root := &editDir{hash: base}
	var objs []plumbing.EncodedObject
	var total int64
	for i, e := range edits {
		if err := ValidatePath(e.Path); err != nil {
			return plumbing.ZeroHash, nil, lockstep.Errorf(lockstep.EINVALID, "edit %d: %s", i, lockstep.ErrorMessage(err))
		}
		comps := strings.Split(e.Path, "/")
		if e.Delete {
			if err := n.editDelete(root, comps, e.Path); err != nil {
				return plumbing.ZeroHash, nil, err
			}
			continue
		}
		size := int64(len(e.Content))
		if size > lim.MaxFileBytes {
			return plumbing.ZeroHash, nil, lockstep.Errorf(lockstep.ETOOLARGE, "edit %d: %s is %d bytes: at most %d per file", i, e.Path, size, lim.MaxFileBytes)
		}
		if total += size; total > lim.MaxUploadBytes {
			return plumbing.ZeroHash, nil, lockstep.Errorf(lockstep.ETOOLARGE, "edits: more than %d bytes of content in all", lim.MaxUploadBytes)
		}
		// Also checked when the objects are written (checkWrite); here
		// the error names the edit.
		if special, _ := checkSpecialEntry(e.Path, comps[len(comps)-1], "file"); special != "" {
			if err := checkSpecialContent(special, size, e.Content); err != nil {
				return plumbing.ZeroHash, nil, lockstep.Errorf(lockstep.EINVALID, "edit %d: %s: %v", i, e.Path, err)
			}
		}
		blob := &plumbing.MemoryObject{}
		blob.SetType(plumbing.BlobObject)
		blob.Write(e.Content)
		objs = append(objs, blob)
		mode := filemode.Regular
		if e.Executable {
			mode = filemode.Executable
		}
		if err := n.editWrite(root, comps, e.Path, object.TreeEntry{Name: comps[len(comps)-1], Mode: mode, Hash: blob.Hash()}); err != nil {
			return plumbing.ZeroHash, nil, err
		}
	}
	h, err := n.editBuild(root, &objs)
	if err != nil {
		return plumbing.ZeroHash, nil, err
	}
	if h.IsZero() {
		h = emptyTree(func(o plumbing.EncodedObject) { objs = append(objs, o) })
	}
	return h, objs, nil
}

// editDir is a directory on an edited path: its stored entries are loaded
// on first touch; children holds the subdirectories being edited.
type editDir struct {
	hash     plumbing.Hash // stored tree (zero: new or empty)
	loaded   bool
	entries  map[string]object.TreeEntry
	children map[string]*editDir
}

func (n *Network) editLoad(d *editDir) error {
	if d.loaded {
		return nil
	}
	d.loaded = true
	d.entries = map[string]object.TreeEntry{}
	d.children = map[string]*editDir{}
	if d.hash.IsZero() {
		return nil
	}
	t, err := n.tree(d.hash)
	if err != nil {
		return err
	}
	for _, e := range t.Entries {
		d.entries[e.Name] = e
	}
	return nil
}

// editSubdir returns the subdirectory name of d, creating it when create is set.
func (n *Network) editSubdir(d *editDir, name, path string, create bool) (*editDir, error) {
	if err := n.editLoad(d); err != nil {
		return nil, err
	}
	if c := d.children[name]; c != nil {
		return c, nil
	}
	e, ok := d.entries[name]
	switch {
	case ok && e.Mode != filemode.Dir:
		return nil, lockstep.Errorf(lockstep.EINVALID, "%s: %q is a file, not a directory", path, name)
	case !ok && !create:
		return nil, lockstep.Errorf(lockstep.ENOTFOUND, "%s: no such file or directory", path)
	}
	c := &editDir{hash: e.Hash} // zero hash when new
	d.children[name] = c
	d.entries[name] = object.TreeEntry{Name: name, Mode: filemode.Dir}
	return c, nil
}

func (n *Network) editWrite(root *editDir, comps []string, path string, entry object.TreeEntry) error {
	d := root
	for _, c := range comps[:len(comps)-1] {
		var err error
		if d, err = n.editSubdir(d, c, path, true); err != nil {
			return err
		}
	}
	if err := n.editLoad(d); err != nil {
		return err
	}
	name := comps[len(comps)-1]
	if e, ok := d.entries[name]; ok && e.Mode == filemode.Dir {
		return lockstep.Errorf(lockstep.EINVALID, "%s is a directory: delete it first to replace it with a file", path)
	}
	d.entries[name] = entry
	return nil
}

func (n *Network) editDelete(root *editDir, comps []string, path string) error {
	d := root
	for _, c := range comps[:len(comps)-1] {
		var err error
		if d, err = n.editSubdir(d, c, path, false); err != nil {
			return err
		}
	}
	if err := n.editLoad(d); err != nil {
		return err
	}
	name := comps[len(comps)-1]
	if _, ok := d.entries[name]; !ok {
		return lockstep.Errorf(lockstep.ENOTFOUND, "%s: no such file or directory", path)
	}
	delete(d.entries, name)
	delete(d.children, name)
	return nil
}

// editBuild encodes the edited directories bottom-up; an untouched
// directory keeps its hash. It returns ZeroHash for an empty directory.
func (n *Network) editBuild(d *editDir, objs *[]plumbing.EncodedObject) (plumbing.Hash, error) {
	if !d.loaded {
		return d.hash, nil
	}
	entries := make([]object.TreeEntry, 0, len(d.entries))
	for name, e := range d.entries {
		if c := d.children[name]; c != nil {
			h, err := n.editBuild(c, objs)
			if err != nil {
				return plumbing.ZeroHash, err
			}
			if h.IsZero() {
				continue
			}
			e.Hash = h
		}
		entries = append(entries, e)
	}
	if len(entries) == 0 {
		return plumbing.ZeroHash, nil
	}
	sort.Sort(object.TreeEntrySorter(entries))
	obj := &plumbing.MemoryObject{}
	if err := (&object.Tree{Entries: entries}).Encode(obj); err != nil {
		return plumbing.ZeroHash, fmt.Errorf("encode tree: %w", err)
	}
	*objs = append(*objs, obj)
	return obj.Hash(), nil
}
