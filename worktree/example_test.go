package worktree_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/lockstep-hq/lockstep/worktree"
)

// A push as the CLI does it, with a server that has nothing yet (every
// object is missing) and a second push with the hint of the first. The
// tree oids are those `git add -A && git write-tree` prints.
func Example() {
	dir, _ := os.MkdirTemp("", "worktree-example-")
	defer os.RemoveAll(dir)
	os.MkdirAll(filepath.Join(dir, "src"), 0o755)
	os.WriteFile(filepath.Join(dir, "README.md"), []byte("# demo\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "src", "main.go"), []byte("package main\n"), 0o644)

	server := map[plumbing.Hash]bool{} // what the server has
	missing := func(_ context.Context, oids []plumbing.Hash) ([]plumbing.Hash, error) {
		var out []plumbing.Hash
		for _, h := range oids {
			if !server[h] {
				out = append(out, h)
			}
		}
		return out, nil
	}
	push := func() {
		cache, _ := worktree.OpenStatCache(filepath.Join(dir, ".lockstep", "statcache"))
		snap, err := worktree.Scan(dir, worktree.ScanOptions{Cache: cache})
		if err != nil {
			fmt.Println(err)
			return
		}
		trips := 0
		oids, _ := worktree.Plan(context.Background(), snap, missing,
			&worktree.PlanOptions{Known: cache.Known(), OnRoundTrip: func(int, int) { trips++ }})
		objects, _, _ := worktree.WritePack(snap, oids, io.Discard, nil)
		for _, h := range oids { // the server indexes the pack and commits
			server[h] = true
		}
		cache.SetKnown(snap.Known())
		cache.Save()
		fmt.Printf("tree %s: %d objects sent after %d round trips\n", snap.Tree, objects, trips)
	}
	push()
	os.WriteFile(filepath.Join(dir, "src", "main.go"), []byte("package main\n\nfunc main() {}\n"), 0o644)
	push()
	// Output:
	// tree bbd6b46f570a3c7cc9724bb1956f8cb75b5b5773: 4 objects sent after 3 round trips
	// tree 80ff67fa14c5b5cf84aa17f294d7bed6b0245eeb: 3 objects sent after 1 round trips
}
