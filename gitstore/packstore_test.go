package gitstore

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
)

// A received pack is stored as git stores it: its deltas kept (the stored
// pack is about the size of the one sent, and git sees deltas in it),
// thin packs completed with their bases, and a refused pack leaves no
// quarantine behind.
func TestReceivePackKeepsDeltas(t *testing.T) {
	n := MustOpen(t)
	dir := t.TempDir()
	git(t, dir, nil, "init", "-q")
	var body strings.Builder
	var c string
	for i := 0; i < 20; i++ {
		body.WriteString(strings.Repeat("a line of text that stays the same in every version\n", 50))
		c = clientCommit(t, dir, map[string]string{"f.txt": body.String()})
	}
	gd := filepath.Join(dir, ".git")
	pack := packObjects(t, gd, c+"\n", "--revs")
	if _, err := n.ReceivePack(bytes.NewReader(pack), Limits{}); err != nil {
		t.Fatal(err)
	}
	packs, _ := filepath.Glob(filepath.Join(n.Dir(), "objects", "pack", "pack-*.pack"))
	if len(packs) != 1 {
		t.Fatalf("packs %v", packs)
	}
	fi, _ := os.Stat(packs[0])
	if fi.Size() > int64(len(pack))*12/10 {
		t.Fatalf("stored pack is %d bytes for a %d-byte pack received: deltas were not kept", fi.Size(), len(pack))
	}
	out := git(t, n.Dir(), nil, "verify-pack", "-v", strings.TrimSuffix(packs[0], ".pack")+".idx")
	if !strings.Contains(out, "chain length = ") {
		t.Fatalf("no delta chains in the stored pack:\n%s", out)
	}

	// Thin: the next version is a delta against the stored blob; the
	// stored pack is completed (git index-pack --fix-thin) and readable.
	c2 := clientCommit(t, dir, map[string]string{"f.txt": body.String() + "one more\n"})
	thin := packObjects(t, gd, c2+"\n^"+c+"\n", "--revs", "--thin")
	if st, err := n.ReceivePack(bytes.NewReader(thin), Limits{}); err != nil || st.Objects != 3 {
		t.Fatalf("thin: %+v %v", st, err)
	}
	must(t, n.MirrorRef("r", "refs/heads/main", plumbing.NewHash(c2)))
	git(t, n.Dir(), nil, "--git-dir="+n.Dir(), "fsck", "--strict", "--no-dangling")

	// Refused: nothing under objects/ changes, no quarantine is left.
	before := storeFiles(t, n)
	bad := badTreePack(t, func(gd string) string {
		b := hashObject(t, gd, "blob", "x", false)
		return hashObject(t, gd, "tree", rawTree([3]string{"100644", "..", b}), true)
	})
	if _, err := n.ReceivePack(bytes.NewReader(bad), Limits{}); err == nil {
		t.Fatal("bad tree accepted")
	}
	if after := storeFiles(t, n); len(after) != len(before) {
		t.Fatalf("refused pack left files: %v", after)
	}
	if q, _ := filepath.Glob(filepath.Join(n.Dir(), "objects", quarantinePrefix+"*")); len(q) != 0 {
		t.Fatalf("quarantine left: %v", q)
	}
}

// A quarantine a crash left is removed once older than the grace period,
// not before.
func TestRemoveStaleQuarantine(t *testing.T) {
	n := MustOpen(t)
	q := filepath.Join(n.Dir(), "objects", quarantinePrefix+"lockstep-123")
	if err := os.MkdirAll(filepath.Join(q, "pack"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(q, "pack", "tmp_pack_x"), []byte("partial"), 0o644)
	if st := RemoveStaleTemps(n.Dir(), time.Hour, time.Now()); st.Files != 0 {
		t.Fatalf("fresh quarantine removed: %+v", st)
	}
	if _, err := os.Stat(q); err != nil {
		t.Fatal(err)
	}
	if st := RemoveStaleTemps(n.Dir(), time.Hour, time.Now().Add(2*time.Hour)); st.Files != 1 || st.Bytes != 7 {
		t.Fatalf("stale quarantine: %+v", st)
	}
	if _, err := os.Stat(q); !os.IsNotExist(err) {
		t.Fatalf("stale quarantine still there: %v", err)
	}
}
