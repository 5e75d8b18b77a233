package replica_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/minio/minio-go/v7"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/gitobj"
	"github.com/lockstep-hq/lockstep/gitstore"
	"github.com/lockstep-hq/lockstep/internal/testenv"
	"github.com/lockstep-hq/lockstep/redislock"
	"github.com/lockstep-hq/lockstep/replica"
	"github.com/lockstep-hq/lockstep/repositories"
	"github.com/lockstep-hq/lockstep/s3packs"
	"github.com/lockstep-hq/lockstep/sqlstore"
)

// env is one shared truth (a Postgres database and a bucket) that several
// replicas (Managers with their own cache directories) use.
type env struct {
	t       *testing.T
	db      *sqlstore.DB
	objects *s3packs.Store
	cfg     s3packs.Config
}

func newEnv(t *testing.T) *env {
	t.Helper()
	srv, bucket := testenv.MustS3Bucket(t)
	return newEnvOn(t, srv, bucket)
}

func newEnvOn(t *testing.T, srv testenv.S3Server, bucket string) *env {
	t.Helper()
	db, err := sqlstore.Open(context.Background(), testenv.MustPostgresDB(t), sqlstore.Options{Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	cfg := s3packs.Config{Bucket: bucket, Prefix: "lockstep", Endpoint: srv.Endpoint, Region: "us-east-1",
		Insecure: !srv.Secure, Timeout: 5 * time.Second, AccessKey: srv.AccessKey, SecretKey: srv.SecretKey}
	objects, err := s3packs.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, db: db, objects: objects, cfg: cfg}
}

// replica is one Manager and its cache directory.
type replicaT struct {
	m   *replica.Manager
	dir string
	mu  sync.Mutex
	net []repositories.ObjectStore
}

func (e *env) replica(grace time.Duration) *replicaT {
	e.t.Helper()
	m := replica.New(replica.Config{Objects: e.objects, Packs: e.db, Grace: grace,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	r := &replicaT{m: m, dir: e.t.TempDir()}
	e.t.Cleanup(func() {
		r.mu.Lock()
		for _, n := range r.net {
			n.Close()
		}
		r.mu.Unlock()
		m.Close()
	})
	return r
}

func (r *replicaT) open(t *testing.T, network string) repositories.ObjectStore {
	t.Helper()
	n, err := r.m.Open(filepath.Join(r.dir, network+".git"), gitobj.OpenOptions{Fsync: true})
	if err != nil {
		t.Fatalf("open %s: %v", network, err)
	}
	r.mu.Lock()
	r.net = append(r.net, n)
	r.mu.Unlock()
	return n
}

func refresh(t *testing.T, n repositories.ObjectStore) {
	t.Helper()
	if err := n.(repositories.Refresher).Refresh(context.Background()); err != nil {
		t.Fatalf("refresh: %v", err)
	}
}

func blob(s string) plumbing.EncodedObject {
	o := &plumbing.MemoryObject{}
	o.SetType(plumbing.BlobObject)
	o.Write([]byte(s))
	return o
}

// writeBlobs writes count blobs as one pack and returns their hashes.
func writeBlobs(t *testing.T, n repositories.ObjectStore, tag string, count int) []plumbing.Hash {
	t.Helper()
	var objs []plumbing.EncodedObject
	var hs []plumbing.Hash
	for i := 0; i < count; i++ {
		o := blob(fmt.Sprintf("%s %d\n%s", tag, i, strings.Repeat("x", i)))
		objs = append(objs, o)
		hs = append(hs, o.Hash())
	}
	if _, err := n.WriteObjects(objs); err != nil {
		t.Fatalf("write %s: %v", tag, err)
	}
	return hs
}

func mustHave(t *testing.T, n repositories.ObjectStore, hs []plumbing.Hash, where string) {
	t.Helper()
	if miss := n.Missing(hs); len(miss) > 0 {
		t.Fatalf("%s: %d of %d objects missing, first %s", where, len(miss), len(hs), miss[0])
	}
}

func livePacks(t *testing.T, e *env, network string) (live, retired []string) {
	t.Helper()
	recs, _, err := e.db.NetworkPacks(context.Background(), network)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.Live() {
			live = append(live, r.Hash)
		} else {
			retired = append(retired, r.Hash)
		}
	}
	return live, retired
}

func fsck(t *testing.T, dir string) {
	t.Helper()
	cmd := exec.Command("git", "fsck", "--no-dangling", "--strict")
	cmd.Env = append(os.Environ(), "GIT_DIR="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git fsck %s: %v\n%s", dir, err, out)
	}
}

// A write on one replica is registered before it returns: another
// replica's next refresh downloads it; a replica opened later (a wiped
// cache) rebuilds everything from the bucket.
func TestWriteOnOneReadOnAnother(t *testing.T) {
	e := newEnv(t)
	a, b := e.replica(time.Hour), e.replica(time.Hour)
	na, nb := a.open(t, "net1"), b.open(t, "net1")
	hs := writeBlobs(t, na, "a", 10)
	live, _ := livePacks(t, e, "net1")
	if len(live) != 1 {
		t.Fatalf("live packs after one write: %d, want 1", len(live))
	}
	if len(nb.Missing(hs)) != len(hs) {
		t.Fatalf("replica b has objects before its refresh")
	}
	refresh(t, nb)
	mustHave(t, nb, hs, "replica b after refresh")

	// Writes on both, then a commit built on b from a's blob.
	hb := writeBlobs(t, nb, "b", 5)
	refresh(t, na)
	mustHave(t, na, hb, "replica a")
	c := e.replica(time.Hour)
	nc := c.open(t, "net1")
	mustHave(t, nc, append(hs, hb...), "a new replica")

	// Wiped cache: the same directory emptied and opened again.
	nc.Close()
	if err := os.RemoveAll(c.dir); err != nil {
		t.Fatal(err)
	}
	nc2 := c.open(t, "net1")
	mustHave(t, nc2, append(hs, hb...), "a wiped cache")
	fsck(t, nc2.Dir())

	// A commit (a loose write in local mode) is a pack here, registered.
	tree, objs, err := nc2.EditTree(plumbing.ZeroHash, []gitstore.TreeEdit{{Path: "f.txt", Content: []byte("hi\n")}}, gitstore.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nc2.WriteObjects(objs); err != nil {
		t.Fatal(err)
	}
	sig := object.Signature{Name: "a", Email: "a@example.com", When: time.Unix(1e9, 0)}
	commit, _, err := nc2.WriteCommit(gitstore.CommitSpec{Tree: tree, Message: "m\n", Author: sig, Committer: sig})
	if err != nil {
		t.Fatal(err)
	}
	refresh(t, na)
	if _, err := na.Commit(commit); err != nil {
		t.Fatalf("commit written on c not readable on a: %v", err)
	}
}

// The object store down: a write fails with unavailable, registers
// nothing and leaves no pack in the cache; reads from the cache go on; the
// store back, writes succeed and nothing was lost.
func TestObjectStoreOutage(t *testing.T) {
	own := testenv.StartS3(t)
	c := own.Client(t)
	if err := c.MakeBucket(context.Background(), "outage", minio.MakeBucketOptions{Region: "us-east-1"}); err != nil {
		t.Fatal(err)
	}
	e := newEnvOn(t, own.S3Server, "outage")
	a := e.replica(time.Hour)
	n := a.open(t, "net")
	before := writeBlobs(t, n, "before", 4)
	packsBefore := n.PackCount()

	own.Kill()
	_, err := n.WriteObjects([]plumbing.EncodedObject{blob("during the outage")})
	if lockstep.ErrorCode(err) != lockstep.EUNAVAILABLE {
		t.Fatalf("write with the store down: %v (code %q), want unavailable", err, lockstep.ErrorCode(err))
	}
	if !n.Has(before[0]) {
		t.Fatal("cached object unreadable during the outage")
	}
	if n.PackCount() != packsBefore {
		t.Fatalf("pack count %d after a failed write, want %d", n.PackCount(), packsBefore)
	}
	if n.Has(blob("during the outage").Hash()) {
		t.Fatal("the failed write's object is readable from the cache")
	}
	live, _ := livePacks(t, e, "net")
	if len(live) != 1 {
		t.Fatalf("live packs %d after the failed write, want 1", len(live))
	}

	own.Restart(t)
	after := writeBlobs(t, n, "after", 2)
	fresh := e.replica(time.Hour).open(t, "net")
	mustHave(t, fresh, append(before, after...), "a new replica after the outage")
}

// TestObjectStoreFrozen: issue 21 item 10. The object store frozen
// (SIGSTOP: connections accepted, nothing answered), a write fails as
// unavailable instead of stalling for 3 attempts of 4 timeouts each, and
// its message names neither the store's host nor its port.
func TestObjectStoreFrozen(t *testing.T) {
	own := testenv.StartS3(t)
	t.Cleanup(own.Thaw)
	own.MakeBucket(t, "frozen")
	e := newEnvOn(t, own.S3Server, "frozen")
	n := e.replica(time.Hour).open(t, "net")
	writeBlobs(t, n, "before", 1)

	own.Freeze(t)
	done := make(chan error, 1)
	go func() {
		_, err := n.WriteObjects([]plumbing.EncodedObject{blob("while frozen")})
		done <- err
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(10 * e.cfg.Timeout): // a hang detector: 2 attempts of one timeout each are expected
		t.Fatalf("a write to a frozen object store still running after %s", 10*e.cfg.Timeout)
	}
	if lockstep.ErrorCode(err) != lockstep.EUNAVAILABLE {
		t.Fatalf("write with the store frozen: %v (code %q), want unavailable", err, lockstep.ErrorCode(err))
	}
	host, port, _ := strings.Cut(own.Endpoint, ":")
	if msg := lockstep.ErrorMessage(err); strings.Contains(msg, host) || strings.Contains(msg, port) {
		t.Errorf("the message names the object store's endpoint %s: %q", own.Endpoint, msg)
	}
}

// Compaction folds every live pack written by several replicas into one,
// keeps every object (referenced or not), retires the old packs in the
// database, and the other replicas follow; two compactions at once do
// not lose anything.
func TestCompactionAcrossReplicas(t *testing.T) {
	e := newEnv(t)
	a, b := e.replica(time.Hour), e.replica(time.Hour)
	na, nb := a.open(t, "net"), b.open(t, "net")
	var all []plumbing.Hash
	for i := 0; i < 4; i++ {
		all = append(all, writeBlobs(t, na, fmt.Sprintf("a%d", i), 3)...)
		all = append(all, writeBlobs(t, nb, fmt.Sprintf("b%d", i), 3)...)
	}
	live, _ := livePacks(t, e, "net")
	if len(live) != 8 {
		t.Fatalf("live packs %d, want 8", len(live))
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, n := range []repositories.ObjectStore{na, nb} {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = n.Compact(context.Background()) }()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("compact %d: %v", i, err)
		}
	}
	live, retired := livePacks(t, e, "net")
	if len(live) != 1 || len(retired) != 8 {
		t.Fatalf("after compaction: %d live, %d retired; want 1 and 8", len(live), len(retired))
	}
	for _, n := range []repositories.ObjectStore{na, nb} {
		refresh(t, n)
		mustHave(t, n, all, "after compaction")
		if n.PackCount() != 1 {
			t.Fatalf("cache holds %d packs after following a compaction, want 1", n.PackCount())
		}
	}
	mustHave(t, e.replica(time.Hour).open(t, "net"), all, "a new replica after compaction")
}

// GC with a tiny grace period, racing with writes and compactions:
// retired and never-registered packs go, live ones stay; every object
// written stays readable from a wiped cache.
func TestGCRacingWritesAndCompaction(t *testing.T) {
	e := newEnv(t)
	// Small, but large enough that a registration on a loaded machine
	// stays within half of it (a write past that fails, by design).
	const grace = 3 * time.Second
	a, b := e.replica(grace), e.replica(grace)
	na, nb := a.open(t, "net"), b.open(t, "net")

	// An unregistered pack: uploaded by a write that crashed before its
	// registration.
	orphanDir := t.TempDir()
	orphan, err := gitstore.Open(orphanDir, gitstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := orphan.WriteObjects([]plumbing.EncodedObject{blob("orphan")}); err != nil {
		t.Fatal(err)
	}
	packs, _ := filepath.Glob(filepath.Join(orphanDir, "objects", "pack", "pack-*.pack"))
	oh := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(packs[0]), "pack-"), ".pack")
	if err := e.objects.PutPack(context.Background(), "net", oh, packs[0], strings.TrimSuffix(packs[0], ".pack")+".idx"); err != nil {
		t.Fatal(err)
	}
	orphan.Close()

	var mu sync.Mutex
	var all []plumbing.Hash
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for w, n := range []repositories.ObjectStore{na, nb} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				objs := []plumbing.EncodedObject{blob(fmt.Sprintf("w%d-%d a", w, i)), blob(fmt.Sprintf("w%d-%d b", w, i))}
				if _, err := n.WriteObjects(objs); err != nil {
					t.Errorf("write: %v", err)
					return
				}
				mu.Lock()
				all = append(all, objs[0].Hash(), objs[1].Hash())
				mu.Unlock()
				if i%5 == 4 {
					if err := n.Compact(context.Background()); err != nil {
						t.Errorf("compact: %v", err)
						return
					}
				}
			}
		}()
	}
	wg.Add(1)
	var deleted int
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			st, err := a.m.GC(context.Background())
			if err != nil {
				t.Errorf("gc: %v", err)
				return
			}
			deleted += st.Deleted
			time.Sleep(50 * time.Millisecond)
		}
	}()
	wg.Wait()
	time.Sleep(grace + 100*time.Millisecond)
	st, err := b.m.GC(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	deleted += st.Deleted
	if deleted == 0 {
		t.Fatal("gc deleted nothing")
	}
	inBucket, err := e.objects.ListPacks(context.Background(), "net")
	if err != nil {
		t.Fatal(err)
	}
	live, retired := livePacks(t, e, "net")
	if len(retired) != 0 {
		t.Fatalf("%d retired records left after GC past the grace period", len(retired))
	}
	liveSet := map[string]bool{}
	for _, h := range live {
		liveSet[h] = true
	}
	for _, p := range inBucket {
		if !liveSet[p.Hash] {
			t.Errorf("bucket still holds pack %s, neither live nor young", p.Hash)
		}
		if p.Hash == oh {
			t.Errorf("the unregistered pack survived GC")
		}
	}
	if len(inBucket) != len(live) {
		t.Fatalf("bucket has %d packs, %d live", len(inBucket), len(live))
	}
	fresh := e.replica(grace).open(t, "net")
	mustHave(t, fresh, all, "a new replica after GC")
	fsck(t, fresh.Dir())
}

