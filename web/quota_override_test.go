package web_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/sqlstore"
	"github.com/lockstep-hq/lockstep/web"
)

// otherAgent creates a second agent key (no quota override) and returns
// its secret and id.
func otherAgent(t *testing.T, f *fixture) (string, string) {
	t.Helper()
	m := f.want(t, "POST", "/api/v1/keys", f.admin, `{"name":"other","role":"agent"}`, 201)
	return m["secret"].(string), m["id"].(string)
}

// startJob POSTs a run job as key in the background (no runner takes
// it: the request waits for one) and returns once whoami counts want
// active runs for key; the job's request is cancelled when the test
// ends. A refusal of the job fails the test.
func startJob(t *testing.T, f *fixture, key, ws string, want int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "POST", f.srv.URL+"/api/v1/repos/"+ws+"/jobs", strings.NewReader(`{"command":["make","test"]}`))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	for {
		select {
		case code := <-done:
			done <- code
			t.Fatalf("job in %s ended with %d before it was counted", ws, code)
		default:
		}
		l := f.want(t, "GET", "/api/v1/whoami", key, "", 200)["limits"].(map[string]any)
		if l["runs_active"] == float64(want) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// incompressible returns n-odd bytes a pack does not shrink much.
func incompressible(n int) string {
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		b.WriteString(strings.Repeat(string(rune('a'+i*7%26)), i%13+1))
		b.WriteString(time.Duration(i * 7919).String())
	}
	return b.String()
}

// TestRunQuotaOverride: a key with a runs override of 1 gets 429 on its
// second concurrent job (naming its own quota) while a key without one
// follows --quota-runs 2; clearing the override restores the
// server-wide value; whoami says where each limit comes from.
func TestRunQuotaOverride(t *testing.T) {
	f := mustServerTweak(t, web.Config{QuotaRuns: 2}, nil, func(s *web.Server, db *sqlstore.DB) { s.Jobs = db })
	ctx := context.Background()
	other, otherID := otherAgent(t, f)
	f.want(t, "POST", "/api/v1/repos", f.admin, `{"name":"app"}`, 201)
	f.want(t, "POST", "/api/v1/repos/app/forks", f.agent, `{"name":"ws"}`, 201)
	f.want(t, "POST", "/api/v1/repos/app/forks", other, `{"name":"ows"}`, 201)
	agentID := f.want(t, "GET", "/api/v1/whoami", f.agent, "", 200)["id"].(string)
	if err := f.db.PutRunner(ctx, &lockstep.Runner{ID: "rnr_1", KeyID: "key_runner", Name: "box", Workspaces: []string{"*"}}); err != nil {
		t.Fatal(err)
	}
	f.want(t, "PUT", "/api/v1/keys/"+agentID+"/quota", f.admin, `{"runs":1}`, 204)
	l := f.want(t, "GET", "/api/v1/whoami", f.agent, "", 200)["limits"].(map[string]any)
	if l["runs"] != float64(1) || l["runs_source"] != "key" || l["workspaces_source"] != "server" || l["storage_bytes_source"] != "server" {
		t.Fatalf("whoami limits with a runs override: %v", l)
	}
	if ol := f.want(t, "GET", "/api/v1/whoami", other, "", 200)["limits"].(map[string]any); ol["runs"] != float64(2) || ol["runs_source"] != "server" {
		t.Fatalf("whoami limits of the key without an override: %v", ol)
	}
	for i, j := range []*lockstep.RunJob{
		{ID: "job_a", Workspace: "ws", KeyID: agentID, Spec: lockstep.RunJobSpec{Command: []string{"true"}}},
		{ID: "job_o", Workspace: "ows", KeyID: otherID, Spec: lockstep.RunJobSpec{Command: []string{"true"}}},
	} {
		if err := f.db.CreateRunJob(ctx, j); err != nil {
			t.Fatal(i, err)
		}
	}
	status, m, h := f.do(t, "POST", "/api/v1/repos/ws/jobs", f.agent, `{"command":["make","test"]}`)
	if status != 429 || errCode(m) != lockstep.ERATELIMITED || h.Get("Retry-After") == "" ||
		!strings.Contains(errMessage(m), "limit is 1") || !strings.Contains(errMessage(m), "this key's own quota") {
		t.Fatalf("a second job under a runs override of 1: %d %v; want 429 naming the key's own quota", status, m)
	}
	// The key without an override may have 2: its second is accepted, its third refused.
	startJob(t, f, other, "ows", 2)
	status, m, _ = f.do(t, "POST", "/api/v1/repos/ows/jobs", other, `{"command":["make","test"]}`)
	if status != 429 || !strings.Contains(errMessage(m), "quota-runs") {
		t.Fatalf("third job of the key under --quota-runs 2: %d %v; want 429 naming quota-runs", status, m)
	}
	// Clearing the override: the server-wide 2 applies again.
	f.want(t, "PUT", "/api/v1/keys/"+agentID+"/quota", f.admin, `{"runs":null}`, 204)
	if l := f.want(t, "GET", "/api/v1/whoami", f.agent, "", 200)["limits"].(map[string]any); l["runs"] != float64(2) || l["runs_source"] != "server" {
		t.Fatalf("whoami limits after clearing: %v", l)
	}
	startJob(t, f, f.agent, "ws", 2)
	status, m, _ = f.do(t, "POST", "/api/v1/repos/ws/jobs", f.agent, `{"command":["make","test"]}`)
	if status != 429 || !strings.Contains(errMessage(m), "quota-runs") {
		t.Fatalf("third job once the override is cleared: %d %v; want 429 naming quota-runs", status, m)
	}
	// 0 is unlimited for that key.
	f.want(t, "PUT", "/api/v1/keys/"+agentID+"/quota", f.admin, `{"runs":0}`, 204)
	startJob(t, f, f.agent, "ws", 3)
}

