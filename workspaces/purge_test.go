package workspaces_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/api"
	"github.com/lockstep-hq/lockstep/checkpoints"
	"github.com/lockstep-hq/lockstep/delivery"
	"github.com/lockstep-hq/lockstep/effects"
	"github.com/lockstep-hq/lockstep/internal/servicetest"
	"github.com/lockstep-hq/lockstep/redisbranch"
	"github.com/lockstep-hq/lockstep/telemetry"
)

// purgeEntry returns the "workspace.purge" oplog entry of ws.
func purgeEntry(t *testing.T, w *servicetest.World, ws string) *lockstep.OpEntry {
	t.Helper()
	ops, err := w.Store.ListOps(context.Background(), lockstep.OpFilter{Repo: ws, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ops {
		if e.Op == "workspace.purge" {
			return e
		}
	}
	t.Fatalf("no workspace.purge entry for %s: %+v", ws, ops)
	return nil
}

// TestPurgeDropsEverything (issue 28): purging a failed workspace drops
// its Redis branch (instance, data and RDB snapshot files), which a
// failed workspace keeps for review, and its checkpoint records;
// purging an active one discards its staged effects (in the abandon's
// entry) and drops its branch too. The purge entry says what happened to
// each branch. Before the fix a failed workspace's Redis branch outlived
// its purge, unrecorded.
func TestPurgeDropsEverything(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server not installed: Redis branching needs the real binary")
	}
	ctx := context.Background()
	w := servicetest.MustWorld(t, servicetest.Options{})
	dir := t.TempDir()
	port := 17000 + (os.Getpid()+7)%400*50
	rb, err := redisbranch.New(redisbranch.Config{Dir: dir, Secret: []byte("s"), PortMin: port, PortMax: port + 49})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rb.Close)
	w.Workspaces.SetRedis(rb)
	w.Checkpoints.SetRedis(rb)
	w.MustRepo(t, "app", map[string]string{"a.txt": "a\n"})

	// A failed workspace with a checkpoint (a Redis snapshot on disk).
	if _, err := w.Workspaces.Fork(ctx, w.Agent, "app", "ws-failed", ""); err != nil {
		t.Fatal(err)
	}
	w.Workspaces.Wait()
	if _, err := w.Checkpoints.Create(ctx, w.Agent, "ws-failed", checkpoints.CreateRequest{Label: "cp"}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Workspaces.SetStatus(ctx, w.CI, "ws-failed", lockstep.StatusFailed, "tests failed"); err != nil {
		t.Fatal(err)
	}
	if _, err := rb.Branch(ctx, "ws-failed"); err != nil {
		t.Fatalf("a failed workspace keeps its redis branch for review: %v", err)
	}
	if _, err := w.Workspaces.Purge(ctx, w.Admin, "ws-failed"); err != nil {
		t.Fatal(err)
	}
	if _, err := rb.Branch(ctx, "ws-failed"); lockstep.ErrorCode(err) != lockstep.ENOTFOUND {
		t.Fatalf("redis branch of a purged failed workspace: %v, want not_found", err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*", "ws-failed*")); len(left) != 0 {
		t.Fatalf("files of the purged workspace's redis branch remain: %v", left)
	}
	if cps, err := w.Checkpoints.List(ctx, "ws-failed", 10); err != nil || len(cps) != 0 {
		t.Fatalf("checkpoints after the purge: %v %v", cps, err)
	}
	e := purgeEntry(t, w, "ws-failed")
	if e.Details["redis_branch"] != "dropped" || e.Details["database_branch"] != "off" || e.Details["status"] != "failed" {
		t.Fatalf("purge entry details: %v", e.Details)
	}

	// An active workspace with a staged effect: discarded by the purge.
	allow, err := delivery.ParseAllowList("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	eff := effects.New(effects.Config{AllowHosts: allow}, w.Store, w.Repos, nil, telemetry.NewMetrics(), nil)
	if _, err := w.Workspaces.Fork(ctx, w.Agent, "app", "ws-live", ""); err != nil {
		t.Fatal(err)
	}
	w.Workspaces.Wait()
	ws, err := w.Repos.Repo(ctx, "ws-live")
	if err != nil {
		t.Fatal(err)
	}
	staged, err := eff.Stage(ctx, w.Agent, ws, api.EffectRequest{Method: "POST", URL: "http://127.0.0.1:9/charge"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Workspaces.Purge(ctx, w.Agent, "ws-live"); err != nil {
		t.Fatal(err)
	}
	got, err := eff.Get(ctx, w.Agent, "ws-live", staged.ID)
	if err != nil || got.Status != lockstep.EffectDiscarded {
		t.Fatalf("staged effect after the purge: %+v %v, want discarded", got, err)
	}
	if _, err := rb.Branch(ctx, "ws-live"); lockstep.ErrorCode(err) != lockstep.ENOTFOUND {
		t.Fatalf("redis branch of a purged active workspace: %v, want not_found", err)
	}
	if e := purgeEntry(t, w, "ws-live"); e.Details["redis_branch"] != "dropped" || e.Details["status"] != "abandoned" {
		t.Fatalf("purge entry details: %v", e.Details)
	}
	ops, err := w.Store.ListOps(ctx, lockstep.OpFilter{Repo: "ws-live", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	discard := false
	for _, e := range ops {
		discard = discard || e.Op == "effect.discard"
	}
	if !discard {
		t.Fatalf("no effect.discard entry for the purged workspace: %+v", ops)
	}
	if ok, err := w.Store.VerifyOps(ctx); err != nil || !ok.OK {
		t.Fatalf("oplog verify: %+v %v", ok, err)
	}
}
