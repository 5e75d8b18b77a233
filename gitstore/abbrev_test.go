package gitstore

import (
	"fmt"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
)

func TestExpandPrefix(t *testing.T) {
	n := MustOpen(t)
	var objs []plumbing.EncodedObject
	for i := range 2000 {
		o := &plumbing.MemoryObject{}
		o.SetType(plumbing.BlobObject)
		fmt.Fprintf(o, "blob %d\n", i)
		objs = append(objs, o)
	}
	// Half in one pack, half in another.
	if _, err := n.WriteObjects(objs[:1000]); err != nil {
		t.Fatal(err)
	}
	if _, err := n.WriteObjects(objs[1000:]); err != nil {
		t.Fatal(err)
	}
	byPrefix := map[string][]plumbing.Hash{}
	for _, o := range objs {
		byPrefix[o.Hash().String()[:4]] = append(byPrefix[o.Hash().String()[:4]], o.Hash())
	}
	ambiguous := 0
	for p, hs := range byPrefix {
		got := n.ExpandPrefix(p, 10)
		if len(got) != len(hs) {
			t.Fatalf("prefix %s: %d matches, want %d", p, len(got), len(hs))
		}
		if len(hs) > 1 {
			ambiguous++
			if one := n.ExpandPrefix(p, 1); len(one) != 1 {
				t.Fatalf("limit 1: %v", one)
			}
		}
	}
	if ambiguous == 0 {
		t.Fatal("no shared 4-digit prefix among 2000 objects: the test proves nothing")
	}
	h := objs[7].Hash().String()
	for _, p := range []string{h, h[:39], h[:12], h[:5]} {
		if got := n.ExpandPrefix(p, 2); len(got) == 0 || got[0].String() != h && len(p) > 8 {
			t.Errorf("ExpandPrefix(%s) = %v", p, got)
		}
	}
	for _, bad := range []string{"", "abc", "ABCD", "xyz1", h + "0"} {
		if got := n.ExpandPrefix(bad, 2); len(got) != 0 {
			t.Errorf("ExpandPrefix(%q) = %v, want nothing", bad, got)
		}
	}
}
