package checkpoints_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/api"
	"github.com/lockstep-hq/lockstep/checkpoints"
	"github.com/lockstep-hq/lockstep/dbbranch"
	"github.com/lockstep-hq/lockstep/internal/servicetest"
	"github.com/lockstep-hq/lockstep/internal/testenv"
	"github.com/lockstep-hq/lockstep/redisbranch"
)

type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *testClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// TestCheckpointSnapshotRetention: with real Postgres branching and real
// Redis branches, PruneSnapshots drops the database and Redis snapshots
// of checkpoints older than the window and of an abandoned workspace's
// checkpoints, keeps the young ones of an active workspace, and the
// checkpoints forget what was dropped (a restore then skips that part).
func TestCheckpointSnapshotRetention(t *testing.T) {
	ctx := context.Background()
	tplURL := testenv.MustPostgresDB(t)
	u, err := url.Parse(tplURL)
	if err != nil {
		t.Fatal(err)
	}
	var b [2]byte
	rand.Read(b[:])
	m, err := dbbranch.New(ctx, dbbranch.Config{AdminURL: testenv.PostgresURL(t), Prefix: "r" + hex.EncodeToString(b[:]), Secret: []byte("test secret")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, ws := range []string{"ws1", "ws2"} {
			m.DropBranch(context.Background(), ws)
		}
		m.DropRepo(context.Background(), "app")
		m.Close()
	})
	clk := &testClock{t: time.Now()}
	w := servicetest.MustWorld(t, servicetest.Options{Brancher: dbbranch.Brancher{M: m}, Now: clk.now, StoreNow: clk.now})
	var rb *redisbranch.Manager
	redisDir := t.TempDir()
	if _, err := exec.LookPath("redis-server"); err == nil {
		base := 18000 + os.Getpid()%400*50
		if rb, err = redisbranch.New(redisbranch.Config{Dir: redisDir, Secret: []byte("s"), PortMin: base, PortMax: base + 49}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(rb.Close)
		w.Workspaces.SetRedis(rb)
		w.Checkpoints.SetRedis(rb)
	} else {
		t.Log("redis-server not installed: the Redis part is not exercised")
	}
	w.MustRepo(t, "app", map[string]string{"a.txt": "a\n"})
	if _, err := w.Checkpoints.BindTemplate(ctx, w.Admin, "app", strings.TrimPrefix(u.Path, "/")); err != nil {
		t.Fatal(err)
	}
	for _, ws := range []string{"ws1", "ws2"} {
		if _, err := w.Workspaces.Fork(ctx, w.Agent, "app", ws, ""); err != nil {
			t.Fatal(err)
		}
	}
	w.Workspaces.Wait()
	checkpoint := func(ws string) *lockstep.Checkpoint {
		t.Helper()
		c, err := w.Checkpoints.Create(ctx, w.Agent, ws, checkpoints.CreateRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if c.DBSnapshot == "" || (rb != nil && c.RedisSnapshot == "") {
			t.Fatalf("checkpoint %+v lacks a snapshot", c)
		}
		return c
	}
	old := checkpoint("ws1")
	gone := checkpoint("ws2")
	clk.add(8 * 24 * time.Hour)
	young := checkpoint("ws1")
	if _, err := w.Workspaces.SetStatus(ctx, w.Agent, "ws2", lockstep.StatusAbandoned, "test"); err != nil {
		t.Fatal(err)
	}
	w.Workspaces.Wait() // the abandon drops ws2's branches in the background

	snapIDs := func(ws string) map[string]bool {
		t.Helper()
		ids := map[string]bool{}
		snaps, err := m.Snapshots(ctx, ws)
		if err != nil && lockstep.ErrorCode(err) != lockstep.ENOTFOUND {
			t.Fatal(err)
		}
		for _, s := range snaps {
			ids[s.ID] = true
		}
		return ids
	}
	if s := snapIDs("ws1"); !s[old.DBSnapshot] || !s[young.DBSnapshot] {
		t.Fatalf("ws1's database snapshots before the retention: %v", s)
	}
	usage := func() *api.Usage {
		t.Helper()
		u := &api.Usage{Repo: "app", Network: "app"}
		if err := w.Workspaces.AddBranchUsage(ctx, u); err != nil {
			t.Fatal(err)
		}
		if u.Databases == nil || (rb != nil && u.Redis == nil) {
			t.Fatalf("usage without branch sizes: %+v", u)
		}
		return u
	}
	u2 := usage()
	// ws2's branch went with the abandon; ws1 has two snapshots.
	if d := u2.Databases; d.Branches != 1 || d.Snapshots != 2 || d.Bytes <= 0 || d.SnapshotBytes <= 0 || d.TotalBytes != d.Bytes+d.SnapshotBytes {
		t.Fatalf("database usage before the retention: %+v", d)
	}
	if r := u2.Redis; rb != nil && (r.Branches != 1 || r.Snapshots != 2) {
		t.Fatalf("redis usage before the retention: %+v", r)
	}
	if c := u2.Checkpoints; c.Checkpoints != 3 || c.DatabaseSnapshots != 3 {
		t.Fatalf("checkpoint usage before the retention: %+v", c)
	}
	res, err := w.Checkpoints.PruneSnapshots(ctx, 7*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if res.Database != 2 || len(res.Errors) != 0 || (rb != nil && res.Redis != 2) {
		t.Fatalf("prune: %+v, want the old and the abandoned workspace's snapshots", res)
	}
	if s := snapIDs("ws1"); s[old.DBSnapshot] || !s[young.DBSnapshot] {
		t.Fatalf("ws1's database snapshots after the retention: %v; want %s dropped, %s kept", s, old.DBSnapshot, young.DBSnapshot)
	}
	if rb != nil {
		rdb := func(ws, id string) bool {
			_, err := os.Stat(filepath.Join(redisDir, "branches", ws, "snapshots", id+".rdb"))
			return err == nil
		}
		if rdb("ws1", old.RedisSnapshot) || !rdb("ws1", young.RedisSnapshot) {
			t.Fatalf("ws1's Redis snapshots after the retention: old kept %v, young kept %v", rdb("ws1", old.RedisSnapshot), rdb("ws1", young.RedisSnapshot))
		}
	}
	u2 = usage()
	if d := u2.Databases; d.Branches != 1 || d.Snapshots != 1 {
		t.Fatalf("database usage after the retention: %+v", d)
	}
	if r := u2.Redis; rb != nil && (r.Branches != 1 || r.Snapshots != 1) {
		t.Fatalf("redis usage after the retention: %+v", r)
	}
	if c := u2.Checkpoints; c.Checkpoints != 3 || c.DatabaseSnapshots != 1 {
		t.Fatalf("checkpoint usage after the retention: %+v", c)
	}
	ws1, _ := w.Repos.Repo(ctx, "ws1")
	ws2, _ := w.Repos.Repo(ctx, "ws2")
	for _, c := range []struct {
		repo  *lockstep.Repo
		id    string
		empty bool
	}{{ws1, old.ID, true}, {ws2, gone.ID, true}, {ws1, young.ID, false}} {
		got, err := w.Store.Checkpoint(ctx, c.repo.ID, c.id)
		if err != nil {
			t.Fatal(err)
		}
		if (got.DBSnapshot == "") != c.empty || (rb != nil && (got.RedisSnapshot == "") != c.empty) {
			t.Fatalf("checkpoint %s after the retention: db %q redis %q, want cleared %v", c.id, got.DBSnapshot, got.RedisSnapshot, c.empty)
		}
	}
	// Restoring the old checkpoint restores the code and skips the
	// dropped database snapshot (no error: nothing is half restored).
	res2, err := w.Checkpoints.Restore(ctx, w.Agent, "ws1", old.ID, checkpoints.RestoreRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if !res2.Code.Restored || res2.Database.Restored || res2.Database.Skipped == "" {
		t.Fatalf("restore of a pruned checkpoint: %+v", res2)
	}
	// A second pass has nothing left to do.
	if res, err := w.Checkpoints.PruneSnapshots(ctx, 7*24*time.Hour); err != nil || res.Database+res.Redis != 0 {
		t.Fatalf("second prune: %+v, %v; want nothing", res, err)
	}
}
