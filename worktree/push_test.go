package worktree_test

import (
	"bytes"
	"context"
	"errors"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/worktree"
)

func mustPack(tb testing.TB, snap *worktree.Snapshot, oids []plumbing.Hash) []byte {
	tb.Helper()
	var buf bytes.Buffer
	n, size, err := worktree.WritePack(snap, oids, &buf, nil)
	if err != nil {
		tb.Fatalf("WritePack: %v", err)
	}
	if n != len(oids) || size != int64(buf.Len()) {
		tb.Fatalf("WritePack reported %d objects, %d bytes; wrote %d objects, %d bytes", n, size, len(oids), buf.Len())
	}
	return buf.Bytes()
}

func sortedStrings(hs []plumbing.Hash) []string {
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i] = h.String()
	}
	slices.Sort(out)
	return out
}

// git index-pack and verify-pack accept the pack, and it holds exactly the
// snapshot's objects, from which git reads back the same tree.
func TestWritePackGitAccepts(t *testing.T) {
	dir := t.TempDir()
	sortStress(t, dir)
	genTree(t, filepath.Join(dir, "gen"), genSpec{Files: 150, Dirs: 20, AvgSize: 4000, Seed: 11, Exotic: true})
	snap := mustScan(t, dir, worktree.ScanOptions{})
	all := snap.All()
	pack := mustPack(t, snap, all)

	g := newGitRepo(t)
	out := g.run("", pack, "index-pack", "--stdin")
	idx := filepath.Join(g.gitDir, "objects", "pack", "pack-"+strings.TrimSpace(strings.TrimPrefix(out, "pack\t"))+".idx")
	verify := g.run("", nil, "verify-pack", "-v", idx)
	var inPack []string
	for _, line := range strings.Split(verify, "\n") {
		if f := strings.Fields(line); len(f) >= 3 && plumbing.IsHash(f[0]) {
			inPack = append(inPack, f[0])
		}
	}
	slices.Sort(inPack)
	if want := sortedStrings(all); !slices.Equal(inPack, want) {
		t.Fatalf("pack holds %d objects, snapshot has %d (or they differ)", len(inPack), len(want))
	}
	g.run("", nil, "fsck", "--no-dangling", "--strict")
	// git reads back the tree, and computes the same root from the files.
	lsTree := g.run("", nil, "ls-tree", "-r", snap.Tree.String())
	if n := strings.Count(lsTree, "\n"); n != snap.Files {
		t.Fatalf("git ls-tree -r lists %d entries, snapshot has %d files", n, snap.Files)
	}
	if want := newGitRepo(t).writeTree(dir); snap.Tree.String() != want {
		t.Fatalf("tree %s, git write-tree %s", snap.Tree, want)
	}
}

func TestWritePackRefusesFileChangedAfterScan(t *testing.T) {
	for _, change := range []struct {
		name string
		do   func(t *testing.T, p string)
	}{
		{"rewritten", func(t *testing.T, p string) { mustWrite(t, p, []byte("other content, other size"), 0o644) }},
		{"removed", func(t *testing.T, p string) {
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
		}},
		{"same-size-same-mtime", func(t *testing.T, p string) {
			fi, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			mustWrite(t, p, []byte("hello, World\n"), 0o644)
			if err := os.Chtimes(p, fi.ModTime(), fi.ModTime()); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(change.name, func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, "d", "f.txt")
			mustWrite(t, p, []byte("hello, world\n"), 0o644)
			snap := mustScan(t, dir, worktree.ScanOptions{})
			change.do(t, p)
			_, _, err := worktree.WritePack(snap, snap.All(), &bytes.Buffer{}, nil)
			if lockstep.ErrorCode(err) != lockstep.EINVALID || !strings.Contains(err.Error(), `file changed during push: "d/f.txt"`) {
				t.Fatalf("WritePack after the file changed: %v; want file changed during push", err)
			}
		})
	}
}

func TestWritePackProgress(t *testing.T) {
	dir := t.TempDir()
	genTree(t, dir, genSpec{Files: 40, Dirs: 4, AvgSize: 20000, Seed: 5})
	snap := mustScan(t, dir, worktree.ScanOptions{})
	var calls []int64
	lastObjects := 0
	opts := &worktree.PackOptions{ProgressEvery: 64 << 10, Progress: func(objects int, n int64) {
		if objects < lastObjects || (len(calls) > 0 && n < calls[len(calls)-1]) {
			t.Errorf("progress went backwards: %d objects, %d bytes", objects, n)
		}
		lastObjects = objects
		calls = append(calls, n)
	}}
	var buf bytes.Buffer
	objects, size, err := worktree.WritePack(snap, snap.All(), &buf, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) < 2 || calls[len(calls)-1] != size || lastObjects != objects {
		t.Fatalf("progress calls %v (last objects %d); pack %d objects %d bytes", calls, lastObjects, objects, size)
	}
}