// A data directory from local mode (packs and loose objects) is adopted:
// its objects are uploaded and registered when opened in object-storage
// mode.
func TestAdoptLocalObjects(t *testing.T) {
	e := newEnv(t)
	a := e.replica(time.Hour)
	dir := filepath.Join(a.dir, "net.git")
	local, err := gitstore.Open(dir, gitstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	hs := writeBlobs(t, local, "local", 3)
	loose := blob("loose")
	if _, err := local.Objects().SetEncodedObject(loose); err != nil {
		t.Fatal(err)
	}
	local.Close()
	n := a.open(t, "net")
	mustHave(t, n, append(hs, loose.Hash()), "adopted")
	fresh := e.replica(time.Hour).open(t, "net")
	mustHave(t, fresh, append(hs, loose.Hash()), "a new replica after adoption")
}

// With Redis, a replica downloads another's write in the background as
// soon as it is announced, before any request asks for it.
func TestNotifierPrefetches(t *testing.T) {
	e := newEnv(t)
	rdb, _ := testenv.MustRedis(t)
	prefix := fmt.Sprintf("lockstep-test-%d:net:", time.Now().UnixNano())
	mk := func() *replicaT {
		m := replica.New(replica.Config{Objects: e.objects, Packs: e.db, Grace: time.Hour,
			Notify: redislock.NewNotifier(rdb, prefix), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
		r := &replicaT{m: m, dir: t.TempDir()}
		t.Cleanup(func() {
			for _, n := range r.net {
				n.Close()
			}
			m.Close()
		})
		return r
	}
	a, b := mk(), mk()
	na, nb := a.open(t, "net"), b.open(t, "net")
	time.Sleep(200 * time.Millisecond) // both subscribed
	hs := writeBlobs(t, na, "announced", 3)
	deadline := time.Now().Add(20 * time.Second)
	for len(nb.Missing(hs)) > 0 { // Missing does not refresh
		if time.Now().After(deadline) {
			t.Fatal("replica b never downloaded the announced pack")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A request catches up before it reads a ref, but another replica's write
// can commit in between: the ref then names a commit the cache has not
// downloaded. A lookup that misses catches up and tries again (found by
// `lockstep load`: preflights answering "commit … not found").
func TestMissingObjectCatchesUp(t *testing.T) {
	e := newEnv(t)
	a, b := e.replica(time.Hour), e.replica(time.Hour)
	na, nb := a.open(t, "net"), b.open(t, "net")
	refresh(t, nb)
	tree, objs, err := na.EditTree(plumbing.ZeroHash, []gitstore.TreeEdit{{Path: "f", Content: []byte("from a\n")}}, gitstore.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := na.WriteObjects(objs); err != nil {
		t.Fatal(err)
	}
	sig := object.Signature{Name: "a", Email: "a@example.com", When: time.Unix(1e9, 0)}
	c, _, err := na.WriteCommit(gitstore.CommitSpec{Tree: tree, Message: "m\n", Author: sig, Committer: sig})
	if err != nil {
		t.Fatal(err)
	}
	// No Refresh on b: the reads themselves must find it.
	if _, err := nb.Commit(c); err != nil {
		t.Fatalf("commit written on a, read on b: %v", err)
	}
	if _, err := nb.TreeEntries(c, ""); err != nil {
		t.Fatalf("tree: %v", err)
	}
	c2, _, err := na.WriteCommit(gitstore.CommitSpec{Tree: tree, Parents: []plumbing.Hash{c}, Message: "n\n", Author: sig, Committer: sig})
	if err != nil {
		t.Fatal(err)
	}
	if !nb.Has(c2) {
		t.Fatal("Has on b of a commit just written on a")
	}
	// A commit on b whose parent b has not downloaded yet.
	c3, _, err := na.WriteCommit(gitstore.CommitSpec{Tree: tree, Parents: []plumbing.Hash{c2}, Message: "o\n", Author: sig, Committer: sig})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := nb.WriteCommit(gitstore.CommitSpec{Tree: tree, Parents: []plumbing.Hash{c3}, Message: "p\n", Author: sig, Committer: sig}); err != nil {
		t.Fatalf("commit on b with a parent from a: %v", err)
	}
}

// S3 listings give modification times to the second (truncated): a pack
// listed as older than the grace period by less than a second may be
// younger than it, and an unregistered pack that young belongs to a
// write still registering it. GC keeps it; a second later it goes.
func TestGCAllowsForListingResolution(t *testing.T) {
	e := newEnv(t)
	const grace = 10 * time.Second
	var now time.Time
	m := replica.New(replica.Config{Objects: e.objects, Packs: e.db, Grace: grace,
		Now: func() time.Time { return now }, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	t.Cleanup(m.Close)

	dir := t.TempDir()
	local, err := gitstore.Open(dir, gitstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	if _, err := local.WriteObjects([]plumbing.EncodedObject{blob("being registered")}); err != nil {
		t.Fatal(err)
	}
	packs, _ := filepath.Glob(filepath.Join(dir, "objects", "pack", "pack-*.pack"))
	h := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(packs[0]), "pack-"), ".pack")
	if err := e.objects.PutPack(context.Background(), "net", h, packs[0], strings.TrimSuffix(packs[0], ".pack")+".idx"); err != nil {
		t.Fatal(err)
	}
	listed, err := e.objects.ListPacks(context.Background(), "net")
	if err != nil || len(listed) != 1 {
		t.Fatalf("list: %v %v", listed, err)
	}
	gc := func() int {
		t.Helper()
		st, err := m.GC(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return st.Deleted
	}
	now = listed[0].Modified.Add(grace + 500*time.Millisecond)
	if d := gc(); d != 0 {
		t.Fatalf("GC deleted %d packs listed %s past the grace period: within the listing's resolution", d, 500*time.Millisecond)
	}
	now = listed[0].Modified.Add(grace + 1500*time.Millisecond)
	if d := gc(); d != 1 {
		t.Fatalf("GC deleted %d packs past the grace period and the resolution, want 1", d)
	}
}

// countingPacks counts the generation reads and pack-list reads a
// replica makes on the real store.
type countingPacks struct {
	lockstep.PackStore
	mu         sync.Mutex
	gens, list int
}

func (c *countingPacks) NetworkGeneration(ctx context.Context, network string) (int64, error) {
	c.mu.Lock()
	c.gens++
	c.mu.Unlock()
	return c.PackStore.NetworkGeneration(ctx, network)
}

func (c *countingPacks) NetworkPacks(ctx context.Context, network string) ([]lockstep.PackRecord, int64, error) {
	c.mu.Lock()
	c.list++
	c.mu.Unlock()
	return c.PackStore.NetworkPacks(ctx, network)
}

func (c *countingPacks) counts() (gens, list int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gens, c.list
}

// TestRefreshOncePerRequest: the steps of one request (a ctx from
// lockstep.WithRequestStart) share one generation check, made after the
// request arrived, so the request still sees every write committed
// before it began; the next request checks again and sees what was
// written meanwhile. A replica's own writes leave its cache current: no
// pack-list read follows them.
func TestRefreshOncePerRequest(t *testing.T) {
	e := newEnv(t)
	cp := &countingPacks{PackStore: e.db}
	m := replica.New(replica.Config{Objects: e.objects, Packs: cp, Grace: time.Hour,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	t.Cleanup(func() { m.Close() })
	na, err := m.Open(filepath.Join(t.TempDir(), "net.git"), gitobj.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { na.Close() })
	b := e.replica(time.Hour)
	nb := b.open(t, "net")
	first := writeBlobs(t, nb, "before request 1", 3)

	g0, _ := cp.counts()
	req1 := lockstep.WithRequestStart(context.Background(), time.Now())
	for step := 0; step < 4; step++ {
		if err := na.(repositories.Refresher).Refresh(req1); err != nil {
			t.Fatal(err)
		}
	}
	if g, _ := cp.counts(); g != g0+1 {
		t.Fatalf("4 steps of one request made %d generation reads, want 1", g-g0)
	}
	mustHave(t, na, first, "request 1")

	// Written after request 1 began: a later step of request 1 need not
	// check again; a lookup that misses still catches up.
	later := writeBlobs(t, nb, "during request 1", 2)
	if err := na.(repositories.Refresher).Refresh(req1); err != nil {
		t.Fatal(err)
	}
	if g, _ := cp.counts(); g != g0+1 {
		t.Fatalf("a later step of request 1 read the generation again (%d reads)", g-g0)
	}
	if !na.Has(later[0]) {
		t.Fatal("a lookup in request 1 of an object written during it did not catch up")
	}

	// Request 2 checks (once) and needs nothing more.
	g1, _ := cp.counts()
	req2 := lockstep.WithRequestStart(context.Background(), time.Now())
	if err := na.(repositories.Refresher).Refresh(req2); err != nil {
		t.Fatal(err)
	}
	if g, _ := cp.counts(); g != g1+1 {
		t.Fatalf("request 2 made %d generation reads, want 1", g-g1)
	}
	mustHave(t, na, later, "request 2")

	// Own writes: the next request's check finds the cache current and
	// reads no pack list.
	writeBlobs(t, na, "own write", 2)
	writeBlobs(t, na, "own write 2", 2)
	_, l0 := cp.counts()
	if err := na.(repositories.Refresher).Refresh(lockstep.WithRequestStart(context.Background(), time.Now())); err != nil {
		t.Fatal(err)
	}
	if _, l := cp.counts(); l != l0 {
		t.Fatalf("a check after the replica's own writes read the pack list %d times, want 0", l-l0)
	}
}

// Small packs (Config.InlineMax) are kept in the database with their
// record and never reach the bucket; another replica, a wiped cache and a
// replica opened later read them from the database; a compaction retires
// them like bucket packs, and the bucket GC deletes their records (and
// bytes) after the grace period. A pack over the limit goes to the bucket.
func TestSmallPacksInDatabase(t *testing.T) {
	e := newEnv(t)
	const grace = time.Minute
	now := time.Now()
	inline := func() *replicaT {
		m := replica.New(replica.Config{Objects: e.objects, Packs: e.db, Grace: grace, InlineMax: 2048,
			Now: func() time.Time { return now }, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
		r := &replicaT{m: m, dir: t.TempDir()}
		t.Cleanup(func() {
			r.mu.Lock()
			for _, n := range r.net {
				n.Close()
			}
			r.mu.Unlock()
			m.Close()
		})
		return r
	}
	bucketPacks := func() int {
		t.Helper()
		l, err := e.objects.ListPacks(context.Background(), "net")
		if err != nil {
			t.Fatal(err)
		}
		return len(l)
	}
	a, b := inline(), inline()
	na, nb := a.open(t, "net"), b.open(t, "net")
	small := writeBlobs(t, na, "small", 1) // ~1.2 KiB of pack and index
	recs, _, err := e.db.NetworkPacks(context.Background(), "net")
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || !recs[0].Inline || !recs[0].Live() {
		t.Fatalf("records after a small write: %+v, want one live inline pack", recs)
	}
	if n := bucketPacks(); n != 0 {
		t.Fatalf("a small pack reached the bucket: %d packs there", n)
	}
	big := writeBlobs(t, na, "big", 60) // its index alone is over 2 KiB
	if n := bucketPacks(); n != 1 {
		t.Fatalf("bucket packs after a large write: %d, want 1", n)
	}
	sig := object.Signature{Name: "a", Email: "a@example.com", When: time.Unix(1e9, 0)}
	tree, objs, err := na.EditTree(plumbing.ZeroHash, []gitstore.TreeEdit{{Path: "f.txt", Content: []byte("hi\n")}}, gitstore.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := na.WriteObjects(objs); err != nil {
		t.Fatal(err)
	}
	commit, _, err := na.WriteCommit(gitstore.CommitSpec{Tree: tree, Message: "rollback\n", Author: sig, Committer: sig})
	if err != nil {
		t.Fatal(err)
	}
	if n := bucketPacks(); n != 1 {
		t.Fatalf("bucket packs after a commit: %d, want still 1", n)
	}
	all := append(small, big...)
	refresh(t, nb)
	mustHave(t, nb, all, "replica b")
	if _, err := nb.Commit(commit); err != nil {
		t.Fatalf("commit written on a not readable on b: %v", err)
	}
	c := inline()
	nc := c.open(t, "net")
	mustHave(t, nc, all, "a new replica")
	fsck(t, nc.Dir())

	// A compaction retires the inline packs; past the grace period the
	// bucket GC deletes their records, and nothing is lost.
	if err := nb.Compact(context.Background()); err != nil {
		t.Fatal(err)
	}
	live, retired := livePacks(t, e, "net")
	if len(live) != 1 || len(retired) != 4 {
		t.Fatalf("after compaction: %d live, %d retired; want 1 and 4", len(live), len(retired))
	}
	now = time.Now().Add(grace + 2*time.Second)
	st, err := a.m.GC(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Records != 4 || st.Deleted != 1 {
		t.Fatalf("bucket GC: %+v, want 4 records deleted (3 inline, 1 in the bucket) and 1 bucket pack", st)
	}
	recs, _, err = e.db.NetworkPacks(context.Background(), "net")
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || !recs[0].Live() {
		t.Fatalf("records after GC: %+v, want the compacted pack alone", recs)
	}
	nc.Close()
	if err := os.RemoveAll(c.dir); err != nil {
		t.Fatal(err)
	}
	nc2 := c.open(t, "net")
	mustHave(t, nc2, all, "a wiped cache after GC")
	if _, err := nc2.Commit(commit); err != nil {
		t.Fatalf("commit after GC: %v", err)
	}
	fsck(t, nc2.Dir())
}

// BenchmarkSmallPackWrite is the object-mode part of a rollback: one
// commit written (a one-object pack), uploaded to the bucket and
// registered (bucket), or registered with its bytes in the database
// (inline, Config.InlineMax). Both variants alternate in one loop, on
// the same Postgres and S3 server; go test -bench SmallPackWrite
// -benchtime 200x ./replica/ reports each as min/median/max ms.
func BenchmarkSmallPackWrite(b *testing.B) {
	srv, bucket := testenv.MustS3Bucket(b)
	db, err := sqlstore.Open(context.Background(), testenv.MustPostgresDB(b), sqlstore.Options{Migrate: true})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	cfg := s3packs.Config{Bucket: bucket, Prefix: "lockstep", Endpoint: srv.Endpoint, Region: "us-east-1",
		Insecure: !srv.Secure, Timeout: 5 * time.Second, AccessKey: srv.AccessKey, SecretKey: srv.SecretKey}
	objects, err := s3packs.Open(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	open := func(name string, inline int64) repositories.ObjectStore {
		m := replica.New(replica.Config{Objects: objects, Packs: db, Grace: time.Hour, InlineMax: inline,
			Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
		b.Cleanup(m.Close)
		n, err := m.Open(filepath.Join(b.TempDir(), name+".git"), gitobj.OpenOptions{Fsync: true})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { n.Close() })
		return n
	}
	nets := []repositories.ObjectStore{open("bucket", 0), open("inline", replica.DefaultInlineMax)}
	names := []string{"bucket", "inline"}
	tree := plumbing.ZeroHash
	for _, n := range nets {
		t, objs, err := n.EditTree(plumbing.ZeroHash, []gitstore.TreeEdit{{Path: "f.txt", Content: []byte("hi\n")}}, gitstore.Limits{})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := n.WriteObjects(objs); err != nil {
			b.Fatal(err)
		}
		tree = t
	}
	ms := [2][]float64{}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for k := range nets {
			k = (k + i) % 2 // ABBA-ish: alternate which goes first
			sig := object.Signature{Name: "a", Email: "a@example.com", When: time.Unix(int64(1e9+i), 0)}
			start := time.Now()
			if _, _, err := nets[k].WriteCommit(gitstore.CommitSpec{Tree: tree, Message: fmt.Sprintf("rollback %d\n", i), Author: sig, Committer: sig}); err != nil {
				b.Fatal(err)
			}
			ms[k] = append(ms[k], float64(time.Since(start).Microseconds())/1000)
		}
	}
	b.StopTimer()
	for k, name := range names {
		s := ms[k]
		slices.Sort(s)
		b.ReportMetric(s[0], name+"-min-ms")
		b.ReportMetric(s[len(s)/2], name+"-median-ms")
		b.ReportMetric(s[len(s)-1], name+"-max-ms")
	}
}

// listCounting is the real store with its full pack-list and inline-pack
// reads counted (the store's other methods, PackChanges among them,
// are the store's own).
type listCounting struct {
	*sqlstore.DB
	mu           sync.Mutex
	list, inline int
}

func (c *listCounting) NetworkPacks(ctx context.Context, network string) ([]lockstep.PackRecord, int64, error) {
	c.mu.Lock()
	c.list++
	c.mu.Unlock()
	return c.DB.NetworkPacks(ctx, network)
}

func (c *listCounting) InlinePack(ctx context.Context, network, hash string) ([]byte, []byte, error) {
	c.mu.Lock()
	c.inline++
	c.mu.Unlock()
	return c.DB.InlinePack(ctx, network, hash)
}

func (c *listCounting) counts() (list, inline int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.list, c.inline
}

// TestCatchUpReadsOnlyChanges: once a replica's cache reflects a
// generation, its catch-up reads only the pack records changed since
// (one read, the inline packs' bytes in it), not every record of the
// network followed by one read per inline pack; retirements by a
// compaction arrive the same way, and nothing is lost.
func TestCatchUpReadsOnlyChanges(t *testing.T) {
	e := newEnv(t)
	cp := &listCounting{DB: e.db}
	newInline := func(ps lockstep.PackStore) *replicaT {
		m := replica.New(replica.Config{Objects: e.objects, Packs: ps, Grace: time.Hour, InlineMax: replica.DefaultInlineMax,
			Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
		r := &replicaT{m: m, dir: t.TempDir()}
		t.Cleanup(func() {
			r.mu.Lock()
			for _, n := range r.net {
				n.Close()
			}
			r.mu.Unlock()
			m.Close()
		})
		return r
	}
	a, b := newInline(e.db), newInline(cp)
	na := a.open(t, "net")
	var all []plumbing.Hash
	for i := 0; i < 10; i++ {
		all = append(all, writeBlobs(t, na, fmt.Sprintf("before b %d", i), 1)...)
	}
	nb := b.open(t, "net") // a new cache: the full list, once
	mustHave(t, nb, all, "b at open")
	l0, i0 := cp.counts()
	for round := 0; round < 3; round++ {
		news := writeBlobs(t, na, fmt.Sprintf("round %d", round), 1)
		all = append(all, news...)
		refresh(t, nb)
		mustHave(t, nb, news, fmt.Sprintf("b after round %d", round))
	}
	if l, i := cp.counts(); l != l0 || i != i0 {
		t.Fatalf("3 catch-ups of one inline pack each read the full pack list %d times and %d inline packs one by one; want 0 and 0 (the changes, bytes included, in one read)", l-l0, i-i0)
	}
	// A compaction on a retires every pack: b removes the retired ones
	// it holds and takes the compacted one, from the changes.
	if err := na.Compact(context.Background()); err != nil {
		t.Fatal(err)
	}
	refresh(t, nb)
	live, retired := livePacks(t, e, "net")
	if len(live) != 1 || len(retired) != 13 {
		t.Fatalf("after compaction: %d live, %d retired; want 1 and 13", len(live), len(retired))
	}
	got, _ := filepath.Glob(filepath.Join(nb.Dir(), "objects", "pack", "pack-*.idx"))
	if len(got) != 1 || !strings.Contains(got[0], live[0]) {
		t.Fatalf("b's cache after the compaction's catch-up: %v, want the compacted pack %s alone", got, live[0])
	}
	mustHave(t, nb, all, "b after the compaction")
	if l, _ := cp.counts(); l != l0 {
		t.Fatalf("the compaction's catch-up read the full pack list (%d times)", l-l0)
	}
	fsck(t, nb.Dir())
}

// TestCatchUpLoadsOnlyNewPacks: a catch-up that only adds packs (another
// replica's writes: inline packs from the changes read, a large pack from
// the bucket) opens just those packs and does not list the cache's pack
// directory (before, every catch-up ended in a full Reload, which lists
// it); a catch-up that removes packs (a compaction's) still takes the
// full Reload, and nothing is lost either way.
func TestCatchUpLoadsOnlyNewPacks(t *testing.T) {
	e := newEnv(t)
	newInline := func() *replicaT {
		m := replica.New(replica.Config{Objects: e.objects, Packs: e.db, Grace: time.Hour, InlineMax: replica.DefaultInlineMax,
			Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
		r := &replicaT{m: m, dir: t.TempDir()}
		t.Cleanup(func() {
			r.mu.Lock()
			for _, n := range r.net {
				n.Close()
			}
			r.mu.Unlock()
			m.Close()
		})
		return r
	}
	type reloadCounter interface {
		ReloadCounts() (listings, opened int64)
	}
	a, b := newInline(), newInline()
	na := a.open(t, "net")
	var all []plumbing.Hash
	for i := 0; i < 5; i++ {
		all = append(all, writeBlobs(t, na, fmt.Sprintf("before b %d", i), 1)...)
	}
	nb := b.open(t, "net")
	mustHave(t, nb, all, "b at open")
	rc, ok := nb.(reloadCounter)
	if !ok {
		t.Fatalf("%T does not report its reloads", nb)
	}
	l0, o0 := rc.ReloadCounts()
	for round := 0; round < 3; round++ {
		news := writeBlobs(t, na, fmt.Sprintf("round %d", round), 1)
		all = append(all, news...)
		refresh(t, nb)
		mustHave(t, nb, news, fmt.Sprintf("b after round %d", round))
	}
	// A pack too large to be kept inline: downloaded from the bucket.
	big := make([]byte, replica.DefaultInlineMax+1024)
	for i := range big {
		big[i] = byte(i*7919 + i/251) // incompressible enough
	}
	large := blob(string(big))
	if _, err := na.WriteObjects([]plumbing.EncodedObject{large}); err != nil {
		t.Fatal(err)
	}
	all = append(all, large.Hash())
	refresh(t, nb)
	mustHave(t, nb, all, "b after the large pack")
	l, o := rc.ReloadCounts()
	if l != l0 || o-o0 != 4 {
		t.Fatalf("4 catch-ups of one new pack each listed the pack directory %d times and opened %d packs; want 0 and 4", l-l0, o-o0)
	}
	// A refresh that finds nothing new loads nothing.
	refresh(t, nb)
	if l, o := rc.ReloadCounts(); l != l0 || o-o0 != 4 {
		t.Fatalf("a catch-up with nothing new listed %d times and opened %d packs", l-l0, o-o0-4)
	}
	// A compaction retires every pack: the catch-up removes them and
	// reloads in full.
	if err := na.Compact(context.Background()); err != nil {
		t.Fatal(err)
	}
	refresh(t, nb)
	if l, _ := rc.ReloadCounts(); l != l0+1 {
		t.Fatalf("the compaction's catch-up listed the pack directory %d times, want 1 (the full Reload)", l-l0)
	}
	live, _ := livePacks(t, e, "net")
	got, _ := filepath.Glob(filepath.Join(nb.Dir(), "objects", "pack", "pack-*.idx"))
	if len(live) != 1 || len(got) != 1 || !strings.Contains(got[0], live[0]) {
		t.Fatalf("b's cache after the compaction's catch-up: %v, want the compacted pack %v alone", got, live)
	}
	mustHave(t, nb, all, "b after the compaction")
	// b writes, a catches up with b's pack alone, and b's own pack in
	// the changes it reads next is not loaded twice.
	mine := writeBlobs(t, nb, "b writes", 1)
	refresh(t, na)
	mustHave(t, na, mine, "a after b's write")
	_, o1 := rc.ReloadCounts()
	writeBlobs(t, na, "a writes again", 1)
	refresh(t, nb)
	if _, o2 := rc.ReloadCounts(); o2-o1 != 1 {
		t.Fatalf("b's catch-up of one pack of a (its own pack in the changes too) opened %d packs, want 1", o2-o1)
	}
	fsck(t, nb.Dir())
}

// fullListOnly is the real store seen through the PackStore and
// InlinePackStore interfaces alone: a replica on it catches up the way
// it did before PackChanges (the generation, every record, then each
// new inline pack's bytes).
type fullListOnly struct{ lockstep.InlinePackStore }

// BenchmarkCatchUp is a round-robin write's catch-up: replica w writes a
// one-object (inline) pack into a network of 120 packs, then each
// reader's Refresh brings its cache up to date; "changes" reads the
// records changed since its generation (PackChanges), "full" reads the
// generation, every record and the inline pack's bytes (the catch-up
// before PackChanges). Both alternate in one loop on the same Postgres;
// go test -bench CatchUp -benchtime 200x ./replica/ reports each as
// min/median/max ms of the Refresh.
func BenchmarkCatchUp(b *testing.B) {
	srv, bucket := testenv.MustS3Bucket(b)
	db, err := sqlstore.Open(context.Background(), testenv.MustPostgresDB(b), sqlstore.Options{Migrate: true})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	cfg := s3packs.Config{Bucket: bucket, Prefix: "lockstep", Endpoint: srv.Endpoint, Region: "us-east-1",
		Insecure: !srv.Secure, Timeout: 5 * time.Second, AccessKey: srv.AccessKey, SecretKey: srv.SecretKey}
	objects, err := s3packs.Open(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	open := func(name string, ps lockstep.PackStore) repositories.ObjectStore {
		m := replica.New(replica.Config{Objects: objects, Packs: ps, Grace: time.Hour, InlineMax: replica.DefaultInlineMax,
			Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
		b.Cleanup(m.Close)
		n, err := m.Open(filepath.Join(b.TempDir(), name, "net.git"), gitobj.OpenOptions{Fsync: true})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { n.Close() })
		return n
	}
	w := open("writer", db)
	for i := 0; i < 120; i++ {
		if _, err := w.WriteObjects([]plumbing.EncodedObject{blob(fmt.Sprintf("setup %d", i))}); err != nil {
			b.Fatal(err)
		}
	}
	readers := []repositories.ObjectStore{open("changes", db), open("full", fullListOnly{db})}
	names := []string{"changes", "full"}
	ms := [2][]float64{}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		o := blob(fmt.Sprintf("write %d", i))
		if _, err := w.WriteObjects([]plumbing.EncodedObject{o}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		for k := range readers {
			k = (k + i) % 2 // alternate which goes first
			start := time.Now()
			if err := readers[k].(repositories.Refresher).Refresh(context.Background()); err != nil {
				b.Fatal(err)
			}
			ms[k] = append(ms[k], float64(time.Since(start).Microseconds())/1000)
			if !readers[k].Has(o.Hash()) {
				b.Fatalf("%s: the new object is missing after the catch-up", names[k])
			}
		}
	}
	b.StopTimer()
	for k, name := range names {
		s := ms[k]
		slices.Sort(s)
		b.ReportMetric(s[0], name+"-min-ms")
		b.ReportMetric(s[len(s)/2], name+"-median-ms")
		b.ReportMetric(s[len(s)-1], name+"-max-ms")
	}
}
