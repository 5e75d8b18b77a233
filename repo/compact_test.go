package repo

import (
	"context"
	"os"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
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
