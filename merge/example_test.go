package merge_test

import (
	"context"
	"fmt"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/lockstep-hq/lockstep/merge"
)

func blob(s *memory.Storage, data string) plumbing.Hash {
	o := s.NewEncodedObject()
	o.SetType(plumbing.BlobObject)
	w, _ := o.Writer()
	w.Write([]byte(data))
	w.Close()
	h, _ := s.SetEncodedObject(o)
	return h
}

func tree(s *memory.Storage, name, data string) plumbing.Hash {
	t := &object.Tree{Entries: []object.TreeEntry{{Name: name, Mode: filemode.Regular, Hash: blob(s, data)}}}
	o := s.NewEncodedObject()
	t.Encode(o)
	h, _ := s.SetEncodedObject(o)
	return h
}

// A preflight: merge into an Overlay, look at the result, drop it. With
// Deep, edits to different lines of one file merge; with Markers the
// conflicted tree is kept so an agent can fix it.
func ExampleMerge() {
	s := memory.NewStorage()
	base := tree(s, "f.txt", "a\nb\nc\nd\n")
	ours := tree(s, "f.txt", "A\nb\nc\nd\n")
	theirs := tree(s, "f.txt", "a\nb\nc\nD\n")
	ctx := context.Background()

	res, _ := merge.MergeTrees(ctx, merge.NewOverlay(s), base, ours, theirs, merge.Options{})
	fmt.Println("shallow:", res.Clean, res.Conflicts[0].Path, res.Conflicts[0].Kind)

	ov := merge.NewOverlay(s)
	res, _ = merge.MergeTrees(ctx, ov, base, ours, theirs, merge.Options{Deep: true})
	fmt.Println("deep:", res.Clean, len(ov.Objects()), "new objects")

	merged, hunks, clean := merge.Diff3([]byte("a\nb\n"), []byte("a\nX\n"), []byte("a\nY\n"), merge.DefaultLabels)
	fmt.Printf("%v %+v\n%s", clean, hunks[0].Ours, merged)
	// Output:
	// shallow: false f.txt content
	// deep: true 2 new objects
	// false {Start:2 Count:1}
	// a
	// <<<<<<< ours
	// X
	// =======
	// Y
	// >>>>>>> theirs
}
