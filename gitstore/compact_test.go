package gitstore

import (
	"context"
	"os"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// TestCompactKeepsEveryObject: many pushes leave many packs; Compact folds
// them into one while readers keep reading, and every object — reachable
// from a mirrored ref or not — is still there, for us and for git fsck.
func TestCompactKeepsEveryObject(t *testing.T) {
	n := MustOpen(t)
	var commits, trees []plumbing.Hash
	var parent []plumbing.Hash
	for i := 0; i < 12; i++ {
		c, tr := mustPush(t, n, []tarEntry{{Name: "f.txt", Body: string(rune('a'+i)) + "\n"}, {Name: "d/g.txt", Body: "g\n"}}, parent, int64(1700000000+i))
		commits, trees = append(commits, c), append(trees, tr)
		parent = []plumbing.Hash{c}
	}
	// Only the 8th commit is named by a ref: the later ones are what a
	// lagging mirror or a lost compare-and-swap leaves unreferenced.
	if err := n.MirrorRef("r", "refs/heads/main", commits[7]); err != nil {
		t.Fatal(err)
	}
	before := n.PackCount()
	if before < 12 {
		t.Fatalf("%d packs before compaction, want >= 12", before)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	var readErrs atomic.Int64
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				for _, c := range commits {
					if _, err := n.Commit(c); err != nil {
						if readErrs.Add(1) == 1 {
							t.Logf("read during compaction: %v", err)
						}
					}
					if !n.Has(c) {
						if readErrs.Add(1) == 1 {
							t.Logf("Has(%s) false during compaction", c)
						}
					}
				}
			}
		}()
	}
	if err := n.Compact(context.Background()); err != nil {
		t.Fatal(err)
	}
	stop.Store(true)
	wg.Wait()
	if readErrs.Load() != 0 {
		t.Fatalf("%d reads failed during compaction", readErrs.Load())
	}
	if got := n.PackCount(); got != 1 {
		t.Fatalf("%d packs after compaction, want 1", got)
	}
	for i, c := range commits {
		if _, err := n.Commit(c); err != nil {
			t.Fatalf("commit %d lost: %v", i, err)
		}
		if _, err := n.TreeEntries(trees[i], ""); err != nil {
			t.Fatalf("tree %d lost: %v", i, err)
		}
	}
	if missing := n.Missing(commits); len(missing) != 0 {
		t.Fatalf("missing after compaction: %v", missing)
	}
	git(t, n.Dir(), nil, "fsck", "--strict")
	// Writes go on after a compaction.
	mustPush(t, n, []tarEntry{{Name: "after.txt", Body: "x\n"}}, parent, 1700000100)
}

// TestLooseWriteSurvivesPrunedDirectory: `git prune-packed` (run by a
// compaction) removes an empty fan-out directory at any moment; a loose
// object written into it then must not fail with "no such file or
// directory" (seen as a 500 on a push racing a compaction).
func TestLooseWriteSurvivesPrunedDirectory(t *testing.T) {
	n := MustOpen(t)
	removed := 0
	n.beforeLooseRename = func(dir string) {
		if removed < 2 {
			removed++
			if err := os.Remove(dir); err != nil {
				t.Errorf("remove %s: %v", dir, err)
			}
		}
	}
	o := &plumbing.MemoryObject{}
	o.SetType(plumbing.BlobObject)
	o.Write([]byte("written while a repack prunes\n"))
	if _, err := n.writeLoose(o); err != nil {
		t.Fatalf("loose write with its directory pruned twice: %v", err)
	}
	if removed != 2 || !n.Has(o.Hash()) {
		t.Fatalf("removed %d times; stored %v", removed, n.Has(o.Hash()))
	}
}

// looseBlobInTree writes a loose blob and a packed tree naming it (what a
// merge's SetEncodedObject and a later push leave).
func looseBlobInTree(t *testing.T, n *Network, body string) (blob, tree plumbing.Hash) {
	t.Helper()
	b := &plumbing.MemoryObject{}
	b.SetType(plumbing.BlobObject)
	b.Write([]byte(body))
	if _, err := n.writeLoose(b); err != nil {
		t.Fatal(err)
	}
	tr := &object.Tree{Entries: []object.TreeEntry{{Name: "f.txt", Mode: filemode.Regular, Hash: b.Hash()}}}
	to := &plumbing.MemoryObject{}
	if err := tr.Encode(to); err != nil {
		t.Fatal(err)
	}
	if _, err := n.WriteObjects([]plumbing.EncodedObject{to}); err != nil {
		t.Fatal(err)
	}
	return b.Hash(), to.Hash()
}