// server is a stand-in for the Lockstep server's object store: a go-git
// memory storage that answers Missing and takes packs.
type server struct {
	st         *memory.Storage
	roundTrips int
	asked      int
	trace      func(asked int)
}

func (s *server) missing(_ context.Context, oids []plumbing.Hash) ([]plumbing.Hash, error) {
	s.roundTrips++
	s.asked += len(oids)
	if s.trace != nil {
		s.trace(len(oids))
	}
	var out []plumbing.Hash
	for _, h := range oids {
		if s.st.HasEncodedObject(h) != nil {
			out = append(out, h)
		}
	}
	return out, nil
}

func (s *server) receive(tb testing.TB, pack []byte) {
	tb.Helper()
	if err := packfile.UpdateObjectStorage(s.st, bytes.NewReader(pack)); err != nil {
		tb.Fatalf("server cannot read the pack: %v", err)
	}
}

// push runs Plan and WritePack against s and returns the planned objects
// and the pack.
func (s *server) push(tb testing.TB, snap *worktree.Snapshot) ([]plumbing.Hash, []byte) {
	tb.Helper()
	s.roundTrips, s.asked = 0, 0
	oids, err := worktree.Plan(context.Background(), snap, s.missing, nil)
	if err != nil {
		tb.Fatalf("Plan: %v", err)
	}
	pack := mustPack(tb, snap, oids)
	s.receive(tb, pack)
	return oids, pack
}

// checkComplete walks the tree in the server's storage: every object is
// there, and the file count matches.
func (s *server) checkComplete(tb testing.TB, snap *worktree.Snapshot) {
	tb.Helper()
	tree, err := object.GetTree(s.st, snap.Tree)
	if err != nil {
		tb.Fatalf("server lacks the root tree: %v", err)
	}
	n := 0
	err = tree.Files().ForEach(func(f *object.File) error {
		n++
		return s.st.HasEncodedObject(f.Hash)
	})
	if err != nil || n != snap.Files {
		tb.Fatalf("server tree: %d files (snapshot %d), err %v", n, snap.Files, err)
	}
}

