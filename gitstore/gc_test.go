package gitstore

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/lockstep-hq/lockstep"
)

// TestCollectGarbageRestoresOnRefusedCommit: when the commit point refuses
// (a ref moved meanwhile), every hidden pack and loose object is put back
// and readable; when it accepts, the unreachable objects are gone and the
// reachable ones stay. A trash left by a crash is put back at open.
func TestCollectGarbageRestoresOnRefusedCommit(t *testing.T) {
	ctx := context.Background()
	n := MustOpen(t)
	live, _ := mustPush(t, n, []tarEntry{{Name: "a.txt", Body: "live\n"}}, nil, 1)
	dead, deadTree := mustPush(t, n, []tarEntry{{Name: "b.txt", Body: "dead\n"}}, nil, 2)
	deadBlob := plumbing.ComputeHash(plumbing.BlobObject, []byte("dead\n"))
	opts := GCOptions{Roots: []plumbing.Hash{live}, Cutoff: time.Now().Add(time.Second)}
	refused := errors.New("a ref moved")
	opts.Commit = func(*lockstep.PackRecord, []string) (int64, error) {
		if n.Has(deadBlob) || n.Has(dead) {
			t.Error("unreachable objects still visible at the commit point")
		}
		return 0, refused
	}
	if _, err := n.CollectGarbage(ctx, opts); !errors.Is(err, refused) {
		t.Fatalf("refused commit: %v", err)
	}
	for _, h := range []plumbing.Hash{live, dead, deadTree, deadBlob} {
		if !n.Has(h) {
			t.Fatalf("%s lost after a refused commit", h)
		}
	}
	opts.Commit = func(*lockstep.PackRecord, []string) (int64, error) { return 1, nil }
	st, err := n.CollectGarbage(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if st.Objects != 3 {
		t.Fatalf("stats %+v: want the dead commit, tree and blob", st)
	}
	if n.Has(dead) || n.Has(deadBlob) || !n.Has(live) {
		t.Fatalf("after gc: dead %v, dead blob %v, live %v", n.Has(dead), n.Has(deadBlob), n.Has(live))
	}
	git(t, n.Dir(), nil, "fsck", "--strict", "--no-dangling", live.String())
}

// TestCheckClosure: a tree naming a blob that is not stored is not_found;
// subtrees equal to the base's are not walked.
func TestCheckClosure(t *testing.T) {
	n := MustOpen(t)
	_, tree := mustPush(t, n, []tarEntry{{Name: "d/a.txt", Body: "a\n"}}, nil, 1)
	if err := n.CheckClosure(tree, plumbing.ZeroHash); err != nil {
		t.Fatalf("complete tree: %v", err)
	}
	// A blob stored loose, a tree naming it, then the blob lost.
	b := n.Objects().NewEncodedObject()
	b.SetType(plumbing.BlobObject)
	w, _ := b.Writer()
	w.Write([]byte("lost\n"))
	w.Close()
	missing, err := n.Objects().SetEncodedObject(b)
	if err != nil {
		t.Fatal(err)
	}
	bad := &object.Tree{Entries: []object.TreeEntry{{Name: "x.txt", Mode: filemode.Regular, Hash: missing}}}
	obj := n.Objects().NewEncodedObject()
	if err := bad.Encode(obj); err != nil {
		t.Fatal(err)
	}
	if _, err := n.WriteObjects([]plumbing.EncodedObject{obj}); err != nil {
		t.Fatal(err)
	}
	if err := n.CheckClosure(obj.Hash(), plumbing.ZeroHash); err != nil {
		t.Fatalf("complete tree: %v", err)
	}
	if err := os.Remove(n.loosePath(missing)); err != nil {
		t.Fatal(err)
	}
	if err := n.CheckClosure(obj.Hash(), plumbing.ZeroHash); lockstep.ErrorCode(err) != lockstep.ENOTFOUND {
		t.Fatalf("tree naming a missing blob: %v, want not_found", err)
	}
	if err := n.CheckClosure(obj.Hash(), obj.Hash()); err != nil {
		t.Fatalf("the base's own tree is not walked: %v", err)
	}
}

// TestWriteNamingDroppedObjectUnavailable: a write of our own that names a
// stored object an object GC (on another replica) dropped during the
// request is refused with unavailable (retryable), not invalid_argument.
func TestWriteNamingDroppedObjectUnavailable(t *testing.T) {
	n := MustOpen(t)
	storeLoose := func(typ plumbing.ObjectType, encode func(plumbing.EncodedObject) error) plumbing.Hash {
		t.Helper()
		o := n.Objects().NewEncodedObject()
		o.SetType(typ)
		if err := encode(o); err != nil {
			t.Fatal(err)
		}
		h, err := n.Objects().SetEncodedObject(o)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	blob := storeLoose(plumbing.BlobObject, func(o plumbing.EncodedObject) error {
		w, _ := o.Writer()
		w.Write([]byte("sub\n"))
		return w.Close()
	})
	sub := storeLoose(plumbing.TreeObject, (&object.Tree{Entries: []object.TreeEntry{{Name: "a.txt", Mode: filemode.Regular, Hash: blob}}}).Encode)
	root := n.Objects().NewEncodedObject()
	if err := (&object.Tree{Entries: []object.TreeEntry{{Name: "d", Mode: filemode.Dir, Hash: sub}}}).Encode(root); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(n.loosePath(sub)); err != nil { // the GC on another replica
		t.Fatal(err)
	}
	if _, err := n.WriteObjects([]plumbing.EncodedObject{root}); lockstep.ErrorCode(err) != lockstep.EUNAVAILABLE {
		t.Fatalf("tree naming a dropped subtree: %v, want unavailable", err)
	}
	// An entry naming a stored object of another type (a blob as a
	// directory) stays invalid_argument.
	bad := n.Objects().NewEncodedObject()
	if err := (&object.Tree{Entries: []object.TreeEntry{{Name: "d", Mode: filemode.Dir, Hash: blob}}}).Encode(bad); err != nil {
		t.Fatal(err)
	}
	if _, err := n.WriteObjects([]plumbing.EncodedObject{bad}); lockstep.ErrorCode(err) != lockstep.EINVALID {
		t.Fatalf("tree naming a blob as a directory: %v, want invalid_argument", err)
	}
}