// TestStorageQuotaOverride: --quota-storage-bytes 1000 binds a key
// without an override; a key with an override of 0 writes past it; once
// the override is cleared the server-wide value applies; an override
// larger than the server's lets the key write again.
func TestStorageQuotaOverride(t *testing.T) {
	f := mustServerWith(t, web.Config{QuotaStorageBytes: 1000}, nil)
	other, _ := otherAgent(t, f)
	f.want(t, "POST", "/api/v1/repos", f.admin, `{"name":"app"}`, 201)
	f.want(t, "POST", "/api/v1/repos/app/forks", f.agent, `{"name":"ws"}`, 201)
	f.want(t, "POST", "/api/v1/repos/app/forks", other, `{"name":"ows"}`, 201)
	agentID := f.want(t, "GET", "/api/v1/whoami", f.agent, "", 200)["id"].(string)
	f.want(t, "PUT", "/api/v1/keys/"+agentID+"/quota", f.admin, `{"storage_bytes":0}`, 204)
	big := incompressible(4000)
	for _, b := range []string{"b1", "b2"} {
		if code, _ := pushTar(t, f, f.agent, "ws", b, big+b); code != 201 {
			t.Fatalf("push %s under a storage override of 0 (unlimited): %d", b, code)
		}
	}
	if l := f.want(t, "GET", "/api/v1/whoami", f.agent, "", 200)["limits"].(map[string]any); l["storage_bytes"] != float64(0) || l["storage_bytes_source"] != "key" {
		t.Fatalf("whoami limits with a storage override: %v", l)
	}
	// The key without an override is bound by the server's 1000.
	if code, _ := pushTar(t, f, other, "ows", "b1", big); code != 201 {
		t.Fatalf("other's first push: %d", code)
	}
	status, m, _ := f.do(t, "POST", "/api/v1/repos/ows/objects", other, "")
	if status != 429 || !strings.Contains(errMessage(m), "quota-storage-bytes") {
		t.Fatalf("other's write over the server-wide quota: %d %v", status, m)
	}
	// Clearing the override: the agent is now over the server's 1000.
	f.want(t, "PUT", "/api/v1/keys/"+agentID+"/quota", f.admin, `{}`, 204)
	if code, _ := pushTar(t, f, f.agent, "ws", "b3", "small\n"); code != 429 {
		t.Fatalf("push once the override is cleared: %d, want 429", code)
	}
	if l := f.want(t, "GET", "/api/v1/whoami", f.agent, "", 200)["limits"].(map[string]any); l["storage_bytes"] != float64(1000) || l["storage_bytes_source"] != "server" {
		t.Fatalf("whoami limits after clearing: %v", l)
	}
	// An override smaller than the usage refuses naming the key's quota;
	// a larger one lets it write.
	f.want(t, "PUT", "/api/v1/keys/"+agentID+"/quota", f.admin, `{"storage_bytes":2000}`, 204)
	status, m, _ = f.do(t, "POST", "/api/v1/repos/ws/objects", f.agent, "")
	if status != 429 || !strings.Contains(errMessage(m), "this key's own quota") {
		t.Fatalf("write over a storage override: %d %v", status, m)
	}
	f.want(t, "PUT", "/api/v1/keys/"+agentID+"/quota", f.admin, `{"storage_bytes":1073741824}`, 204)
	if code, _ := pushTar(t, f, f.agent, "ws", "b4", "small\n"); code != 201 {
		t.Fatalf("push under a 1 GiB override: %d", code)
	}
	page := f.page(t, "/ui/keys", f.admin)
	if !strings.Contains(page, " / 1073741824 (key)<") {
		t.Fatalf("keys page lacks the key's storage override:\n%s", page)
	}
}

