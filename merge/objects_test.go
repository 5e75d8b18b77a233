package merge

import (
	"bytes"
	"sort"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/lockstep-hq/lockstep/gitobj"
)

// TestObjectCodecMatchesGoGit: the engine's own tree encoder, and the
// blob and commit objects it builds with gitobj, are byte for byte what
// go-git's encoders (which the oracle tests check against git) write;
// readTreeObject and the commit decoders read them back.
func TestObjectCodecMatchesGoGit(t *testing.T) {
	s := memory.NewStorage()
	h := func(b string) gitobj.Hash { return gitobj.ComputeHash(gitobj.BlobObject, []byte(b)) }
	ents := []entry{
		{Name: "b.txt", Mode: modeRegular, Hash: h("1")},
		{Name: "a", Mode: modeDir, Hash: emptyTree},
		{Name: "a.txt", Mode: modeExecutable, Hash: h("2")},
		{Name: "a-link", Mode: modeSymlink, Hash: h("3")},
		{Name: "sub", Mode: modeSubmodule, Hash: h("4")},
		{Name: "a0", Mode: modeRegular, Hash: h("5")},
	}
	got, err := writeTree(s, append([]entry(nil), ents...))
	if err != nil {
		t.Fatal(err)
	}
	gt := object.Tree{}
	for _, e := range ents {
		gt.Entries = append(gt.Entries, object.TreeEntry{Name: e.Name, Mode: filemode.FileMode(e.Mode), Hash: e.Hash})
	}
	sort.Sort(object.TreeEntrySorter(gt.Entries))
	want := &plumbing.MemoryObject{}
	if err := gt.Encode(want); err != nil {
		t.Fatal(err)
	}
	if got != want.Hash() {
		t.Fatalf("tree %s, go-git encodes %s", got, want.Hash())
	}
	obj, err := s.EncodedObject(gitobj.TreeObject, got)
	if err != nil {
		t.Fatal(err)
	}
	back, err := readTreeObject(obj)
	if err != nil || len(back) != len(ents) {
		t.Fatalf("read back %d entries (%v), want %d", len(back), err, len(ents))
	}
	for _, e := range back {
		if e.Name == "a" && e.Mode != modeDir || e.Name == "sub" && e.Mode != modeSubmodule {
			t.Errorf("read back %q mode %o", e.Name, e.Mode)
		}
	}
	if _, err := writeTree(s, []entry{{Name: "a\x00b", Mode: modeRegular, Hash: h("1")}}); err == nil {
		t.Error("a name with a NUL was encoded")
	}

	// An empty tree and an empty blob are stored, with git's names.
	if et, err := writeTree(s, nil); err != nil || et != emptyTree || s.HasEncodedObject(emptyTree) != nil {
		t.Errorf("empty tree %s %v", et, err)
	}
	for _, data := range []string{"", "x\n", "a\x00binary"} {
		bh, err := writeBlob(s, []byte(data))
		if err != nil || bh != h(data) {
			t.Errorf("blob %q: %s %v, want %s", data, bh, err, h(data))
		}
		obj, err := s.EncodedObject(gitobj.BlobObject, bh)
		if err != nil {
			t.Fatal(err)
		}
		b, err := objectBytes(obj)
		if err != nil || !bytes.Equal(b, []byte(data)) || obj.Size() != int64(len(data)) {
			t.Errorf("blob %q read back %q (size %d) %v", data, b, obj.Size(), err)
		}
	}

	// A virtual base's commit, through gitobj, as go-git encodes it, and
	// both decoders read it.
	sig := gitobj.Signature{Name: "lockstep", Email: "merge@lockstep.invalid", When: time.Unix(1700000000, 0).UTC()}
	parents := []gitobj.Hash{h("p1"), h("p2")}
	c := gitobj.EncodeCommit(gitobj.CommitSpec{Author: sig, Committer: sig, Message: "virtual merge base\n", Tree: got, Parents: parents})
	gc := &object.Commit{Author: sig, Committer: sig, Message: "virtual merge base\n", TreeHash: got, ParentHashes: parents}
	wantC := &plumbing.MemoryObject{}
	if err := gc.Encode(wantC); err != nil {
		t.Fatal(err)
	}
	if c.Hash() != wantC.Hash() {
		t.Fatalf("commit %s, go-git encodes %s", c.Hash(), wantC.Hash())
	}
	dc, err := decodeCommit(c)
	if err != nil || dc.Tree != got || len(dc.Parents) != 2 || dc.Parents[1] != parents[1] || !dc.Committer.When.Equal(sig.When) || dc.Message != "virtual merge base\n" {
		t.Errorf("decodeCommit: %+v %v", dc, err)
	}
	ci, ok := commitHeader(c)
	if !ok || ci.tree != got || len(ci.parents) != 2 || !ci.when.Equal(sig.When) {
		t.Errorf("commitHeader: %+v %v", ci, ok)
	}
}
