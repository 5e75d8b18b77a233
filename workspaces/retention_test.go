package workspaces_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/auth"
	"github.com/lockstep-hq/lockstep/internal/servicetest"
	"github.com/lockstep-hq/lockstep/internal/testenv"
	"github.com/lockstep-hq/lockstep/repositories"
	"github.com/lockstep-hq/lockstep/workspaces"
)

// clock is a test clock the services read; Advance moves it.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

const day = 24 * time.Hour

func retentionWorld(t *testing.T, dbURL ...string) (*servicetest.World, *clock) {
	t.Helper()
	c := &clock{t: time.Now()}
	o := servicetest.Options{Now: c.Now, StoreNow: c.Now}
	if len(dbURL) > 0 {
		o.DB = dbURL[0]
	}
	w := servicetest.MustWorld(t, o)
	w.MustRepo(t, "app", map[string]string{"a.txt": "a\n"})
	return w, c
}

// forkAndPush forks app into ws and pushes content as its attempt.
func forkAndPush(t *testing.T, w *servicetest.World, ws, content string) string {
	t.Helper()
	ctx := context.Background()
	if _, err := w.Workspaces.Fork(ctx, w.Agent, "app", ws, ""); err != nil {
		t.Fatal(err)
	}
	res, err := w.Repos.PushTar(ctx, w.Agent, ws, servicetest.Tar(t, map[string]string{"a.txt": "a\n", ws + ".txt": content}),
		repositories.WriteOptions{Force: true})
	if err != nil {
		t.Fatal(err)
	}
	return res.Commit
}

func status(t *testing.T, w *servicetest.World, ws string) lockstep.Status {
	t.Helper()
	r, err := w.Repos.Repo(context.Background(), ws)
	if err != nil {
		t.Fatal(err)
	}
	return r.Status
}

func sweep(t *testing.T, w *servicetest.World) *workspaces.SweepResult {
	t.Helper()
	res, err := w.Workspaces.SweepRetention(context.Background(), auth.System)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Errors) > 0 || res.Skipped {
		t.Fatalf("sweep: %+v", res)
	}
	return res
}