// TestKeyQuotaBadValues: a negative value or a wrong type is 400 naming
// the field, and nothing changes.
func TestKeyQuotaBadValues(t *testing.T) {
	f := mustServerWith(t, web.Config{QuotaRuns: 3, QuotaStorageBytes: 5000}, nil)
	agentID := f.want(t, "GET", "/api/v1/whoami", f.agent, "", 200)["id"].(string)
	f.want(t, "PUT", "/api/v1/keys/"+agentID+"/quota", f.admin, `{"workspaces":4,"storage_bytes":7000,"runs":1}`, 204)
	for body, field := range map[string]string{
		`{"workspaces":1,"storage_bytes":-1,"runs":1}`: "storage_bytes",
		`{"workspaces":1,"storage_bytes":1,"runs":-2}`: "runs",
		`{"workspaces":-1,"storage_bytes":1,"runs":1}`: "workspaces",
		`{"runs":"two"}`: "runs",
	} {
		status, m, _ := f.do(t, "PUT", "/api/v1/keys/"+agentID+"/quota", f.admin, body)
		if status != 400 || errCode(m) != lockstep.EINVALID || !strings.Contains(errMessage(m), field) {
			t.Fatalf("PUT quota %s: %d %v; want 400 naming %s", body, status, m, field)
		}
	}
	f.want(t, "PUT", "/api/v1/keys/key_missing/quota", f.admin, `{"runs":1}`, 404)
	l := f.want(t, "GET", "/api/v1/whoami", f.agent, "", 200)["limits"].(map[string]any)
	if l["workspaces"] != float64(4) || l["storage_bytes"] != float64(7000) || l["runs"] != float64(1) {
		t.Fatalf("limits after the refused updates: %v; want the overrides unchanged", l)
	}
	ops, err := f.db.ListOps(context.Background(), lockstep.OpFilter{Op: "key.quota"})
	if err != nil {
		t.Fatal(err)
	}
	if len(ops) != 1 || ops[0].Details["runs"] != float64(1) || ops[0].Details["storage_bytes"] != float64(7000) {
		t.Fatalf("key.quota ops: %+v; want the one accepted update with its values", ops)
	}
}
