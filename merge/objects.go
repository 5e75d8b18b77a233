package merge

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/gitobj"
)

// fileMode is a tree entry's mode, git's octal number (040000 a
// directory). canonicalMode maps what a tree holds to the five modes git
// writes.
type fileMode uint32

const (
	modeDir        fileMode = 0o040000
	modeRegular    fileMode = 0o100644
	modeExecutable fileMode = 0o100755
	modeSymlink    fileMode = 0o120000
	modeSubmodule  fileMode = 0o160000
)

// emptyTree is the oid of the empty tree ("4b825dc...").
var emptyTree = gitobj.ComputeHash(gitobj.TreeObject, nil)

// EmptyTree returns the oid of the empty tree, the base used when two
// commits have no common ancestor. The engine never needs it to be stored.
func EmptyTree() gitobj.Hash { return emptyTree }

type entry struct {
	Name string
	Mode fileMode
	Hash gitobj.Hash
}

func (e *entry) isTree() bool { return e != nil && e.Mode == modeDir }

func sameEntry(a, b *entry) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return a.Mode == b.Mode && a.Hash == b.Hash
}

func readObject(s Store, t gitobj.ObjectType, h gitobj.Hash) ([]byte, error) {
	obj, err := s.EncodedObject(t, h)
	if err != nil {
		if errors.Is(err, gitobj.ErrObjectNotFound) {
			return nil, lockstep.Errorf(lockstep.ENOTFOUND, "%s %s not found", t, h)
		}
		return nil, fmt.Errorf("read %s %s: %w", t, h, err)
	}
	return objectBytes(obj)
}

func objectBytes(obj gitobj.EncodedObject) ([]byte, error) {
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

func readTree(s Store, h gitobj.Hash) ([]entry, error) {
	if h == emptyTree || h.IsZero() {
		return nil, nil
	}
	obj, err := s.EncodedObject(gitobj.TreeObject, h)
	if err != nil {
		if errors.Is(err, gitobj.ErrObjectNotFound) {
			return nil, lockstep.Errorf(lockstep.ENOTFOUND, "tree %s not found", h)
		}
		return nil, fmt.Errorf("read tree %s: %w", h, err)
	}
	return readTreeObject(obj)
}

// readTreeObject parses a raw tree: "<octal mode> <name>\0<hash>"*.
func readTreeObject(obj gitobj.EncodedObject) ([]entry, error) {
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
		if nul < 0 || len(data) < nul+1+len(gitobj.ZeroHash) {
			return nil, fmt.Errorf("malformed tree %s", obj.Hash())
		}
		e := entry{Name: string(data[:nul]), Mode: canonicalMode(fileMode(m))}
		copy(e.Hash[:], data[nul+1:])
		data = data[nul+1+len(gitobj.ZeroHash):]
		out = append(out, e)
	}
	return out, nil
}

func canonicalMode(mode fileMode) fileMode {
	switch mode & 0o170000 {
	case 0o040000:
		return modeDir
	case 0o100000:
		if mode&0o111 != 0 {
			return modeExecutable
		}
		return modeRegular
	case 0o120000:
		return modeSymlink
	default:
		return modeSubmodule
	}
}

// writeTree encodes entries canonically (git order: directories compare as
// if their name ended in "/"; each entry "<octal mode> <name>\0<hash>",
// the mode without leading zeros, as git and go-git's object.Tree write
// it) and stores the tree. The empty tree is stored too: a merge that
// deletes everything must name an object that exists.
func writeTree(s Store, ents []entry) (gitobj.Hash, error) {
	sort.Slice(ents, func(i, j int) bool { return sortName(&ents[i]) < sortName(&ents[j]) })
	n := 0
	for i := range ents {
		n += len("100644 ") + len(ents[i].Name) + 1 + len(gitobj.ZeroHash)
	}
	buf := make([]byte, 0, n)
	for i := range ents {
		e := &ents[i]
		if strings.IndexByte(e.Name, 0) >= 0 {
			return gitobj.ZeroHash, fmt.Errorf("encode tree: malformed filename %q", e.Name)
		}
		buf = strconv.AppendUint(buf, uint64(e.Mode), 8)
		buf = append(buf, ' ')
		buf = append(buf, e.Name...)
		buf = append(buf, 0)
		buf = append(buf, e.Hash[:]...)
	}
	return s.SetEncodedObject(gitobj.NewObject(gitobj.TreeObject, buf))
}

func sortName(e *entry) string {
	if e.Mode == modeDir {
		return e.Name + "/"
	}
	return e.Name
}

func writeBlob(s Store, data []byte) (gitobj.Hash, error) {
	return s.SetEncodedObject(gitobj.NewObject(gitobj.BlobObject, data))
}

func decodeCommit(obj gitobj.EncodedObject) (*gitobj.CommitInfo, error) {
	c, err := gitobj.DecodeCommit(obj)
	if err != nil {
		return nil, fmt.Errorf("decode commit %s: %w", obj.Hash(), err)
	}
	return c, nil
}
