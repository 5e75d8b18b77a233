package client_test

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/api"
	"github.com/lockstep-hq/lockstep/client"
)

// wantCode fails unless err is a *client.Error with code.
func wantCode(t *testing.T, what string, err error, code string) {
	t.Helper()
	var e *client.Error
	if !errors.As(err, &e) {
		t.Fatalf("%s: error %v (%T), want a *client.Error %s", what, err, err, code)
	}
	if e.Code != code || lockstep.ErrorCode(err) != code {
		t.Fatalf("%s: code %q (lockstep.ErrorCode %q), want %q: %v", what, e.Code, lockstep.ErrorCode(err), code, err)
	}
	if e.Status < 400 || e.Message == "" {
		t.Fatalf("%s: status %d message %q", what, e.Status, e.Message)
	}
}

func must[T any](t *testing.T, what string) func(T, error) T {
	t.Helper()
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return v
	}
}

// sameWire fetches path raw and checks that decoding it into T and
// encoding again gives the server's bytes: the api type is the wire
// format, field for field.
func sameWire[T any](t *testing.T, c *client.Client, path string) {
	t.Helper()
	raw, err := c.Do(context.Background(), http.MethodGet, path, nil)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	var v T
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("GET %s: decode into %T: %v", path, v, err)
	}
	again, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(bytes.TrimSpace(raw), again) {
		t.Errorf("GET %s: %T does not match the wire:\nserver: %s\nagain:  %s", path, v, raw, again)
	}
}

func tarOf(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for name, body := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(body))
	}
	tw.Close()
	return buf.Bytes()
}

