package repositories_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep/internal/servicetest"
	"github.com/lockstep-hq/lockstep/internal/testenv"
	"github.com/lockstep-hq/lockstep/replica"
	"github.com/lockstep-hq/lockstep/repositories"
	"github.com/lockstep-hq/lockstep/s3packs"
	"github.com/lockstep-hq/lockstep/sqlstore"
)

// objReplicas starts n replicas in object-storage mode on one Postgres
// database and one bucket (versitygw): a World each, with its own cache
// directory and replica.Manager (grace 1 s).
func objReplicas(t *testing.T, n int) ([]*servicetest.World, *s3packs.Store) {
	t.Helper()
	ctx := context.Background()
	dbURL := testenv.MustPostgresDB(t)
	srv, bucket := testenv.MustS3Bucket(t)
	cfg := s3packs.Config{Bucket: bucket, Prefix: "lockstep", Endpoint: srv.Endpoint, Region: "us-east-1",
		Insecure: !srv.Secure, Timeout: 5 * time.Second, AccessKey: srv.AccessKey, SecretKey: srv.SecretKey}
	objects, err := s3packs.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var worlds []*servicetest.World
	for i := 0; i < n; i++ {
		packs, err := sqlstore.Open(ctx, dbURL, sqlstore.Options{Migrate: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { packs.Close() })
		m := replica.New(replica.Config{Objects: objects, Packs: packs, Grace: time.Second, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
		t.Cleanup(m.Close)
		sweep := func(ctx context.Context) (int, error) {
			st, err := m.GC(ctx)
			return st.Deleted, err
		}
		worlds = append(worlds, servicetest.MustWorld(t, servicetest.Options{DB: dbURL,
			Repos: repositories.Config{Objects: m, SweepBucket: sweep}}))
	}
	return worlds, objects
}

func bucketBytes(t *testing.T, objects *s3packs.Store, network string) (packs int, bytes int64) {
	t.Helper()
	list, err := objects.ListPacks(context.Background(), network)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range list {
		bytes += p.PackSize + p.IdxSize
	}
	return len(list), bytes
}

// fsckCache checks, in a replica's cache, that every object the tips
// reach is stored and sound.
func fsckCache(t *testing.T, dir string, tips []string) {
	t.Helper()
	args := append([]string{"--git-dir", dir, "fsck", "--strict", "--no-dangling", "--no-reflogs"}, tips...)
	if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
		t.Fatalf("git fsck in %s: %v\n%s", dir, err, out)
	}
}

// TestGCObjectStorage: two replicas on one bucket. Large blobs pushed into
// three workspaces through both replicas, two workspaces deleted; gc
// --prune now on one replica drops them (their packs retired, the live
// objects repacked and registered first) and, once the grace period has
// passed, deletes the packs from the bucket; the other replica still
// serves every live ref completely. Then both replicas race writes
// against a gc loop (bounded to a few seconds).
func TestGCObjectStorage(t *testing.T) {
	ctx := context.Background()
	ws, objects := objReplicas(t, 2)
	a, b := ws[0], ws[1]
	a.MustRepo(t, "app", map[string]string{"README": "app\n"})
	for i := 0; i < 3; i++ {
		w := ws[i%2]
		name := fmt.Sprintf("ws-%d", i)
		if _, err := w.Workspaces.Fork(ctx, w.Admin, "app", name, ""); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Repos.PushTar(ctx, w.Admin, name, servicetest.Tar(t, map[string]string{"README": "app\n", "big.txt": randomText(t, 512<<10)}),
			repositories.WriteOptions{Branch: "main", Force: true}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"ws-1", "ws-2"} {
		if _, err := b.Workspaces.Purge(ctx, b.Admin, name); err != nil {
			t.Fatal(err)
		}
	}
	network := mustRepo(t, a, "app").Network
	npBefore, before := bucketBytes(t, objects, network)
	res, err := b.Repos.GC(ctx, b.Admin, repositories.GCOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Objects < 4 || res.Packs == 0 || res.Bytes < 1<<20 {
		t.Fatalf("gc %+v: want the deleted workspaces' objects (> 1 MiB) dropped", res)
	}
	time.Sleep(2500 * time.Millisecond) // the grace period (1 s) plus the listing's resolution
	res2, err := b.Repos.GC(ctx, b.Admin, repositories.GCOptions{})
	if err != nil {
		t.Fatal(err)
	}
	npAfter, after := bucketBytes(t, objects, network)
	t.Logf("gc: %+v, then %+v; bucket %d packs %d bytes -> %d packs %d bytes", res, res2, npBefore, before, npAfter, after)
	if res2.BucketPacks == 0 || before-after < 1<<20 {
		t.Fatalf("bucket %d -> %d bytes (%d packs deleted): want more than 1 MiB freed", before, after, res2.BucketPacks)
	}
	// Replica a (which did not run the gc) reads every live ref whole.
	if _, rc, err := a.Repos.Blob(ctx, "ws-0", "main", "big.txt"); err != nil {
		t.Fatalf("live workspace's blob on the other replica: %v", err)
	} else {
		rc.Close()
	}
	var tips []string
	for _, name := range []string{"app", "ws-0"} {
		tips = append(tips, mustTip(t, a, name))
	}
	for _, w := range ws {
		n, err := w.Repos.Network(network)
		if err != nil {
			t.Fatal(err)
		}
		fsckCache(t, n.Dir(), tips)
	}

	raceGC(t, ws, 8*time.Second, 1500*time.Millisecond)
	// Every live ref of the network, read on each replica, is complete.
	refs, err := a.Store.NetworkRefs(ctx, network)
	if err != nil {
		t.Fatal(err)
	}
	tips = tips[:0]
	for _, r := range refs {
		if strings.HasPrefix(r.Name, "refs/heads/") {
			tips = append(tips, r.OID)
		}
	}
	for _, w := range ws {
		n, err := w.Repos.Network(network)
		if err != nil {
			t.Fatal(err)
		}
		fsckCache(t, filepath.Clean(n.Dir()), tips)
	}
}

// TestGCObjectStorageNetworkWithoutRepository: a network no repository
// names any more but whose packs are registered (in the bucket) is
// visited by a GC of everything: its packs are retired and, past the
// grace period, leave the bucket.
func TestGCObjectStorageNetworkWithoutRepository(t *testing.T) {
	ctx := context.Background()
	worlds, objects := objReplicas(t, 1)
	w := worlds[0]
	w.MustRepo(t, "gone", map[string]string{"big.txt": randomText(t, 256<<10)})
	if packs, _ := bucketBytes(t, objects, "gone"); packs == 0 {
		t.Fatal("no pack of network gone in the bucket")
	}
	// No repository names the network any more (what a failed create, or
	// a repository deletion, leaves).
	for _, q := range []string{`DELETE FROM refs WHERE repo_id = (SELECT id FROM repos WHERE name = 'gone')`,
		`UPDATE repos SET network = 'elsewhere' WHERE name = 'gone'`} {
		if _, err := w.Store.SQL().ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if res, err := w.Repos.GC(ctx, w.Admin, repositories.GCOptions{Retention: 0}); err != nil || res.Objects == 0 || res.Networks != 2 {
		t.Fatalf("gc --prune now: %+v, %v: want network gone visited and its objects dropped", res, err)
	}
	time.Sleep(2100 * time.Millisecond) // past the grace period (1 s; listings report times to the second)
	if _, err := w.Repos.GC(ctx, w.Admin, repositories.GCOptions{Retention: 0}); err != nil {
		t.Fatal(err)
	}
	if packs, bytes := bucketBytes(t, objects, "gone"); packs != 0 {
		t.Fatalf("network gone still has %d packs (%d bytes) in the bucket", packs, bytes)
	}
}
