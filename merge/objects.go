package merge

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/lockstep-hq/lockstep"
)

// emptyTree is the oid of the empty tree ("4b825dc...").
var emptyTree = plumbing.ComputeHash(plumbing.TreeObject, nil)

// EmptyTree returns the oid of the empty tree, the base used when two
// commits have no common ancestor. The engine never needs it to be stored.
func EmptyTree() plumbing.Hash { return emptyTree }

type entry struct {
	Name string
	Mode filemode.FileMode
	Hash plumbing.Hash
}

func (e *entry) isTree() bool { return e != nil && e.Mode == filemode.Dir }

func sameEntry(a, b *entry) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return a.Mode == b.Mode && a.Hash == b.Hash
}

func readObject(s Store, t plumbing.ObjectType, h plumbing.Hash) ([]byte, error) {
	obj, err := s.EncodedObject(t, h)
	if err != nil {
		if errors.Is(err, plumbing.ErrObjectNotFound) {
			return nil, lockstep.Errorf(lockstep.ENOTFOUND, "%s %s not found", t, h)
		}
		return nil, fmt.Errorf("read %s %s: %w", t, h, err)
	}
	return objectBytes(obj)
}

func objectBytes(obj plumbing.EncodedObject) ([]byte, error) {
	r, err := obj.Reader()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	buf := make([]byte, 0, obj.Size())
	b := bytes.NewBuffer(buf)
	if _, err := io.Copy(b, r); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func readTree(s Store, h plumbing.Hash) ([]entry, error) {
	if h == emptyTree || h.IsZero() {
		return nil, nil
	}
	obj, err := s.EncodedObject(plumbing.TreeObject, h)
	if err != nil {
		if errors.Is(err, plumbing.ErrObjectNotFound) {
			return nil, lockstep.Errorf(lockstep.ENOTFOUND, "tree %s not found", h)
		}
		return nil, fmt.Errorf("read tree %s: %w", h, err)
	}
	return readTreeObject(obj)
}

// readTreeObject parses a raw tree: "<octal mode> <name>\0<hash>"*.
func readTreeObject(obj plumbing.EncodedObject) ([]entry, error) {
	data, err := objectBytes(obj)
	if err != nil {
		return nil, err
	}
	var out []entry
	for len(data) > 0 {
		sp := bytes.IndexByte(data, ' ')
		if sp < 0 {
			return nil, fmt.Errorf("malformed tree %s", obj.Hash())
		}
		m, err := strconv.ParseUint(string(data[:sp]), 8, 32)
		if err != nil {
			return nil, fmt.Errorf("malformed tree %s: %w", obj.Hash(), err)
		}
		data = data[sp+1:]
		nul := bytes.IndexByte(data, 0)
		if nul < 0 || len(data) < nul+1+len(plumbing.ZeroHash) {
			return nil, fmt.Errorf("malformed tree %s", obj.Hash())
		}
		e := entry{Name: string(data[:nul]), Mode: canonicalMode(filemode.FileMode(m))}
		copy(e.Hash[:], data[nul+1:])
		data = data[nul+1+len(plumbing.ZeroHash):]
		out = append(out, e)
	}
	return out, nil
}

func canonicalMode(mode filemode.FileMode) filemode.FileMode {
	switch mode & 0o170000 {
	case 0o040000:
		return filemode.Dir
	case 0o100000:
		if mode&0o111 != 0 {
			return filemode.Executable
		}
		return filemode.Regular
	case 0o120000:
		return filemode.Symlink
	default:
		return filemode.Submodule
	}
}

// writeTree encodes entries canonically (git order: directories compare as
// if their name ended in "/") and stores the tree. The empty tree is stored
// too: a merge that deletes everything must name an object that exists.
func writeTree(s Store, ents []entry) (plumbing.Hash, error) {
	sort.Slice(ents, func(i, j int) bool { return sortName(&ents[i]) < sortName(&ents[j]) })
	t := object.Tree{Entries: make([]object.TreeEntry, len(ents))}
	for i, e := range ents {
		t.Entries[i] = object.TreeEntry{Name: e.Name, Mode: e.Mode, Hash: e.Hash}
	}
	obj := s.NewEncodedObject()
	if err := t.Encode(obj); err != nil {
		return plumbing.ZeroHash, fmt.Errorf("encode tree: %w", err)
	}
	return s.SetEncodedObject(obj)
}

func sortName(e *entry) string {
	if e.Mode == filemode.Dir {
		return e.Name + "/"
	}
	return e.Name
}

func writeBlob(s Store, data []byte) (plumbing.Hash, error) {
	obj := s.NewEncodedObject()
	obj.SetType(plumbing.BlobObject)
	obj.SetSize(int64(len(data)))
	w, err := obj.Writer()
	if err != nil {
		return plumbing.ZeroHash, err
	}
	if _, err := w.Write(data); err != nil {
		return plumbing.ZeroHash, err
	}
	if err := w.Close(); err != nil {
		return plumbing.ZeroHash, err
	}
	return s.SetEncodedObject(obj)
}

func decodeCommit(obj plumbing.EncodedObject) (*object.Commit, error) {
	c := &object.Commit{}
	if err := c.Decode(obj); err != nil {
		return nil, fmt.Errorf("decode commit %s: %w", obj.Hash(), err)
	}
	return c, nil
}

func readCommit(s Store, h plumbing.Hash) (*object.Commit, error) {
	obj, err := s.EncodedObject(plumbing.CommitObject, h)
	if err != nil {
		if errors.Is(err, plumbing.ErrObjectNotFound) {
			return nil, lockstep.Errorf(lockstep.ENOTFOUND, "commit %s not found", h)
		}
		return nil, fmt.Errorf("read commit %s: %w", h, err)
	}
	return decodeCommit(obj)
}