// TestMethods calls every method once with success and once with a
// typical error, against a real server.
func TestMethods(t *testing.T) {
	ctx := context.Background()
	s := mustServer(t)
	admin := mustClient(t, s, s.Admin)
	agent := mustClient(t, s, s.Agent)
	ci := mustClient(t, s, s.CI)
	nobody := mustClient(t, s, "lsk_nobody_000000000000000000000000")

	// health, metrics, document
	if h := must[*api.Health](t, "Health")(admin.Health(ctx)); h.Status != "ok" {
		t.Fatalf("health %+v", h)
	}
	if r := must[*api.Readiness](t, "Ready")(admin.Ready(ctx)); !r.Ready || r.Checks["store"] != "ok" {
		t.Fatalf("ready %+v", r)
	}
	if m := must[[]byte](t, "Metrics")(admin.Metrics(ctx)); !bytes.Contains(m, []byte("# TYPE")) {
		t.Fatalf("metrics: %.200s", m)
	}
	if d := must[[]byte](t, "OpenAPI")(admin.OpenAPI(ctx)); !bytes.Contains(d, []byte(`"openapi"`)) {
		t.Fatalf("openapi: %.200s", d)
	}
	_, err := (&client.Client{BaseURL: s.URL + "/nothing", HTTP: http.DefaultClient, Retry: client.RetryPolicy{MaxAttempts: 1}}).Health(ctx)
	wantCode(t, "Health of a wrong URL", err, lockstep.ENOTFOUND)

	// keys
	k := must[*client.CreatedKey](t, "CreateKey")(admin.CreateKey(ctx, "bot", lockstep.RoleAgent))
	if k.Secret == "" || k.Role != lockstep.RoleAgent {
		t.Fatalf("created %+v", k)
	}
	_, err = admin.CreateKey(ctx, "bad", "emperor")
	wantCode(t, "CreateKey with a bad role", err, lockstep.EINVALID)
	_, err = agent.CreateKey(ctx, "x", lockstep.RoleAgent)
	wantCode(t, "CreateKey as an agent", err, lockstep.EFORBIDDEN)
	if ks := must[[]*client.Key](t, "Keys")(admin.Keys(ctx)); len(ks) != 4 {
		t.Fatalf("%d keys, want 4", len(ks))
	}
	_, err = agent.Keys(ctx)
	wantCode(t, "Keys as an agent", err, lockstep.EFORBIDDEN)
	sameWire[api.KeyList](t, admin, "/api/v1/keys")
	if err := admin.RevokeKey(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	wantCode(t, "RevokeKey unknown", admin.RevokeKey(ctx, "nope"), lockstep.ENOTFOUND)
	if me := must[*client.Key](t, "Whoami")(agent.Whoami(ctx)); me.Name != "agent" || me.Role != lockstep.RoleAgent {
		t.Fatalf("whoami %+v", me)
	}
	_, err = nobody.Whoami(ctx)
	wantCode(t, "Whoami with an unknown key", err, lockstep.EUNAUTH)
	sameWire[api.Key](t, admin, "/api/v1/whoami")

	// repositories
	base := must[*client.Repo](t, "CreateRepo")(admin.CreateRepo(ctx, "base", "main"))
	if base.Name != "base" || base.DefaultBranch != "main" || base.Head != "" {
		t.Fatalf("created %+v", base)
	}
	_, err = admin.CreateRepo(ctx, "base", "main")
	wantCode(t, "CreateRepo twice", err, lockstep.ECONFLICT)
	first := must[*client.PushResult](t, "PushTar")(admin.PushTar(ctx, "base", bytes.NewReader(tarOf(t, map[string]string{"a.txt": "one\n", "d/b.txt": "two\n"})),
		client.WriteOptions{ExpectOID: api.ZeroOID, Message: "first"}))
	if !first.Changed || first.Branch != "main" {
		t.Fatalf("push %+v", first)
	}
	_, err = admin.PushTar(ctx, "base", bytes.NewReader(tarOf(t, map[string]string{"a.txt": "x"})), client.WriteOptions{ExpectOID: api.ZeroOID})
	wantCode(t, "PushTar with a stale expect", err, lockstep.EREFCONFLICT)
	if r := must[*client.Repo](t, "Repo")(admin.Repo(ctx, "base")); r.Head != first.Commit {
		t.Fatalf("repo head %s, want %s", r.Head, first.Commit)
	}
	_, err = admin.Repo(ctx, "nope")
	wantCode(t, "Repo unknown", err, lockstep.ENOTFOUND)
	sameWire[api.RepoInfo](t, admin, "/api/v1/repos/base")
	if rs := must[[]*api.Repo](t, "Repos")(admin.Repos(ctx)); len(rs) != 1 {
		t.Fatalf("repos %+v", rs)
	}
	sameWire[api.RepoList](t, admin, "/api/v1/repos")
	if main := must[string](t, "Ref")(admin.Ref(ctx, "base", "main")); main != first.Commit {
		t.Fatalf("ref %s", main)
	}
	_, err = admin.Refs(ctx, "nope")
	wantCode(t, "Refs unknown", err, lockstep.ENOTFOUND)
	sameWire[api.RefList](t, admin, "/api/v1/repos/base/refs")

	// workspaces
	ws := must[*client.ForkResult](t, "ForkTask")(agent.ForkTask(ctx, "base", "ws1", "task-1"))
	if ws.ForkOf != "base" || ws.BaseCommit != first.Commit || ws.Task != "task-1" {
		t.Fatalf("fork %+v", ws)
	}
	_, err = agent.Fork(ctx, "base", "ws1")
	wantCode(t, "Fork twice", err, lockstep.ECONFLICT)
	if rs := must[[]*api.Repo](t, "RepoList")(admin.RepoList(ctx, api.RepoQuery{ForkOf: "base"})); len(rs) != 1 || rs[0].Name != "ws1" {
		t.Fatalf("repo list fork_of %+v", rs)
	}
	page, next, err := admin.WorkspacePage(ctx, "base", api.WorkspaceQuery{Limit: 10})
	if err != nil || len(page) != 1 || next != "" || page[0].Tip != first.Commit {
		t.Fatalf("workspaces %+v %q %v", page, next, err)
	}
	_, _, err = admin.WorkspacePage(ctx, "nope", api.WorkspaceQuery{})
	wantCode(t, "WorkspacePage unknown", err, lockstep.ENOTFOUND)
	sameWire[api.WorkspacePage](t, admin, "/api/v1/repos/base/workspaces")

	// edits, rollback, reads
	ed := must[*client.PushResult](t, "EditFiles")(agent.EditFiles(ctx, "ws1", []client.Edit{client.WriteFile("a.txt", "one\nmore\n"), client.DeleteFile("d")},
		client.WriteOptions{ExpectOID: first.Commit, Message: "edit"}))
	if !ed.Changed || ed.Parent != first.Commit {
		t.Fatalf("edit %+v", ed)
	}
	_, err = agent.EditFiles(ctx, "ws1", []client.Edit{client.WriteFile("a.txt", "z")}, client.WriteOptions{ExpectOID: first.Commit})
	wantCode(t, "EditFiles with a stale expect", err, lockstep.EREFCONFLICT)
	_, err = agent.EditFiles(ctx, "ws1", []client.Edit{{Op: "chmod", Path: "a.txt"}}, client.WriteOptions{Force: true})
	wantCode(t, "EditFiles with a bad op", err, lockstep.EINVALID)
	if as := must[[]api.Attempt](t, "Attempts")(admin.Attempts(ctx, "ws1", 0)); len(as) != 1 || as[0].Commit != ed.Commit {
		t.Fatalf("attempts %+v", as)
	}
	_, err = admin.Attempts(ctx, "nope", 0)
	wantCode(t, "Attempts unknown", err, lockstep.ENOTFOUND)
	sameWire[api.AttemptList](t, admin, "/api/v1/repos/ws1/attempts")

	commits, _, err := admin.Log(ctx, "ws1", "", 0, "")
	if err != nil || len(commits) != 2 || commits[0].Commit != ed.Commit {
		t.Fatalf("log %+v %v", commits, err)
	}
	_, _, err = admin.Log(ctx, "ws1", "no-such-branch", 0, "")
	wantCode(t, "Log of an unknown ref", err, lockstep.ENOTFOUND)
	sameWire[api.CommitPage](t, admin, "/api/v1/repos/ws1/commits")
	if cm := must[*client.Commit](t, "Commit")(admin.Commit(ctx, "ws1", ed.Commit)); strings.TrimSpace(cm.Message) != "edit" || cm.Parents[0] != first.Commit {
		t.Fatalf("commit %+v", cm)
	}
	_, err = admin.Commit(ctx, "ws1", strings.Repeat("1", 40))
	wantCode(t, "Commit unknown", err, lockstep.ENOTFOUND)
	sameWire[api.Commit](t, admin, "/api/v1/repos/ws1/commits/"+ed.Commit)
	if es := must[[]api.TreeEntry](t, "Tree")(admin.Tree(ctx, "base", "main", "d")); len(es) != 1 || es[0].Name != "b.txt" || es[0].Path != "d/b.txt" {
		t.Fatalf("tree %+v", es)
	}
	_, err = admin.Tree(ctx, "base", "main", "nope")
	wantCode(t, "Tree of a missing path", err, lockstep.ENOTFOUND)
	sameWire[api.TreeList](t, admin, "/api/v1/repos/base/tree/main")
	var blob bytes.Buffer
	bi := must[*api.BlobInfo](t, "Blob")(admin.Blob(ctx, "base", "main", "d/b.txt", &blob))
	if blob.String() != "two\n" || bi.Size != 4 || bi.Mode != "100644" || len(bi.Hash) != 40 {
		t.Fatalf("blob %q %+v", blob.String(), bi)
	}
	_, err = admin.Blob(ctx, "base", "main", "nope.txt", &blob)
	wantCode(t, "Blob of a missing path", err, lockstep.ENOTFOUND)
	var tarball bytes.Buffer
	if c := must[string](t, "Archive")(admin.Archive(ctx, "ws1", "main", &tarball)); c != ed.Commit || tarball.Len() == 0 {
		t.Fatalf("archive %s, %d bytes", c, tarball.Len())
	}
	_, err = admin.Archive(ctx, "ws1", "nope", &tarball)
	wantCode(t, "Archive of an unknown rev", err, lockstep.ENOTFOUND)
	cmp := must[*api.CompareResult](t, "Compare")(admin.Compare(ctx, "ws1", first.Commit, ed.Commit))
	if len(cmp.Files) != 2 || cmp.Added != 1 {
		t.Fatalf("compare %+v", cmp)
	}
	_, err = admin.Compare(ctx, "ws1", "nope", ed.Commit)
	wantCode(t, "Compare with an unknown base", err, lockstep.ENOTFOUND)
	sameWire[api.CompareResult](t, admin, "/api/v1/repos/ws1/compare?base="+first.Commit+"&head="+ed.Commit)

	// merges and sync
	pre := must[*api.MergeResponse](t, "MergeBranches")(admin.MergeBranches(ctx, "base", client.MergeRequest{Ours: "main", Theirs: "ws1:main", Preflight: true}))
	if !pre.Clean || !pre.FastForward {
		t.Fatalf("preflight %+v", pre)
	}
	_, err = admin.MergeBranches(ctx, "base", client.MergeRequest{Ours: "main", Theirs: "nope:main", Preflight: true})
	wantCode(t, "MergeBranches with an unknown side", err, lockstep.ENOTFOUND)
	raw := must[json.RawMessage](t, "Merge")(admin.Merge(ctx, "base", client.MergeRequest{Ours: "main", Theirs: "ws1:main", Preflight: true}))
	var preRaw api.MergeResponse
	if err := json.Unmarshal(raw, &preRaw); err != nil || preRaw.Tree != pre.Tree {
		t.Fatalf("raw merge %s: %v", raw, err)
	}
	if sy := must[*api.MergeResponse](t, "Sync")(agent.Sync(ctx, "ws1", api.SyncRequest{})); !sy.UpToDate {
		t.Fatalf("sync %+v", sy)
	}
	_, err = agent.Sync(ctx, "ws1", api.SyncRequest{ExpectOID: first.Commit})
	wantCode(t, "Sync with a stale expect", err, lockstep.EREFCONFLICT)

	// gate, checks, promote
	clean := true
	pol := must[*api.Policy](t, "SetGate")(admin.SetGate(ctx, "base", api.Policy{RequiredChecks: []string{"test"}, RequireCleanMerge: &clean, PromoteMode: "merge"}))
	if pol.Branch != "main" || len(pol.RequiredChecks) != 1 {
		t.Fatalf("policy %+v", pol)
	}
	_, err = admin.SetGate(ctx, "base", api.Policy{PromoteMode: "yolo"})
	wantCode(t, "SetGate with a bad mode", err, lockstep.EINVALID)
	if g := must[*api.Policy](t, "Gate")(admin.Gate(ctx, "base", "")); g.PromoteMode != "merge" {
		t.Fatalf("gate %+v", g)
	}
	_, err = admin.Gate(ctx, "nope", "")
	wantCode(t, "Gate of an unknown repo", err, lockstep.ENOTFOUND)
	sameWire[api.Policy](t, admin, "/api/v1/repos/base/gate")
	ev := must[*api.Evaluation](t, "EvaluateGate")(admin.EvaluateGate(ctx, "ws1", ""))
	if ev.Passed || len(ev.Reasons) == 0 || ev.Commit != ed.Commit {
		t.Fatalf("evaluation before the check %+v", ev)
	}
	_, err = admin.EvaluateGate(ctx, "base", "")
	wantCode(t, "EvaluateGate of a base", err, lockstep.EINVALID)
	sameWire[api.Evaluation](t, admin, "/api/v1/repos/ws1/gate/evaluate")
	_, err = agent.Promote(ctx, "ws1", api.PromoteRequest{})
	wantCode(t, "Promote before the check", err, lockstep.EGATEFAILED)
	if _, ok := lockstep.ErrorDetails(err)["reasons"]; !ok {
		t.Fatalf("gate_failed without reasons: %+v", lockstep.ErrorDetails(err))
	}
	chk := must[*api.Check](t, "PostCheck")(ci.PostCheck(ctx, "ws1", ed.Commit, api.CheckRequest{Name: "test", Status: lockstep.CheckSuccess, Summary: "ok"}))
	if chk.Name != "test" || chk.KeyName != "ci" {
		t.Fatalf("check %+v", chk)
	}
	_, err = ci.PostCheck(ctx, "ws1", ed.Commit, api.CheckRequest{Name: "test", Status: "great"})
	wantCode(t, "PostCheck with a bad status", err, lockstep.EINVALID)
	if set := must[*api.CheckSet](t, "Checks")(admin.Checks(ctx, "ws1", ed.Commit)); len(set.Latest) != 1 || set.Latest[0].Status != lockstep.CheckSuccess {
		t.Fatalf("checks %+v", set)
	}
	_, err = admin.Checks(ctx, "nope", ed.Commit)
	wantCode(t, "Checks of an unknown repo", err, lockstep.ENOTFOUND)
	sameWire[api.CheckSet](t, admin, "/api/v1/repos/ws1/commits/"+ed.Commit+"/checks")

	// hooks (the receiver is never reached: deliveries stay pending)
	hook := must[*client.Hook](t, "CreateHook")(admin.CreateHook(ctx, "base", "http://127.0.0.1:9/hook", "a-secret-of-16-chars", []string{"push"}))
	if hook.ID == "" || !hook.Active {
		t.Fatalf("hook %+v", hook)
	}
	_, err = admin.CreateHook(ctx, "base", "http://127.0.0.1:9/hook", "short", nil)
	wantCode(t, "CreateHook with a short secret", err, lockstep.EINVALID)
	if hs := must[[]client.Hook](t, "Hooks")(admin.Hooks(ctx, "base")); len(hs) != 1 || hs[0].ID != hook.ID {
		t.Fatalf("hooks %+v", hs)
	}
	_, err = admin.Hooks(ctx, "nope")
	wantCode(t, "Hooks unknown", err, lockstep.ENOTFOUND)
	sameWire[api.HookList](t, admin, "/api/v1/repos/base/hooks")
	rot := must[*client.RotatedHook](t, "RotateHook")(admin.RotateHook(ctx, "base", hook.ID, "", time.Hour))
	if !strings.HasPrefix(rot.Secret, "whsec_") || rot.PreviousSecretUntil == nil || rot.Hook == nil || rot.Hook.ID != hook.ID {
		t.Fatalf("rotate %+v", rot)
	}
	_, err = admin.RotateHook(ctx, "base", "nope", "", 0)
	wantCode(t, "RotateHook unknown", err, lockstep.ENOTFOUND)
	must[[]api.Delivery](t, "HookDeliveries")(admin.HookDeliveries(ctx, "base", hook.ID, 0))
	_, err = admin.HookDeliveries(ctx, "base", "nope", 0)
	wantCode(t, "HookDeliveries unknown", err, lockstep.ENOTFOUND)
	sameWire[api.DeliveryList](t, admin, "/api/v1/repos/base/hooks/"+hook.ID+"/deliveries")

	// checkpoints (no database branching on this server)
	cp := must[*api.Checkpoint](t, "CreateCheckpoint")(agent.CreateCheckpoint(ctx, "ws1", api.CheckpointRequest{Label: "before"}))
	if cp.ID == "" || cp.Commit != ed.Commit || cp.Label != "before" {
		t.Fatalf("checkpoint %+v", cp)
	}
	_, err = agent.CreateCheckpoint(ctx, "nope", api.CheckpointRequest{})
	wantCode(t, "CreateCheckpoint unknown", err, lockstep.ENOTFOUND)
	if cps := must[[]api.Checkpoint](t, "Checkpoints")(agent.Checkpoints(ctx, "ws1", 0)); len(cps) != 1 || cps[0].ID != cp.ID {
		t.Fatalf("checkpoints %+v", cps)
	}
	_, err = agent.Checkpoints(ctx, "nope", 0)
	wantCode(t, "Checkpoints unknown", err, lockstep.ENOTFOUND)
	sameWire[api.CheckpointList](t, admin, "/api/v1/repos/ws1/checkpoints")
	later := must[*client.PushResult](t, "EditFiles")(agent.EditFiles(ctx, "ws1", []client.Edit{client.WriteFile("c.txt", "three\n")}, client.WriteOptions{ExpectOID: ed.Commit}))
	res := must[*api.RestoreResult](t, "RestoreCheckpoint")(agent.RestoreCheckpoint(ctx, "ws1", cp.ID, api.RestoreRequest{ExpectOID: later.Commit}))
	if res.Tree != ed.Tree || !res.Code.Restored || res.DBRestored {
		t.Fatalf("restore %+v", res)
	}
	_, err = agent.RestoreCheckpoint(ctx, "ws1", "nope", api.RestoreRequest{})
	wantCode(t, "RestoreCheckpoint unknown", err, lockstep.ENOTFOUND)

	// database branching is off on this server: every call says so
	_, err = admin.BindDatabase(ctx, "base", "tpl")
	wantCode(t, "BindDatabase without branching", err, lockstep.ENOTCONFIGURED)
	_, err = admin.Database(ctx, "base")
	wantCode(t, "Database without branching", err, lockstep.ENOTCONFIGURED)
	_, err = admin.RefreshDatabase(ctx, "base")
	wantCode(t, "RefreshDatabase without branching", err, lockstep.ENOTCONFIGURED)
	_, err = agent.Redis(ctx, "ws1")
	wantCode(t, "Redis without branching", err, lockstep.ENOTCONFIGURED)

	// rollback, promote, status, abandon
	rb := must[*client.PushResult](t, "Rollback")(agent.Rollback(ctx, "ws1", first.Commit, client.WriteOptions{ExpectOID: must[string](t, "Ref")(agent.Ref(ctx, "ws1", "main"))}))
	if rb.Tree != first.Tree {
		t.Fatalf("rollback %+v", rb)
	}
	_, err = agent.Rollback(ctx, "ws1", first.Commit, client.WriteOptions{ExpectOID: first.Commit})
	wantCode(t, "Rollback with a stale expect", err, lockstep.EREFCONFLICT)
	_, err = agent.Rollback(ctx, "ws1", first.Commit, client.WriteOptions{})
	wantCode(t, "Rollback without expect", err, lockstep.EPRECONDITION)
	ed2 := must[*client.PushResult](t, "EditFiles")(agent.EditFiles(ctx, "ws1", []client.Edit{client.WriteFile("e.txt", "e\n")}, client.WriteOptions{ExpectOID: rb.Commit}))
	must[*api.Check](t, "PostCheck")(ci.PostCheck(ctx, "ws1", ed2.Commit, api.CheckRequest{Name: "test", Status: lockstep.CheckSuccess}))
	pr := must[*api.PromoteResult](t, "Promote")(agent.Promote(ctx, "ws1", api.PromoteRequest{Commit: ed2.Commit}))
	if pr.Into != "base:main" || pr.Evaluation == nil || !pr.Evaluation.Passed || pr.MergeResponse == nil || pr.Commit == "" {
		t.Fatalf("promote %+v", pr)
	}
	ws2 := must[*client.ForkResult](t, "Fork")(agent.Fork(ctx, "base", "ws2"))
	if st := must[*api.Repo](t, "SetStatus")(admin.SetStatus(ctx, ws2.Name, string(lockstep.StatusFailed), "broken")); st.Status != string(lockstep.StatusFailed) {
		t.Fatalf("status %+v", st)
	}
	_, err = admin.SetStatus(ctx, ws2.Name, "sleepy", "")
	wantCode(t, "SetStatus with a bad status", err, lockstep.EINVALID)
	ws3 := must[*client.ForkResult](t, "Fork")(agent.Fork(ctx, "base", "ws3"))
	if ab := must[*api.Repo](t, "Abandon")(agent.Abandon(ctx, ws3.Name, "not needed")); ab.Status != string(lockstep.StatusAbandoned) {
		t.Fatalf("abandon %+v", ab)
	}
	_, err = agent.Abandon(ctx, "nope", "")
	wantCode(t, "Abandon unknown", err, lockstep.ENOTFOUND)
	if err := admin.DeleteHook(ctx, "base", hook.ID); err != nil {
		t.Fatal(err)
	}
	wantCode(t, "DeleteHook unknown", admin.DeleteHook(ctx, "base", "nope"), lockstep.ENOTFOUND)

	// objects (PushDir has its own test)
	miss := must[[]string](t, "Missing")(admin.Missing(ctx, "base", []string{first.Tree, strings.Repeat("a", 40)}))
	if len(miss) != 1 || miss[0] != strings.Repeat("a", 40) {
		t.Fatalf("missing %v", miss)
	}
	_, err = admin.Missing(ctx, "base", []string{"not-an-oid"})
	wantCode(t, "Missing with a bad oid", err, lockstep.EINVALID)
	_, err = admin.UploadPack(ctx, "base", strings.NewReader("not a pack"))
	wantCode(t, "UploadPack of garbage", err, lockstep.EINVALID)
	_, err = admin.PushTree(ctx, "base", strings.Repeat("b", 40), client.WriteOptions{Force: true})
	wantCode(t, "PushTree of a tree the server lacks", err, lockstep.ENOTFOUND)

	// operations log
	op := must[*client.OplogPage](t, "Oplog")(admin.Oplog(ctx, api.OplogQuery{Repo: "ws1", Newest: true, Limit: 5}))
	if len(op.Entries) != 5 || op.NextAfter == 0 {
		t.Fatalf("oplog %d entries, next %d", len(op.Entries), op.NextAfter)
	}
	_, err = admin.Oplog(ctx, api.OplogQuery{Limit: 5000})
	wantCode(t, "Oplog with a bad limit", err, lockstep.EINVALID)
	sameWire[api.OplogPage](t, admin, "/api/v1/oplog?limit=1000")
	if v := must[*api.VerifyResult](t, "VerifyOplog")(admin.VerifyOplog(ctx)); !v.OK || v.Entries == 0 {
		t.Fatalf("verify %+v", v)
	}
	_, err = agent.VerifyOplog(ctx)
	wantCode(t, "VerifyOplog as an agent", err, lockstep.EFORBIDDEN)
}