func TestPlanOneChangedFile(t *testing.T) {
	dir := t.TempDir()
	avg := 10000 // the 2k tree of NOTES-machine.md: ~20 MB
	if raceEnabled {
		avg = 1000
	}
	files := genTree(t, dir, genSpec{Files: 2000, Dirs: 400, AvgSize: avg, Seed: 42})
	ageFiles(t, dir, files)
	cache := openCache(t, filepath.Join(dir, ".lockstep", "statcache"))
	srv := &server{st: memory.NewStorage()}

	first := mustScan(t, dir, worktree.ScanOptions{Cache: cache})
	if err := cache.Save(); err != nil {
		t.Fatal(err)
	}
	oids, pack := srv.push(t, first)
	trees, blobs := first.Objects()
	if len(oids) != trees+blobs || srv.roundTrips < 2 {
		t.Fatalf("first push planned %d of %d objects in %d round trips", len(oids), trees+blobs, srv.roundTrips)
	}
	srv.checkComplete(t, first)
	cache.SetKnown(first.Known()) // the server committed it
	if err := cache.Save(); err != nil {
		t.Fatal(err)
	}
	t.Logf("first push: %d objects, %d bytes, %d round trips", len(oids), len(pack), srv.roundTrips)

	// Nothing changed: one round trip, nothing to send.
	if oids, _ := srv.push(t, first); len(oids) != 0 || srv.roundTrips != 1 {
		t.Fatalf("unchanged push planned %v in %d round trips; want nothing in 1", oids, srv.roundTrips)
	}

	// Change the deepest file.
	deepest := files[0]
	for _, f := range files {
		if strings.Count(f, "/") > strings.Count(deepest, "/") {
			deepest = f
		}
	}
	depth := strings.Count(deepest, "/")
	// 10 KB of incompressible bytes: a typical file, changed entirely.
	changed := make([]byte, 10000)
	rand.New(rand.NewSource(1)).Read(changed)
	mustWrite(t, filepath.Join(dir, deepest), changed, 0o644)
	before := worktree.FilesRead()
	second := mustScan(t, dir, worktree.ScanOptions{Cache: cache})
	if n := worktree.FilesRead() - before; n != 1 {
		t.Fatalf("warm scan read %d files, want 1", n)
	}

	// With the hint of the last push: the same objects in one round trip.
	cache = openCache(t, filepath.Join(dir, ".lockstep", "statcache"))
	srv.roundTrips, srv.asked = 0, 0
	hinted, err := worktree.Plan(context.Background(), second, srv.missing, &worktree.PlanOptions{Known: cache.Known()})
	if err != nil {
		t.Fatal(err)
	}
	hintTrips, hintAsked := srv.roundTrips, srv.asked
	// A stale hint (a root the server never had) costs one more round trip
	// and still finds everything.
	stale := &worktree.PlanOptions{Known: second.Known()}
	srv.roundTrips = 0
	staleOIDs, err := worktree.Plan(context.Background(), second, srv.missing, stale)
	if err != nil {
		t.Fatal(err)
	}
	staleTrips := srv.roundTrips

	oids, pack = srv.push(t, second)
	if !slices.Equal(sortedStrings(hinted), sortedStrings(oids)) || hintTrips != 1 {
		t.Fatalf("hinted Plan: %v in %d round trips; level by level: %v", hinted, hintTrips, oids)
	}
	if !slices.Equal(sortedStrings(staleOIDs), sortedStrings(oids)) || staleTrips != 1+srv.roundTrips {
		t.Fatalf("stale hint: %v in %d round trips; want %v in %d", staleOIDs, staleTrips, oids, 1+srv.roundTrips)
	}
	t.Logf("hinted plan: 1 round trip asking %d oids", hintAsked)

	// Exactly the trees on the path, and the new blob.
	want := []plumbing.Hash{second.Tree, plumbing.ComputeHash(plumbing.BlobObject, changed)}
	tree, err := object.GetTree(srv.st, second.Tree)
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(deepest, "/")
	for i := 1; i < len(parts); i++ {
		e, err := tree.FindEntry(strings.Join(parts[:i], "/"))
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, e.Hash)
	}
	if got, w := sortedStrings(oids), sortedStrings(want); !slices.Equal(got, w) {
		t.Fatalf("planned %v, want the %d trees on %s and its blob %v", got, depth+1, deepest, w)
	}
	// Round trips: the root, then one per level of the path's depth+1
	// trees (the last asks about the blob).
	if srv.roundTrips != depth+2 {
		t.Fatalf("%d round trips for a file %d directories deep, want %d", srv.roundTrips, depth, depth+2)
	}
	if len(pack) >= 64<<10 {
		t.Fatalf("pack for one changed file is %d bytes, want < 64 KiB", len(pack))
	}
	srv.checkComplete(t, second)
	t.Logf("one-file push (%s): %d objects, %d pack bytes, %d round trips asking %d oids",
		deepest, len(oids), len(pack), srv.roundTrips, srv.asked)
}

func TestPlanRejectsUnaskedOID(t *testing.T) {
	dir := t.TempDir()
	mustWrite(t, filepath.Join(dir, "a"), []byte("a"), 0o644)
	snap := mustScan(t, dir, worktree.ScanOptions{})
	liar := func(_ context.Context, oids []plumbing.Hash) ([]plumbing.Hash, error) {
		return append(oids, plumbing.NewHash("0123456789012345678901234567890123456789")), nil
	}
	if _, err := worktree.Plan(context.Background(), snap, liar, nil); lockstep.ErrorCode(err) != lockstep.EINTERNAL {
		t.Fatalf("Plan with a server naming unasked oids: %v, want internal", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := worktree.Plan(ctx, snap, liar, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("Plan with a canceled context: %v", err)
	}
	boom := errors.New("connection reset")
	failing := func(context.Context, []plumbing.Hash) ([]plumbing.Hash, error) { return nil, boom }
	if _, err := worktree.Plan(context.Background(), snap, failing, nil); !errors.Is(err, boom) {
		t.Fatalf("Plan with a failing transport: %v, want %v", err, boom)
	}
}

func TestPlanBatches(t *testing.T) {
	dir := t.TempDir()
	genTree(t, dir, genSpec{Files: 100, Dirs: 1, AvgSize: 10, Seed: 9})
	snap := mustScan(t, dir, worktree.ScanOptions{})
	srv := &server{st: memory.NewStorage()}
	var sizes []int
	opts := &worktree.PlanOptions{BatchSize: 30, OnRoundTrip: func(asked, _ int) { sizes = append(sizes, asked) }}
	oids, err := worktree.Plan(context.Background(), snap, srv.missing, opts)
	if err != nil {
		t.Fatal(err)
	}
	trees, blobs := snap.Objects() // equal contents share a blob
	n := trees + blobs - 1
	want := []int{1}
	for ; n > 30; n -= 30 {
		want = append(want, 30)
	}
	want = append(want, n)
	if len(oids) != trees+blobs || !slices.Equal(sizes, want) {
		t.Fatalf("planned %d objects in batches %v", len(oids), sizes)
	}
}
