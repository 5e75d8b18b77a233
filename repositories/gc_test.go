package repositories_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/internal/servicetest"
	"github.com/lockstep-hq/lockstep/repositories"
)

func randomText(t testing.TB, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", b)
}

// objectBytes sums the files under the network's objects directory.
func objectBytes(t testing.TB, dir string) int64 {
	var total int64
	filepath.WalkDir(filepath.Join(dir, "objects"), func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				total += fi.Size()
			}
		}
		return nil
	})
	return total
}

// fsckClone clones the network (every mirrored ref of every repository)
// through git's pack transport and runs git fsck --strict on the clone.
func fsckClone(t testing.TB, netDir string) {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "clone.git")
	for _, args := range [][]string{
		{"clone", "-q", "--mirror", "--no-local", netDir, dst},
		{"--git-dir", dst, "fsck", "--strict", "--no-dangling"},
	} {
		if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

func netDir(t testing.TB, w *servicetest.World, repoName string) string {
	t.Helper()
	r, err := w.Repos.Repo(context.Background(), repoName)
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(w.Dir, "networks", r.Network+".git")
}

// TestGCReclaimsPurgedWorkspaces: large blobs pushed into three
// workspaces, two of them deleted; a dry run says what a GC would free
// and frees nothing; `gc --prune now` frees it on disk and logs it; the
// live workspace's blob stays and a clone of every live ref passes git
// fsck --strict.
func TestGCReclaimsPurgedWorkspaces(t *testing.T) {
	ctx := context.Background()
	w := servicetest.MustWorld(t, servicetest.Options{})
	w.MustRepo(t, "app", map[string]string{"README": "app\n"})
	blobs := map[string]string{}
	for i := 0; i < 3; i++ {
		name := fmt.Sprintf("ws-%d", i)
		if _, err := w.Workspaces.Fork(ctx, w.Admin, "app", name, ""); err != nil {
			t.Fatal(err)
		}
		blobs[name] = randomText(t, 512<<10) // 1 MiB of hex, ~0.6 MiB packed
		if _, err := w.Repos.PushTar(ctx, w.Admin, name, servicetest.Tar(t, map[string]string{"README": "app\n", "big.txt": blobs[name]}),
			repositories.WriteOptions{Branch: "main", Force: true}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"ws-1", "ws-2"} {
		if _, err := w.Workspaces.Purge(ctx, w.Admin, name); err != nil {
			t.Fatal(err)
		}
	}
	dir := netDir(t, w, "app")
	before := objectBytes(t, dir)

	if _, err := w.Repos.GC(ctx, w.Agent, repositories.GCOptions{Retention: 0}); lockstep.ErrorCode(err) != lockstep.EFORBIDDEN {
		t.Fatalf("gc with an agent key: %v, want permission_denied", err)
	}
	plan, err := w.Repos.GCPlan(ctx, "app", 0)
	if err != nil {
		t.Fatal(err)
	}
	if plan.Objects < 4 || plan.Bytes < 1<<20 || !plan.DryRun {
		t.Fatalf("dry run %+v: want the two purged workspaces' blobs, trees and commits (> 1 MiB)", plan)
	}
	if got := objectBytes(t, dir); got != before {
		t.Fatalf("dry run changed the objects: %d bytes, was %d", got, before)
	}
	// A retention longer than the objects' age drops nothing.
	if res, err := w.Repos.GC(ctx, w.Admin, repositories.GCOptions{Retention: time.Hour}); err != nil || res.Objects != 0 {
		t.Fatalf("gc with 1h retention: %+v, %v: want nothing dropped", res, err)
	}

	res, err := w.Repos.GC(ctx, w.Admin, repositories.GCOptions{Retention: 0})
	if err != nil {
		t.Fatal(err)
	}
	after := objectBytes(t, dir)
	t.Logf("gc --prune now: %+v; objects %d -> %d bytes", res, before, after)
	if res.Objects != plan.Objects || res.Bytes < 1<<20 {
		t.Fatalf("gc %+v: want what the dry run announced (%+v)", res, plan)
	}
	if before-after < 1<<20 {
		t.Fatalf("objects %d -> %d bytes: want more than 1 MiB freed", before, after)
	}
	n, err := w.Repos.Network(mustRepo(t, w, "app").Network)
	if err != nil {
		t.Fatal(err)
	}
	for name, text := range blobs {
		h := plumbing.ComputeHash(plumbing.BlobObject, []byte(text))
		if got, want := n.Has(h), name == "ws-0"; got != want {
			t.Errorf("blob of %s stored: %v, want %v", name, got, want)
		}
	}
	if _, rc, err := w.Repos.Blob(ctx, "ws-0", "main", "big.txt"); err != nil {
		t.Fatalf("live workspace's blob: %v", err)
	} else {
		rc.Close()
	}
	fsckClone(t, dir)
	ops, err := w.Store.ListOps(ctx, lockstep.OpFilter{Op: "gc"})
	if err != nil {
		t.Fatal(err)
	}
	if len(ops) != 2 || ops[1].Objects != res.Objects || ops[1].Bytes != res.Bytes {
		t.Fatalf("oplog gc entries %+v: want two, the last with %d objects, %d bytes", ops, res.Objects, res.Bytes)
	}
}

func mustRepo(t testing.TB, w *servicetest.World, name string) *lockstep.Repo {
	t.Helper()
	r, err := w.Repos.Repo(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestGCRefusesWriteThatCheckedBefore: a write whose request began
// before a GC that dropped objects committed is refused (unavailable,
// retry) and moves nothing; the retry succeeds. This is the check that
// keeps a write which found an object the GC dropped from naming it.
func TestGCRefusesWriteThatCheckedBefore(t *testing.T) {
	ctx := context.Background()
	w := servicetest.MustWorld(t, servicetest.Options{})
	w.MustRepo(t, "app", map[string]string{"README": "app\n"})
	if _, err := w.Workspaces.Fork(ctx, w.Admin, "app", "ws", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Repos.PushTar(ctx, w.Admin, "ws", servicetest.Tar(t, map[string]string{"x": randomText(t, 1000)}),
		repositories.WriteOptions{Branch: "main", Force: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Workspaces.Purge(ctx, w.Admin, "ws"); err != nil {
		t.Fatal(err)
	}
	early := lockstep.WithRequestStart(ctx, time.Now().Add(-time.Minute))
	res, err := w.Repos.GC(ctx, w.Admin, repositories.GCOptions{})
	if err != nil || res.Objects == 0 {
		t.Fatalf("gc: %+v, %v: want the purged workspace's objects dropped", res, err)
	}
	tip := mustTip(t, w, "app")
	_, err = w.Repos.PushTar(early, w.Admin, "app", servicetest.Tar(t, map[string]string{"README": "v2\n"}),
		repositories.WriteOptions{Branch: "main", ExpectOID: tip})
	if lockstep.ErrorCode(err) != lockstep.EUNAVAILABLE {
		t.Fatalf("write begun before the gc: %v, want unavailable", err)
	}
	if got := mustTip(t, w, "app"); got != tip {
		t.Fatalf("main moved to %s by a refused write", got)
	}
	if _, err := w.Repos.PushTar(ctx, w.Admin, "app", servicetest.Tar(t, map[string]string{"README": "v2\n"}),
		repositories.WriteOptions{Branch: "main", ExpectOID: tip}); err != nil {
		t.Fatalf("retry: %v", err)
	}
}

func mustTip(t testing.TB, w *servicetest.World, name string) string {
	t.Helper()
	h, _, err := w.Repos.BranchTip(context.Background(), mustRepo(t, w, name), "main")
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestGCRacesWrites: GC with --prune now runs continuously while agents
// push, fork, roll back and delete workspaces; at the end every
// acknowledged write is where it was acknowledged (the branch tip of a
// live workspace) and a clone of every live ref passes git fsck
// --strict. Writes push again content of deleted workspaces (found
// stored, not written): without the check of ObjectsSince a ref ends up
// naming a blob the gc dropped. Bounded to a few seconds (CI time); SQLite, local mode.
func TestGCRacesWrites(t *testing.T) {
	w := servicetest.MustWorld(t, servicetest.Options{})
	w.MustRepo(t, "app", map[string]string{"README": "app\n"})
	raceGC(t, []*servicetest.World{w}, 6*time.Second, 20*time.Millisecond)
	fsckClone(t, netDir(t, w, "app"))
}

// raceGC runs a gc --prune now loop on the last world while agents write
// through the worlds in turn (replicas of one store) for d, then checks
// that every acknowledged write is its workspace's tip.
// pause is the gap between gc runs: with replicas a write is refused when
// a gc committed within a second (the clock-skew allowance) of its start,
// so back-to-back runs would refuse every write.
func raceGC(t *testing.T, worlds []*servicetest.World, d, pause time.Duration) {
	ctx := context.Background()
	gw := worlds[len(worlds)-1]
	shared := randomText(t, 4000) // every agent's trees name this blob: dedup against old objects
	stop := make(chan struct{})
	var gcRuns atomic.Int64
	var acks atomic.Int64 // writes acknowledged so far
	var dropped int
	var gcErr error
	var gcWG sync.WaitGroup
	gcWG.Add(1)
	go func() {
		defer gcWG.Done()
		gap, seen := pause, int64(-1)
		for {
			select {
			case <-stop:
				return
			default:
			}
			res, err := gw.Repos.GC(ctx, gw.Admin, repositories.GCOptions{})
			if err != nil {
				gcErr = err
				return
			}
			gcRuns.Add(1)
			dropped += res.Objects
			// On a loaded machine (-race, CI) a write can take longer than
			// a gc and its pause: every write would be refused. The gap
			// grows until a write gets through, then returns to pause.
			if n := acks.Load(); n == seen {
				gap = min(2*gap, 2*time.Second)
			} else {
				gap, seen = pause, n
			}
			time.Sleep(gap) // let writes through between runs
		}
	}()
	const agents = 3
	acked := make([]map[string]string, agents) // workspace -> last acknowledged commit
	var wg sync.WaitGroup
	deadline := time.Now().Add(d)
	errs := make(chan error, agents)
	for a := 0; a < agents; a++ {
		acked[a] = map[string]string{}
		wg.Add(1)
		go func(a int) {
			defer wg.Done()
			w := worlds[a%len(worlds)] // workspace changes go through this replica
			var history []string
			ws := ""
			// recycled is content last pushed to a workspace since deleted:
			// pushed again, it is found stored (cruft a gc may be dropping)
			// and not written again.
			recycled, last := "", ""
			// Past the deadline an agent goes on until it has one
			// acknowledged write to check (bounded).
			for i := 0; time.Now().Before(deadline) || len(acked[a]) == 0 && time.Now().Before(deadline.Add(time.Minute)); i++ {
				if ws == "" || i%7 == 6 {
					if ws != "" {
						if _, err := w.Workspaces.Purge(ctx, w.Admin, ws); err != nil {
							errs <- fmt.Errorf("purge %s: %w", ws, err)
							return
						}
						delete(acked[a], ws)
						recycled = last
					}
					ws = fmt.Sprintf("ws-%d-%d", a, i)
					if _, err := w.Workspaces.Fork(ctx, w.Admin, "app", ws, ""); err != nil {
						errs <- fmt.Errorf("fork %s: %w", ws, err)
						return
					}
					history = nil
				}
				time.Sleep(time.Duration(10+i%4*10) * time.Millisecond) // gaps in which a gc can commit
				reqCtx := lockstep.WithRequestStart(ctx, time.Now())
				var res *repositories.PushResult
				var err error
				ww := worlds[i%len(worlds)] // writes round-robin over the replicas
				if i%5 == 4 && len(history) > 1 {
					res, err = ww.Repos.Rollback(reqCtx, ww.Admin, ws, history[0], repositories.WriteOptions{Branch: "main", Force: true})
				} else {
					last = randomText(t, 2000)
					files := map[string]string{"shared.txt": shared, "mine.txt": last, "old.txt": recycled, fmt.Sprintf("d%d/f.txt", i%3): shared + ws}
					res, err = ww.Repos.PushTar(reqCtx, ww.Admin, ws, servicetest.Tar(t, files), repositories.WriteOptions{Branch: "main", Force: true})
				}
				switch code := lockstep.ErrorCode(err); {
				case err == nil:
					acked[a][ws] = res.Commit
					acks.Add(1)
					history = append(history, res.Commit)
				case code == lockstep.EUNAVAILABLE || code == lockstep.ENOTFOUND:
					// Refused because a gc committed meanwhile, or the
					// object it found was dropped (also when the write's
					// own validation finds a stored tree it names gone):
					// nothing moved; retry.
				default:
					errs <- fmt.Errorf("write %d to %s (rollback %v): %w", i, ws, i%5 == 4 && len(history) > 1, err)
					return
				}
			}
		}(a)
	}
	wg.Wait()
	for end := time.Now().Add(time.Minute); gcRuns.Load() == 0 && time.Now().Before(end); {
		time.Sleep(10 * time.Millisecond) // a gc run slower than the writers: let one finish
	}
	close(stop)
	gcWG.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if gcErr != nil {
		t.Fatalf("gc: %v", gcErr)
	}
	t.Logf("%d gc runs dropped %d objects", gcRuns.Load(), dropped)
	if gcRuns.Load() == 0 {
		t.Fatal("no gc run finished: the race was not exercised")
	}
	if dropped == 0 {
		// Every run found the refs moving (busy) or nothing to drop: on a
		// loaded machine (-race) this happens; the checks below still hold.
		t.Logf("no gc run dropped anything this time")
	}
	n := 0
	for a := range acked {
		for ws, commit := range acked[a] {
			if got := mustTip(t, gw, ws); got != commit {
				t.Errorf("%s at %s, acknowledged %s", ws, got, commit)
			}
			n++
		}
	}
	if n == 0 {
		t.Fatal("no acknowledged write to check")
	}
	// One more GC after the writers stopped must leave everything whole.
	if _, err := gw.Repos.GC(ctx, gw.Admin, repositories.GCOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d workspaces checked", n)
}

// TestGCVisitsNetworkWithoutRepository: a network directory no repository
// names any more (a create that failed after making it) is visited by a
// GC of everything: its objects are dropped once older than the
// retention, not kept forever.
func TestGCVisitsNetworkWithoutRepository(t *testing.T) {
	ctx := context.Background()
	w := servicetest.MustWorld(t, servicetest.Options{})
	w.MustRepo(t, "app", map[string]string{"README": "app\n"})
	dir := filepath.Join(w.Dir, "networks", "orphan.git")
	git := func(stdin string, args ...string) string {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git("", "init", "-q", "--bare", dir)
	oid := git(randomText(t, 64<<10), "--git-dir", dir, "hash-object", "-w", "--stdin")
	loose := filepath.Join(dir, "objects", oid[:2], oid[2:])
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(loose, old, old); err != nil {
		t.Fatal(err)
	}
	if res, err := w.Repos.GC(ctx, w.Admin, repositories.GCOptions{Retention: 2 * time.Hour}); err != nil || res.Objects != 0 || res.Networks != 2 {
		t.Fatalf("gc with 2h retention: %+v, %v: want both networks visited, nothing dropped", res, err)
	}
	if _, err := os.Stat(loose); err != nil {
		t.Fatalf("object younger than the retention: %v", err)
	}
	res, err := w.Repos.GC(ctx, w.Admin, repositories.GCOptions{Retention: 30 * time.Minute})
	if err != nil || res.Networks != 2 || res.Loose != 1 || res.Bytes == 0 {
		t.Fatalf("gc with 30m retention: %+v, %v: want the orphan network's loose object dropped", res, err)
	}
	if _, err := os.Stat(loose); !os.IsNotExist(err) {
		t.Fatalf("orphan network's object after the gc: %v", err)
	}
	fsckClone(t, netDir(t, w, "app"))
}
