package gitstore

import (
	"bytes"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// TestCanonicalTreeMatchesEncode: canonicalTree (comparing a tree's
// content with its canonical encoding) agrees with encoding the decoded
// tree and comparing hashes, the check it replaces.
func TestCanonicalTreeMatchesEncode(t *testing.T) {
	id := bytes.Repeat([]byte{0xab}, 20)
	ent := func(mode, name string) []byte { return append([]byte(mode+" "+name+"\x00"), id...) }
	cat := func(b ...[]byte) []byte { return bytes.Join(b, nil) }
	cases := [][]byte{
		{},
		ent("100644", "a"),
		ent("100755", "a"),
		ent("120000", "a"),
		ent("160000", "a"),
		ent("40000", "a"),
		ent("040000", "a"),
		ent("100664", "a"),
		ent("644", "a"),
		ent("0100644", "a"),
		ent("100000", "a"),
		ent("170000", "a"),
		cat(ent("100644", "a"), ent("40000", "b")),
		cat(ent("100644", "a"), ent("040000", "b")),
		cat(ent("100644", "a"), ent("100644", "a")),
	}
	for _, raw := range cases {
		obj := &plumbing.MemoryObject{}
		obj.SetType(plumbing.TreeObject)
		obj.Write(raw)
		tr := &object.Tree{}
		if err := tr.Decode(obj); err != nil {
			continue
		}
		re := &plumbing.MemoryObject{}
		want := tr.Encode(re) == nil && re.Hash() == obj.Hash()
		if got := canonicalTree(tr, raw); got != want {
			t.Errorf("%q: canonicalTree %v, Encode and hash %v", raw, got, want)
		}
	}
}
