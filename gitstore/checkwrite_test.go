package gitstore

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/format/objfile"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/lockstep-hq/lockstep"
)

// TestNameOver255BytesRefused: a path component may be 255 bytes, not
// 256 (no filesystem a checkout lands on can create it).
func TestNameOver255BytesRefused(t *testing.T) {
	if err := ValidatePath(strings.Repeat("n", 255) + "/f"); err != nil {
		t.Fatalf("255-byte name refused: %v", err)
	}
	for _, p := range []string{strings.Repeat("n", 256), "d/" + strings.Repeat("é", 128), strings.Repeat("n", 256) + "/f"} {
		if err := ValidatePath(p); lockstep.ErrorCode(err) != lockstep.EINVALID {
			t.Errorf("ValidatePath(%.20q… %d bytes): %v, want invalid_argument", p, len(p), err)
		}
	}
}

// TestWriteObjectsChecksTrees: a batch our own code writes (WriteObjects,
// WriteCommit) gets the checks of a pushed pack; a refused batch writes
// nothing, and a commit of a stored tree that breaks them is refused.
func TestWriteObjectsChecksTrees(t *testing.T) {
	n := MustOpen(t)
	blob := func(s string) *plumbing.MemoryObject {
		o := &plumbing.MemoryObject{}
		o.SetType(plumbing.BlobObject)
		o.Write([]byte(s))
		return o
	}
	tree := func(entries ...object.TreeEntry) *plumbing.MemoryObject {
		o := &plumbing.MemoryObject{}
		if err := (&object.Tree{Entries: entries}).Encode(o); err != nil {
			t.Fatal(err)
		}
		return o
	}
	mods := blob("[submodule \"x\"]\n\tpath = x\n\turl = -oProxyCommand=id\n")
	bad := tree(object.TreeEntry{Name: ".gitmodules", Mode: filemode.Regular, Hash: mods.Hash()})
	packs := n.PackCount()
	if _, err := n.WriteObjects([]plumbing.EncodedObject{mods, bad}); lockstep.ErrorCode(err) != lockstep.EINVALID {
		t.Fatalf("WriteObjects of a bad .gitmodules: %v, want invalid_argument", err)
	}
	long := blob("x")
	if _, err := n.WriteObjects([]plumbing.EncodedObject{long, tree(object.TreeEntry{Name: strings.Repeat("n", 256), Mode: filemode.Regular, Hash: long.Hash()})}); lockstep.ErrorCode(err) != lockstep.EINVALID {
		t.Fatalf("WriteObjects of a 256-byte name: %v, want invalid_argument", err)
	}
	if n.PackCount() != packs || n.Has(bad.Hash()) {
		t.Fatalf("a refused batch wrote something: %d packs (was %d), tree stored %v", n.PackCount(), packs, n.Has(bad.Hash()))
	}
	// The same tree stored by another way (as before the rules): a
	// commit of it is refused, and so is the tree as a root.
	storeUnchecked(t, n, mods)
	storeUnchecked(t, n, bad)
	sig := object.Signature{Name: "t", Email: "t@example.com", When: time.Unix(1700000000, 0)}
	if _, _, err := n.WriteCommit(CommitSpec{Tree: bad.Hash(), Author: sig, Committer: sig, Message: "m\n"}); lockstep.ErrorCode(err) != lockstep.EINVALID {
		t.Fatalf("WriteCommit of a stored bad tree: %v, want invalid_argument", err)
	}
	if err := n.CheckRootTree(bad.Hash()); lockstep.ErrorCode(err) != lockstep.EINVALID {
		t.Fatalf("CheckRootTree of a stored bad tree: %v, want invalid_argument", err)
	}
}

// storeUnchecked writes o as a loose object the way git would, bypassing
// every check (an object stored before the rules).
func storeUnchecked(t *testing.T, n *Network, o plumbing.EncodedObject) {
	t.Helper()
	var buf bytes.Buffer
	w := objfile.NewWriter(&buf)
	if err := w.WriteHeader(o.Type(), o.Size()); err != nil {
		t.Fatal(err)
	}
	r, _ := o.Reader()
	io.Copy(w, r)
	r.Close()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	p := n.loosePath(o.Hash())
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, buf.Bytes(), 0o444); err != nil {
		t.Fatal(err)
	}
}

// TestAscentCacheBounded: the cache of stored trees that passed the tree
// rules stays under its bound however many trees a network meets (it
// grew with every tree of every version before), and a full cache that
// starts over still refuses a bad tree met again.
func TestAscentCacheBounded(t *testing.T) {
	defer func(m int) { ascentCacheMax = m }(ascentCacheMax)
	ascentCacheMax = 8
	n := MustOpen(t)
	blob := &plumbing.MemoryObject{}
	blob.SetType(plumbing.BlobObject)
	blob.Write([]byte("x"))
	mk := func(name string) *plumbing.MemoryObject {
		tr := &object.Tree{Entries: []object.TreeEntry{{Name: name, Mode: filemode.Regular, Hash: blob.Hash()}}}
		o := &plumbing.MemoryObject{}
		if err := tr.Encode(o); err != nil {
			t.Fatal(err)
		}
		return o
	}
	storeUnchecked(t, n, blob)
	bad := mk(".git")
	storeUnchecked(t, n, bad)
	for i := range 50 {
		good := mk(fmt.Sprintf("f%d", i))
		storeUnchecked(t, n, good)
		if err := n.CheckRootTree(good.Hash()); err != nil {
			t.Fatalf("good tree %d: %v", i, err)
		}
		n.ascentMu.Lock()
		size := len(n.ascentCache)
		n.ascentMu.Unlock()
		if size > ascentCacheMax {
			t.Fatalf("after %d trees the cache holds %d, bound %d", i+1, size, ascentCacheMax)
		}
		if i%10 == 0 {
			if err := n.CheckRootTree(bad.Hash()); lockstep.ErrorCode(err) != lockstep.EINVALID {
				t.Fatalf("a bad tree after %d good ones: %v, want invalid_argument", i+1, err)
			}
		}
	}
}
