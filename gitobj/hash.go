// Package gitobj holds the value types and interfaces of the object-store
// seam: what the services (repositories, workspaces, gate, web) say about
// git objects, and the interfaces an object store implements (Reader,
// Writer, RefMirror, GitDir; Store is all four), split by use as go-git's
// storers are. It holds no storage: the implementations are gitstore.Network
// (a local bare repository) and replica.Network (packs in a bucket);
// services import this package and neither of them, nor go-git
// (deps_test.go).
//
// The hash and object types are go-git's, re-exported as aliases (Hash
// is plumbing.Hash): no conversion anywhere. The merge engine reads and
// writes objects in these types too (Reader.Objects satisfies its
// merge.Store), so gitobj is the only package of ours besides the
// adapters that imports go-git.
package gitobj

import (
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
)

// Hash is a SHA-1 object name (go-git's plumbing.Hash).
type Hash = plumbing.Hash

// EncodedObject is an object as stored: type, size and content
// (go-git's plumbing.EncodedObject).
type EncodedObject = plumbing.EncodedObject

// ObjectType is an object's type (go-git's plumbing.ObjectType).
type ObjectType = plumbing.ObjectType

// ObjectStorer reads and writes encoded objects (go-git's
// storer.EncodedObjectStorer): what Reader.Objects returns and the merge
// engine reads.
type ObjectStorer = storer.EncodedObjectStorer

// Signature is a commit's author or committer (go-git's
// object.Signature).
type Signature = object.Signature

// The object types a service names.
const (
	CommitObject  = plumbing.CommitObject
	TreeObject    = plumbing.TreeObject
	BlobObject    = plumbing.BlobObject
	TagObject     = plumbing.TagObject
	AnyObjectType = plumbing.AnyObject
)

// ZeroHash is the zero hash: no object (an empty tree for Compare, a
// deleted ref for MirrorRef).
var ZeroHash = plumbing.ZeroHash

// ErrObjectNotFound is what ObjectStorer returns for a missing object.
var ErrObjectNotFound = plumbing.ErrObjectNotFound

// NewHash parses a hex object name (a malformed one is the zero hash).
func NewHash(s string) Hash { return plumbing.NewHash(s) }

// IsHash reports whether s is a full hex object name.
func IsHash(s string) bool { return plumbing.IsHash(s) }

// ComputeHash is the name of an object of type t with content b.
func ComputeHash(t ObjectType, b []byte) Hash { return plumbing.ComputeHash(t, b) }

// TagTarget returns the object an annotated tag names (an error when h
// is not a tag in s).
func TagTarget(s ObjectStorer, h Hash) (Hash, error) {
	t, err := object.GetTag(s, h)
	if err != nil {
		return ZeroHash, err
	}
	return t.Target, nil
}

// NewObject returns an in-memory object of type t holding a copy of
// content (not written anywhere: pass it to a storer or WriteObjects).
func NewObject(t ObjectType, content []byte) EncodedObject {
	obj := &plumbing.MemoryObject{}
	obj.SetType(t)
	// Writing to a MemoryObject cannot fail.
	_, _ = obj.Write(content)
	return obj
}

// DecodeCommit decodes a commit object (every header git writes, the
// message and signatures: go-git's object.Commit.Decode). Hash is obj's.
func DecodeCommit(obj EncodedObject) (*CommitInfo, error) {
	c := &object.Commit{}
	if err := c.Decode(obj); err != nil {
		return nil, err
	}
	return &CommitInfo{Hash: c.Hash, Tree: c.TreeHash, Parents: c.ParentHashes,
		Author: c.Author, Committer: c.Committer, Message: c.Message}, nil
}

// TreeFiles decodes a tree object and returns the objects its file
// entries (regular, executable, symlink; not directories or gitlinks)
// name.
func TreeFiles(obj EncodedObject) ([]Hash, error) {
	t := &object.Tree{}
	if err := t.Decode(obj); err != nil {
		return nil, err
	}
	var out []Hash
	for _, e := range t.Entries {
		if e.Mode.IsFile() {
			out = append(out, e.Hash)
		}
	}
	return out, nil
}

// TreeChildren decodes a tree object and returns the objects its file
// entries name (files) and its subtrees (dirs); gitlinks name neither.
func TreeChildren(obj EncodedObject) (files, dirs []Hash, err error) {
	t := &object.Tree{}
	if err := t.Decode(obj); err != nil {
		return nil, nil, err
	}
	for _, e := range t.Entries {
		switch {
		case e.Mode.IsFile():
			files = append(files, e.Hash)
		case e.Mode == filemode.Dir:
			dirs = append(dirs, e.Hash)
		}
	}
	return files, dirs, nil
}

// EncodeCommit builds the commit object for spec without writing it.
func EncodeCommit(spec CommitSpec) EncodedObject {
	c := &object.Commit{
		Author:       spec.Author,
		Committer:    spec.Committer,
		Message:      spec.Message,
		TreeHash:     spec.Tree,
		ParentHashes: spec.Parents,
	}
	obj := &plumbing.MemoryObject{}
	// Encoding into a MemoryObject cannot fail.
	_ = c.Encode(obj)
	return obj
}
