package worktree

import (
	"bytes"
	"io"
	"slices"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// TestEncodeTreeMatchesGoGit: our tree encoder (the client build links
// no go-git plumbing/object) writes byte for byte what go-git's
// object.Tree.Encode writes, for every mode and a name needing the
// directory sort order; a NUL in a name is refused.
func TestEncodeTreeMatchesGoGit(t *testing.T) {
	h := func(s string) plumbing.Hash { return plumbing.ComputeHash(plumbing.BlobObject, []byte(s)) }
	entries := []treeEntry{
		{Name: "a", Mode: filemode.Regular, Hash: h("a")},
		{Name: "a-b", Mode: filemode.Executable, Hash: h("x")},
		{Name: "a.d", Mode: filemode.Dir, Hash: h("d")},
		{Name: "a0", Mode: filemode.Symlink, Hash: h("l")},
		{Name: "ü", Mode: filemode.Submodule, Hash: h("s")},
	}
	slices.SortFunc(entries, compareEntries)
	got, err := encodeTree(entries)
	if err != nil {
		t.Fatal(err)
	}
	tree := &object.Tree{}
	for _, e := range entries {
		tree.Entries = append(tree.Entries, object.TreeEntry{Name: e.Name, Mode: e.Mode, Hash: e.Hash})
	}
	want := &plumbing.MemoryObject{}
	if err := tree.Encode(want); err != nil {
		t.Fatal(err)
	}
	gb, wb := content(t, got), content(t, want)
	if got.Type() != plumbing.TreeObject || got.Size() != want.Size() || !bytes.Equal(gb, wb) || got.Hash() != want.Hash() {
		t.Fatalf("encodeTree:\n%q\ngo-git:\n%q", gb, wb)
	}
	empty, err := encodeTree(nil)
	if err != nil || empty.Hash().String() != "4b825dc642cb6eb9a060e54bf8d69288fbee4904" {
		t.Fatalf("empty tree: %v %v", empty.Hash(), err)
	}
	if _, err := encodeTree([]treeEntry{{Name: "a\x00b", Mode: filemode.Regular}}); err == nil {
		t.Fatal("a NUL in a name was encoded")
	}
}

func content(t *testing.T, o *plumbing.MemoryObject) []byte {
	t.Helper()
	r, err := o.Reader()
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