// TestTreeEntriesAfterExternalRepack: a repack by another process packs a
// loose blob and prunes the loose file; listing a tree that names it
// must find it in the new pack (the size lookup reloads on a miss, as
// every object read does). It answered "blob … not found".
func TestTreeEntriesAfterExternalRepack(t *testing.T) {
	n := MustOpen(t)
	blob, tree := looseBlobInTree(t, n, "packed by someone else\n")
	git(t, n.Dir(), nil, "-c", "gc.auto=0", "repack", "-a", "-d", "--keep-unreachable", "-q")
	if _, err := os.Stat(n.loosePath(blob)); !os.IsNotExist(err) {
		t.Fatalf("the repack left the loose blob (stat: %v)", err)
	}
	es, err := n.TreeEntries(tree, "")
	if err != nil {
		t.Fatalf("TreeEntries after an external repack: %v", err)
	}
	if len(es) != 1 || es[0].Size != int64(len("packed by someone else\n")) {
		t.Fatalf("entries %+v", es)
	}
}

// TestLookupRacingCompactionEnd: a lookup finds no pack holding a loose
// object; before it reads the loose file, a whole compaction runs (packs
// the object, prunes the loose file, reloads, ends). The lookup must
// still find the object: the Reload it missed is noticed (n.reloads),
// where the old rule (reload only while a compaction runs, or when the
// pack directory changed since the last reload) answered not found —
// seen as "tree … not found: upload its objects first" on a push racing
// a compaction in the load test.
func TestLookupRacingCompactionEnd(t *testing.T) {
	for _, op := range []string{"object", "size", "has"} {
		t.Run(op, func(t *testing.T) {
			n := MustOpen(t)
			blob, _ := looseBlobInTree(t, n, "compacted under a reader: "+op+"\n")
			ran := false
			n.beforeLooseRead = func(h plumbing.Hash) {
				if h != blob || ran {
					return
				}
				ran = true
				if err := n.Compact(context.Background()); err != nil {
					t.Errorf("compact: %v", err)
				}
			}
			err := lookupOp(n, op, blob)
			if !ran {
				t.Fatal("the hook never ran: the blob was not loose")
			}
			if err != nil {
				t.Fatalf("%s of a blob compacted during the lookup: %v", op, err)
			}
		})
	}
}

// TestLookupMissingAReloadThatCameTooEarly: during a lookup a Reload
// finishes, but before the object's new pack exists; then a repack by
// another process packs the object and prunes the loose file. Looking
// again once (the Reload moved the epoch) misses too; the lookup must
// then reload by itself (the pack directory changed) and find it. Before,
// one look again after a moved epoch was all, and it answered not found.
func TestLookupMissingAReloadThatCameTooEarly(t *testing.T) {
	for _, op := range []string{"object", "size"} {
		t.Run(op, func(t *testing.T) {
			n := MustOpen(t)
			blob, _ := looseBlobInTree(t, n, "reloaded too early: "+op+"\n")
			ran := false
			n.beforeLooseRead = func(h plumbing.Hash) {
				if h != blob || ran {
					return
				}
				ran = true
				if err := n.Reload(); err != nil {
					t.Errorf("reload: %v", err)
				}
				git(t, n.Dir(), nil, "-c", "gc.auto=0", "repack", "-a", "-d", "--keep-unreachable", "-q")
			}
			err := lookupOp(n, op, blob)
			if !ran {
				t.Fatal("the hook never ran: the blob was not loose")
			}
			if err != nil {
				t.Fatalf("%s: %v", op, err)
			}
		})
	}
}

// lookupOp runs one kind of object lookup: "object", "size" or "has".
func lookupOp(n *Network, op string, h plumbing.Hash) error {
	var err error
	switch op {
	case "object":
		_, err = n.object(h)
	case "size":
		_, err = n.objectSize(h)
	case "has":
		if !n.has(h) {
			err = plumbing.ErrObjectNotFound
		}
	}
	return err
}
