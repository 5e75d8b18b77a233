package web_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/api"
	"github.com/lockstep-hq/lockstep/auth"
	"github.com/lockstep-hq/lockstep/client"
	"github.com/lockstep-hq/lockstep/gate"
	"github.com/lockstep-hq/lockstep/gitstore"
	"github.com/lockstep-hq/lockstep/repositories"
	"github.com/lockstep-hq/lockstep/sqlstore"
	"github.com/lockstep-hq/lockstep/telemetry"
	"github.com/lockstep-hq/lockstep/web"
	"github.com/lockstep-hq/lockstep/workspaces"
)

// batchFixture: base app with a.txt and b.txt; task t1 has ws1 (edits
// b.txt: clean), ws2 (edits a.txt's line 2, which main edits too:
// conflicted) and ws3 (no change: up to date); task t2 has ws4.
type batchFixture struct {
	url                 string
	admin, agent, t1Key string
}

func newBatchFixture(t *testing.T, max int) *batchFixture {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	db, err := sqlstore.Open(ctx, filepath.Join(dir, "m.db"), sqlstore.Options{Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	keys := auth.New(db, nil)
	admin, adminSecret, _ := keys.Create(ctx, auth.System, "admin", lockstep.RoleAdmin)
	_, agentSecret, _ := keys.Create(ctx, auth.System, "agent", lockstep.RoleAgent)
	m := telemetry.NewMetrics()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	repos := repositories.New(repositories.Config{Objects: gitstore.Local{}, DataDir: dir, PreflightBatchMax: max}, db, logger, m, nil)
	t.Cleanup(func() { repos.Close() })
	wss := workspaces.New(db, repos, nil, nil, m, nil)
	s := &web.Server{Store: db, Keys: keys, Metrics: m, Repos: repos, Workspaces: wss, Logger: logger, Gate: gate.New(gate.Config{}, db, repos, logger, m, nil)}
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)

	edit := func(repo, path, content string) {
		t.Helper()
		if _, err := repos.EditFiles(ctx, admin, repo, []repositories.Edit{{Path: path, Content: []byte(content)}}, repositories.WriteOptions{Branch: "main", Force: true}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := repos.CreateRepo(ctx, admin, "app", "main"); err != nil {
		t.Fatal(err)
	}
	_, t1Secret, err := keys.Mint(ctx, admin, auth.MintRequest{Name: "t1", Role: lockstep.RoleAgent, Scope: &lockstep.KeyScope{Base: "app", Task: "t1"}})
	if err != nil {
		t.Fatal(err)
	}
	edit("app", "a.txt", "1\n2\n3\n")
	edit("app", "b.txt", "x\n")
	for _, w := range [][2]string{{"ws1", "t1"}, {"ws2", "t1"}, {"ws3", "t1"}, {"ws4", "t2"}} {
		if _, err := wss.Fork(ctx, admin, "app", w[0], w[1]); err != nil {
			t.Fatal(err)
		}
	}
	edit("ws1", "b.txt", "y\n")
	edit("ws2", "a.txt", "1\nws2\n3\n")
	edit("ws4", "b.txt", "z\n")
	edit("app", "a.txt", "1\nmain\n3\n")
	return &batchFixture{url: srv.URL, admin: adminSecret, agent: agentSecret, t1Key: t1Secret}
}

// single is what N single preflights answer, as batch items.
func single(t *testing.T, c *client.Client, names []string) []api.PreflightBatchItem {
	t.Helper()
	var out []api.PreflightBatchItem
	for _, n := range names {
		it := api.PreflightBatchItem{Workspace: n, Theirs: n + ":main"}
		res, err := c.MergeBranches(context.Background(), "app", client.MergeRequest{Ours: "main", Theirs: n + ":main", Preflight: true, Deep: true})
		if err != nil {
			var e *client.Error
			if !errors.As(err, &e) {
				t.Fatal(err)
			}
			it.Error = &api.ErrorBody{Code: e.Code}
		} else {
			res.DurationMS = 0
			it.Result = res
		}
		out = append(out, it)
	}
	return out
}

func normalize(items []api.PreflightBatchItem) []api.PreflightBatchItem {
	out := append([]api.PreflightBatchItem(nil), items...)
	for i := range out {
		if out[i].Result != nil {
			r := *out[i].Result
			r.DurationMS = 0
			out[i].Result = &r
		}
		if out[i].Error != nil {
			out[i].Error = &api.ErrorBody{Code: out[i].Error.Code}
			out[i].Theirs = out[i].Workspace + ":main" // unknown workspace: no branch to name
		}
	}
	return out
}

// TestPreflightBatchMatchesSingles: a batch (listed and by task) answers
// exactly what N single preflights answer: clean, conflicted, up to
// date, and an unknown workspace's not_found, each in its own item.
func TestPreflightBatchMatchesSingles(t *testing.T) {
	f := newBatchFixture(t, 10)
	ctx := context.Background()
	c := client.New(f.url, f.agent)
	names := []string{"ws1", "ws2", "ws3", "nope"}
	want := single(t, c, names)
	if want[0].Result == nil || !want[0].Result.Clean || want[1].Result == nil || want[1].Result.Clean || len(want[1].Result.Conflicts) != 1 ||
		want[2].Result == nil || !want[2].Result.Clean || want[3].Error == nil || want[3].Error.Code != lockstep.ENOTFOUND {
		t.Fatalf("fixture: singles answer %+v", want)
	}
	got, err := c.PreflightBatch(ctx, "app", api.PreflightBatchRequest{Workspaces: names, Deep: true})
	if err != nil {
		t.Fatal(err)
	}
	if got.Ours != "main" || got.OursOID != want[0].Result.Ours {
		t.Fatalf("batch ours %s %s, want main %s", got.Ours, got.OursOID, want[0].Result.Ours)
	}
	if g := normalize(got.Results); !reflect.DeepEqual(g, want) {
		t.Fatalf("batch:\n%+v\nsingles:\n%+v", g, want)
	}
	// By task: the task's workspaces by name, the same answers.
	got, err = c.PreflightBatch(ctx, "app", api.PreflightBatchRequest{Task: "t1", Deep: true})
	if err != nil {
		t.Fatal(err)
	}
	if g := normalize(got.Results); !reflect.DeepEqual(g, want[:3]) {
		t.Fatalf("batch of task t1:\n%+v\nsingles:\n%+v", g, want[:3])
	}
	// Each preflight, shallow too.
	got, err = c.PreflightBatch(ctx, "app", api.PreflightBatchRequest{Workspaces: []string{"ws2", "ws1"}})
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range []string{"ws2", "ws1"} {
		res, err := c.MergeBranches(ctx, "app", client.MergeRequest{Ours: "main", Theirs: n + ":main", Preflight: true})
		if err != nil {
			t.Fatal(err)
		}
		res.DurationMS = 0
		if g := normalize(got.Results[i : i+1])[0]; !reflect.DeepEqual(g.Result, res) {
			t.Fatalf("shallow %s: batch %+v, single %+v", n, g.Result, res)
		}
	}
}

// TestPreflightBatchAuthorization: a key scoped to task t1 gets its
// task's workspaces and a forbidden item for another task's; without a
// key, 401.
func TestPreflightBatchAuthorization(t *testing.T) {
	f := newBatchFixture(t, 10)
	ctx := context.Background()
	got, err := client.New(f.url, f.t1Key).PreflightBatch(ctx, "app", api.PreflightBatchRequest{Workspaces: []string{"ws1", "ws4"}})
	if err != nil {
		t.Fatal(err)
	}
	if r := got.Results; len(r) != 2 || r[0].Result == nil || !r[0].Result.Clean || r[1].Result != nil || r[1].Error == nil || r[1].Error.Code != lockstep.EFORBIDDEN {
		t.Fatalf("task-scoped key: %+v", got.Results)
	}
	// The admin sees ws4.
	got, err = client.New(f.url, f.admin).PreflightBatch(ctx, "app", api.PreflightBatchRequest{Workspaces: []string{"ws4"}})
	if err != nil || got.Results[0].Result == nil || !got.Results[0].Result.Clean {
		t.Fatalf("admin: %+v %v", got, err)
	}
	_, err = client.New(f.url, "").PreflightBatch(ctx, "app", api.PreflightBatchRequest{Workspaces: []string{"ws1"}})
	wantBatchCode(t, "no key", err, lockstep.EUNAUTH, 401)
}

// TestPreflightBatchLimit: more workspaces than PreflightBatchMax (listed,
// or of a task) is 400 invalid_argument; so are neither or both of
// workspaces and task.
func TestPreflightBatchLimit(t *testing.T) {
	f := newBatchFixture(t, 2)
	ctx := context.Background()
	c := client.New(f.url, f.agent)
	if got, err := c.PreflightBatch(ctx, "app", api.PreflightBatchRequest{Workspaces: []string{"ws1", "ws2"}}); err != nil || len(got.Results) != 2 {
		t.Fatalf("at the limit: %+v %v", got, err)
	}
	_, err := c.PreflightBatch(ctx, "app", api.PreflightBatchRequest{Workspaces: []string{"ws1", "ws2", "ws3"}})
	wantBatchCode(t, "3 listed, max 2", err, lockstep.EINVALID, 400)
	_, err = c.PreflightBatch(ctx, "app", api.PreflightBatchRequest{Task: "t1"})
	wantBatchCode(t, "task of 3, max 2", err, lockstep.EINVALID, 400)
	_, err = c.PreflightBatch(ctx, "app", api.PreflightBatchRequest{})
	wantBatchCode(t, "neither", err, lockstep.EINVALID, 400)
	_, err = c.PreflightBatch(ctx, "app", api.PreflightBatchRequest{Task: "t2", Workspaces: []string{"ws4"}})
	wantBatchCode(t, "both", err, lockstep.EINVALID, 400)
}

func wantBatchCode(t *testing.T, what string, err error, code string, status int) {
	t.Helper()
	var e *client.Error
	if !errors.As(err, &e) || e.Code != code || e.Status != status {
		t.Fatalf("%s: %v, want %d %s", what, err, status, code)
	}
}

// TestScopedKeyOtherRepoRevisions: a key scoped to task t1 may not reach
// another task's workspace through a repo:branch revision of a repository
// it may use: the single preflight (theirs), a tree and a blob read of its
// base (rev) are refused like the batch's item, and still work for its
// own task's workspace and for an unscoped key.
func TestScopedKeyOtherRepoRevisions(t *testing.T) {
	f := newBatchFixture(t, 10)
	ctx := context.Background()
	t1 := client.New(f.url, f.t1Key)
	_, err := t1.MergeBranches(ctx, "app", client.MergeRequest{Ours: "main", Theirs: "ws4:main", Preflight: true})
	wantBatchCode(t, "preflight of ws4:main", err, lockstep.EFORBIDDEN, 403)
	_, err = t1.Tree(ctx, "app", "ws4:main", "")
	wantBatchCode(t, "tree of ws4:main", err, lockstep.EFORBIDDEN, 403)
	_, err = t1.Blob(ctx, "app", "ws4:main", "b.txt", io.Discard)
	wantBatchCode(t, "blob of ws4:main", err, lockstep.EFORBIDDEN, 403)
	if _, err := t1.MergeBranches(ctx, "app", client.MergeRequest{Ours: "main", Theirs: "ws1:main", Preflight: true}); err != nil {
		t.Fatalf("own task's ws1:main: %v", err)
	}
	if _, err := t1.Tree(ctx, "app", "ws1:main", ""); err != nil {
		t.Fatalf("tree of own task's ws1:main: %v", err)
	}
	for _, key := range []string{f.agent, f.admin} {
		if _, err := client.New(f.url, key).MergeBranches(ctx, "app", client.MergeRequest{Ours: "main", Theirs: "ws4:main", Preflight: true}); err != nil {
			t.Fatalf("unscoped key: %v", err)
		}
	}
}
