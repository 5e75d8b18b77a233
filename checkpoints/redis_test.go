package checkpoints_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/auth"
	"github.com/lockstep-hq/lockstep/checkpoints"
	"github.com/lockstep-hq/lockstep/internal/servicetest"
	"github.com/lockstep-hq/lockstep/redisbranch"
	"github.com/lockstep-hq/lockstep/repositories"
	"github.com/redis/go-redis/v9"
)

// TestRedisBranchInCheckpoints: a workspace's Redis branch is created by
// the fork, snapshotted by a checkpoint, restored with the code on the
// same URL, readable by its owner only, and dropped (process gone, files
// removed) when the workspace is abandoned.
func TestRedisBranchInCheckpoints(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server not installed: Redis branching needs the real binary")
	}
	ctx := context.Background()
	w := servicetest.MustWorld(t, servicetest.Options{})
	dir := t.TempDir()
	base := 17000 + os.Getpid()%400*50
	rb, err := redisbranch.New(redisbranch.Config{Dir: dir, Secret: []byte("s"), PortMin: base, PortMax: base + 49})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rb.Close)
	w.Workspaces.SetRedis(rb)
	w.Checkpoints.SetRedis(rb)

	w.MustRepo(t, "app", map[string]string{"a.txt": "a\n"})
	if _, err := w.Workspaces.Fork(ctx, w.Agent, "app", "ws", ""); err != nil {
		t.Fatal(err)
	}
	w.Workspaces.Wait() // the fork's background creation
	if _, err := rb.Branch(ctx, "ws"); err != nil {
		t.Fatalf("the fork did not create the redis branch: %v", err)
	}
	r, err := w.Checkpoints.GetRedis(ctx, w.Agent, "ws")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Checkpoints.GetRedis(ctx, w.CI, "ws"); err != nil {
		t.Fatalf("CI reads the URL: %v", err)
	}
	other, _, err := auth.New(w.Store, nil).Create(ctx, auth.System, "other", lockstep.RoleAgent)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Checkpoints.GetRedis(ctx, other, "ws"); lockstep.ErrorCode(err) != lockstep.EFORBIDDEN {
		t.Fatalf("another agent reads the URL: %v, want forbidden", err)
	}
	if _, err := w.Checkpoints.GetRedis(ctx, w.Admin, "app"); lockstep.ErrorCode(err) != lockstep.EINVALID {
		t.Fatalf("GetRedis of a base: %v, want invalid_argument", err)
	}
	o, err := redis.ParseURL(r.URL)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(o)
	defer c.Close()
	if err := c.Set(ctx, "cart:1", "apple", 0).Err(); err != nil {
		t.Fatal(err)
	}

	ws, _ := w.Repos.Repo(ctx, "ws")
	tip, tree, _ := w.Repos.BranchTip(ctx, ws, "main")
	cp, err := w.Checkpoints.Create(ctx, w.Agent, "ws", checkpoints.CreateRequest{Label: "before"})
	if err != nil {
		t.Fatal(err)
	}
	if cp.RedisSnapshot == "" {
		t.Fatalf("checkpoint %+v has no redis snapshot", cp)
	}
	if got, err := w.Store.Checkpoint(ctx, ws.ID, cp.ID); err != nil || got.RedisSnapshot != cp.RedisSnapshot {
		t.Fatalf("stored checkpoint %+v (%v): redis snapshot not kept", got, err)
	}

	c.Set(ctx, "cart:1", "broken", 0)
	c.Set(ctx, "junk", "x", 0)
	broken, err := w.Repos.PushTar(ctx, w.Agent, "ws", servicetest.Tar(t, map[string]string{"a.txt": "broken\n"}),
		repositories.WriteOptions{Branch: "main", ExpectOID: tip})
	if err != nil {
		t.Fatal(err)
	}
	res, err := w.Checkpoints.Restore(ctx, w.Agent, "ws", cp.ID, checkpoints.RestoreRequest{ExpectOID: broken.Commit})
	if err != nil {
		t.Fatal(err)
	}
	if !res.RedisRestored || !res.Redis.Restored || res.Tree != tree {
		t.Fatalf("restore %+v: want code and redis restored", res)
	}
	// The same URL: keys back, the later one gone.
	c2 := redis.NewClient(o)
	defer c2.Close()
	if v, err := c2.Get(ctx, "cart:1").Result(); err != nil || v != "apple" {
		t.Fatalf("cart:1 = %q (%v) after restore, want apple", v, err)
	}
	if n, _ := c2.Exists(ctx, "junk").Result(); n != 0 {
		t.Fatal("junk survived the restore")
	}

	pidb, err := os.ReadFile(filepath.Join(dir, "branches", "ws", "redis.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(pidb)))
	if _, err := w.Workspaces.SetStatus(ctx, w.Agent, "ws", lockstep.StatusAbandoned, "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "branches", "ws")); !os.IsNotExist(err) {
		t.Fatalf("the abandoned workspace's redis files remain: %v", err)
	}
	if pid == 0 || syscall.Kill(pid, 0) == nil {
		t.Fatalf("redis-server %d still runs after the abandon", pid)
	}
	if _, err := w.Checkpoints.GetRedis(ctx, w.Agent, "ws"); lockstep.ErrorCode(err) != lockstep.ENOTFOUND {
		t.Fatalf("GetRedis of an abandoned workspace: %v, want not_found (never re-created)", err)
	}
}

// Without Redis branching the route says not_configured.
func TestRedisOff(t *testing.T) {
	ctx := context.Background()
	w := servicetest.MustWorld(t, servicetest.Options{})
	w.MustRepo(t, "app", map[string]string{"a.txt": "a\n"})
	if _, err := w.Workspaces.Fork(ctx, w.Agent, "app", "ws", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Checkpoints.GetRedis(ctx, w.Agent, "ws"); lockstep.ErrorCode(err) != lockstep.ENOTCONFIGURED {
		t.Fatalf("GetRedis without branching: %v, want not_configured", err)
	}
}
