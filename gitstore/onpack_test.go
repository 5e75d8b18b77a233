package gitstore

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
)

func memBlob(s string) plumbing.EncodedObject {
	o := &plumbing.MemoryObject{}
	o.SetType(plumbing.BlobObject)
	o.Write([]byte(s))
	return o
}

func countLoose(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	subs, _ := filepath.Glob(filepath.Join(dir, "objects", "??", "*"))
	for _, s := range subs {
		if !strings.HasPrefix(filepath.Base(s), ".") {
			n++
		}
	}
	return n
}

// Options.OnPack sees every pack a write produces before the write
// returns — tree/object writes, commits (a one-object pack instead of a
// loose object), received git packs — and its error fails the write,
// leaving nothing readable and no pack file behind.
func TestOnPackSeesEveryWriteAndCanRefuse(t *testing.T) {
	var seen []PackFiles
	var fail error
	n, err := Open(filepath.Join(t.TempDir(), "net.git"), Options{Fsync: true, OnPack: func(pf PackFiles) error {
		for _, p := range []string{pf.PackPath, pf.IdxPath} {
			if _, err := os.Stat(p); err != nil {
				t.Errorf("OnPack called before %s exists: %v", p, err)
			}
		}
		if fail != nil {
			return fail
		}
		seen = append(seen, pf)
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()

	if _, err := n.WriteObjects([]plumbing.EncodedObject{memBlob("a"), memBlob("b")}); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 1 || seen[0].Objects != 2 || seen[0].PackBytes == 0 || seen[0].IdxBytes == 0 {
		t.Fatalf("after WriteObjects: %+v", seen)
	}

	// A commit: a pack, not a loose object.
	tree, objs, err := n.EditTree(plumbing.ZeroHash, []TreeEdit{{Path: "f", Content: []byte("x\n")}}, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.WriteObjects(objs); err != nil {
		t.Fatal(err)
	}
	c, _, err := n.WriteCommit(CommitSpec{Tree: tree, Author: sigAt(1), Committer: sigAt(1), Message: "m\n"})
	if err != nil {
		t.Fatal(err)
	}
	if countLoose(t, n.Dir()) != 0 {
		t.Fatal("WriteCommit wrote a loose object although OnPack is set")
	}
	if len(seen) != 3 {
		t.Fatalf("OnPack calls after a commit: %d, want 3", len(seen))
	}
	if _, err := n.Objects().SetEncodedObject(memBlob("via storer")); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 4 || countLoose(t, n.Dir()) != 0 {
		t.Fatalf("SetEncodedObject: %d OnPack calls, %d loose objects", len(seen), countLoose(t, n.Dir()))
	}

	// A received git pack.
	dir := t.TempDir()
	git(t, dir, nil, "init", "-q")
	c1 := clientCommit(t, dir, map[string]string{"README": "from git\n"})
	if _, err := n.ReceivePack(bytes.NewReader(packObjects(t, filepath.Join(dir, ".git"), c1+"\n", "--revs")), Limits{}); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 5 {
		t.Fatalf("OnPack calls after ReceivePack: %d, want 5", len(seen))
	}

	// Refused: the error comes back as is, nothing is readable, no file
	// is left, and the pack count is unchanged.
	fail = errors.New("upload refused")
	packs := n.PackCount()
	files, _ := filepath.Glob(filepath.Join(n.Dir(), "objects", "pack", "pack-*"))
	refused := memBlob("refused")
	if _, err := n.WriteObjects([]plumbing.EncodedObject{refused}); !errors.Is(err, fail) {
		t.Fatalf("WriteObjects with OnPack failing: %v", err)
	}
	if _, _, err := n.WriteCommit(CommitSpec{Tree: tree, Parents: []plumbing.Hash{c}, Author: sigAt(2), Committer: sigAt(2), Message: "n\n"}); !errors.Is(err, fail) {
		t.Fatalf("WriteCommit with OnPack failing: %v", err)
	}
	c2 := clientCommit(t, dir, map[string]string{"README": "second\n"})
	if _, err := n.ReceivePack(bytes.NewReader(packObjects(t, filepath.Join(dir, ".git"), c2+"\n^"+c1+"\n", "--revs")), Limits{}); !errors.Is(err, fail) {
		t.Fatalf("ReceivePack with OnPack failing: %v", err)
	}
	if n.Has(refused.Hash()) || n.Has(plumbing.NewHash(c2)) {
		t.Fatal("an object of a refused write is readable")
	}
	after, _ := filepath.Glob(filepath.Join(n.Dir(), "objects", "pack", "pack-*"))
	if len(after) != len(files) || n.PackCount() != packs {
		t.Fatalf("pack files %d -> %d, packs %d -> %d after refused writes", len(files), len(after), packs, n.PackCount())
	}
	if err := n.Reload(); err != nil || n.Has(refused.Hash()) {
		t.Fatalf("after Reload: %v, refused readable %v", err, n.Has(refused.Hash()))
	}
}