// opOf returns ws's newest oplog entry named op.
func opOf(t *testing.T, w *servicetest.World, repo, op string) *lockstep.OpEntry {
	t.Helper()
	ops, err := w.Store.ListOps(context.Background(), lockstep.OpFilter{Repo: repo, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ops {
		if e.Op == op {
			return e
		}
	}
	t.Fatalf("no %s entry for %s", op, repo)
	return nil
}

// TestRetentionAbandonsIdleAndPurgesAfter (issue 28 item 2): with
// "abandon after 7d, delete after 30d, archive failed", an idle active
// workspace is abandoned by the system key with the policy as reason, a
// workspace whose ref moved recently is untouched, the abandoned one is
// purged 30 days later, and a failed one's attempt is kept on
// refs/archive/<ws>/1 in the base: its commit is still readable after
// the purge and an object GC with --prune now, while the purged
// abandoned workspace's commit is gone.
func TestRetentionAbandonsIdleAndPurgesAfter(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { testRetention(t, "") })
	t.Run("postgres", func(t *testing.T) { testRetention(t, testenv.MustPostgresDB(t)) })
}

func testRetention(t *testing.T, dbURL string) {
	ctx := context.Background()
	w, c := retentionWorld(t, dbURL) // "": SQLite
	idle := forkAndPush(t, w, "ws-idle", "idle\n")
	failed := forkAndPush(t, w, "ws-failed", "failed\n")
	if _, err := w.Workspaces.SetStatus(ctx, w.CI, "ws-failed", lockstep.StatusFailed, "tests failed"); err != nil {
		t.Fatal(err)
	}
	pol := lockstep.RetentionPolicy{AbandonAfter: 7 * day, DeleteAfter: 30 * day, ArchiveFailed: true}
	if _, err := w.Workspaces.SetRetention(ctx, w.Agent, "app", pol); lockstep.ErrorCode(err) != lockstep.EFORBIDDEN {
		t.Fatalf("agent sets retention: %v, want permission_denied", err)
	}
	got, err := w.Workspaces.SetRetention(ctx, w.Admin, "app", pol)
	if err != nil || got.AbandonAfter != pol.AbandonAfter || got.DeleteAfter != pol.DeleteAfter || !got.ArchiveFailed {
		t.Fatalf("set retention: %+v %v", got, err)
	}

	// Day 6: nothing is idle long enough.
	c.Advance(6 * day)
	if res := sweep(t, w); len(res.Abandoned)+len(res.Purged) != 0 {
		t.Fatalf("day 6 sweep: %+v", res)
	}
	// A workspace forked with activity on day 6 is untouched on day 8.
	forkAndPush(t, w, "ws-busy", "busy\n")
	c.Advance(2 * day)
	res := sweep(t, w)
	if len(res.Abandoned) != 1 || res.Abandoned[0] != "ws-idle" || len(res.Purged) != 0 {
		t.Fatalf("day 8 sweep: %+v, want ws-idle abandoned only", res)
	}
	if s := status(t, w, "ws-busy"); s != lockstep.StatusActive {
		t.Fatalf("recently active workspace: %s", s)
	}
	if e := opOf(t, w, "ws-idle", "workspace.abandoned"); e.KeyName != "system" || !strings.Contains(e.Details["reason"].(string), "abandon after 168h") {
		t.Fatalf("abandon entry: %s %v", e.KeyName, e.Details)
	}

	// Day 30: ws-failed (failed on day 0) is purged, its attempt
	// archived; ws-idle (abandoned on day 8) is not yet; day 38 it is.
	c.Advance(22 * day)
	res = sweep(t, w)
	if len(res.Purged) != 1 || res.Purged[0] != "ws-failed" || res.Archived != 1 || len(res.Abandoned) != 1 || res.Abandoned[0] != "ws-busy" {
		t.Fatalf("day 30 sweep: %+v, want ws-failed purged with 1 archive ref, ws-busy (idle since day 6) abandoned", res)
	}
	c.Advance(8 * day)
	if res = sweep(t, w); len(res.Purged) != 1 || res.Purged[0] != "ws-idle" {
		t.Fatalf("day 38 sweep: %+v, want ws-idle purged", res)
	}
	e := opOf(t, w, "ws-failed", "workspace.purge")
	if e.KeyName != "system" || !strings.Contains(e.Details["reason"].(string), "delete after 720h") {
		t.Fatalf("purge entry: %s %v", e.KeyName, e.Details)
	}
	refs, err := w.Repos.Refs(ctx, "ws-failed")
	if err != nil || len(refs) != 0 {
		t.Fatalf("refs of the purged workspace: %v %v", refs, err)
	}
	ref, err := w.Repos.Refs(ctx, "app")
	if err != nil {
		t.Fatal(err)
	}
	var archived string
	for _, r := range ref {
		if r.Name == workspaces.ArchiveRef("ws-failed", 1) {
			archived = r.OID
		}
	}
	if archived != failed {
		t.Fatalf("archive ref of ws-failed: %q, want %s (refs %v)", archived, failed, ref)
	}
	gcr, err := w.Repos.GC(ctx, w.Admin, repositories.GCOptions{Retention: 0})
	if err != nil {
		t.Fatal(err)
	}
	// Read the network's objects with git itself (the service caches).
	app, err := w.Repos.Repo(ctx, "app")
	if err != nil {
		t.Fatal(err)
	}
	gitDir := filepath.Join(w.Dir, "networks", app.Network+".git")
	has := func(oid string) bool {
		return exec.Command("git", "--git-dir", gitDir, "cat-file", "-e", oid+"^{commit}").Run() == nil
	}
	if !has(failed) {
		t.Fatalf("archived commit %s lost after purge and gc --prune now (gc %+v)", failed, gcr)
	}
	if has(idle) || gcr.Objects == 0 {
		t.Fatalf("the purged abandoned workspace's commit survived gc --prune now (gc %+v): the test proves nothing", gcr)
	}
	// A second sweep finds nothing more to do.
	if res := sweep(t, w); len(res.Abandoned)+len(res.Purged)+res.Archived != 0 {
		t.Fatalf("second sweep: %+v", res)
	}
}

// TestRetentionOffDoesNothing: without a policy (the default), or after
// it is set back to zero, a sweep leaves idle and failed workspaces alone.
func TestRetentionOffDoesNothing(t *testing.T) {
	ctx := context.Background()
	w, c := retentionWorld(t)
	forkAndPush(t, w, "ws-idle", "idle\n")
	forkAndPush(t, w, "ws-failed", "failed\n")
	if _, err := w.Workspaces.SetStatus(ctx, w.CI, "ws-failed", lockstep.StatusFailed, "tests failed"); err != nil {
		t.Fatal(err)
	}
	c.Advance(400 * day)
	if res := sweep(t, w); len(res.Abandoned)+len(res.Purged) != 0 {
		t.Fatalf("sweep without a policy: %+v", res)
	}
	if _, err := w.Workspaces.SetRetention(ctx, w.Admin, "app", lockstep.RetentionPolicy{AbandonAfter: day, DeleteAfter: day}); err != nil {
		t.Fatal(err)
	}
	if p, err := w.Workspaces.SetRetention(ctx, w.Admin, "app", lockstep.RetentionPolicy{}); err != nil || p != (lockstep.RetentionPolicy{}) {
		t.Fatalf("policy turned off: %+v %v", p, err)
	}
	if res := sweep(t, w); len(res.Abandoned)+len(res.Purged) != 0 {
		t.Fatalf("sweep with the policy off: %+v", res)
	}
	if status(t, w, "ws-idle") != lockstep.StatusActive || status(t, w, "ws-failed") != lockstep.StatusFailed {
		t.Fatal("statuses changed with retention off")
	}
	if _, err := w.Workspaces.SetRetention(ctx, w.Admin, "ws-idle", lockstep.RetentionPolicy{AbandonAfter: day}); lockstep.ErrorCode(err) != lockstep.EINVALID {
		t.Fatalf("retention on a workspace: %v, want invalid_argument", err)
	}
}

// TestRetentionAbandonsEmptyWorkspace: a workspace of an empty base has
// no ref; idle, it is abandoned all the same (the sweeper took "no ref"
// for "purged already" and skipped it).
func TestRetentionAbandonsEmptyWorkspace(t *testing.T) {
	ctx := context.Background()
	w, c := retentionWorld(t)
	if _, err := w.Repos.CreateRepo(ctx, w.Admin, "empty", "main"); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Workspaces.Fork(ctx, w.Agent, "empty", "ws-empty", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Workspaces.SetRetention(ctx, w.Admin, "empty", lockstep.RetentionPolicy{AbandonAfter: day}); err != nil {
		t.Fatal(err)
	}
	c.Advance(2 * day)
	if res := sweep(t, w); len(res.Abandoned) != 1 || res.Abandoned[0] != "ws-empty" {
		t.Fatalf("sweep: %+v, want ws-empty abandoned", res)
	}
}

// TestRetentionOneReplicaAtATime: while another replica holds the
// "retention" lease, a sweep does nothing (Skipped); once it is free the
// sweep runs.
func TestRetentionOneReplicaAtATime(t *testing.T) {
	ctx := context.Background()
	w, c := retentionWorld(t)
	forkAndPush(t, w, "ws-idle", "idle\n")
	if _, err := w.Workspaces.SetRetention(ctx, w.Admin, "app", lockstep.RetentionPolicy{AbandonAfter: day}); err != nil {
		t.Fatal(err)
	}
	c.Advance(2 * day)
	if ok, err := w.Store.ClaimLease(ctx, workspaces.RetentionLease, "other-replica", time.Hour); err != nil || !ok {
		t.Fatalf("claim: %v %v", ok, err)
	}
	res, err := w.Workspaces.SweepRetention(ctx, auth.System)
	if err != nil || !res.Skipped || len(res.Abandoned) != 0 || status(t, w, "ws-idle") != lockstep.StatusActive {
		t.Fatalf("sweep while another replica holds the lease: %+v %v", res, err)
	}
	if err := w.Store.ReleaseLease(ctx, workspaces.RetentionLease, "other-replica"); err != nil {
		t.Fatal(err)
	}
	if res := sweep(t, w); len(res.Abandoned) != 1 {
		t.Fatalf("sweep after the lease was released: %+v", res)
	}
}
