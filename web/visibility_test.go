package web_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// The UI shows of the operations log exactly what /api/v1/oplog shows
// the same key (issue 21, item 8): another agent's failed run (command,
// stdout, stderr) is on neither; a reviewer sees it on both.
func TestUIOpVisibilityMatchesAPI(t *testing.T) {
	w := mustUIWorld(t)
	w.addTask(t) // t45-b: agent-7's failed run, stderr "--- FAIL: TestHelper"
	other := w.api(t, "POST", "/api/v1/keys", w.admin, `{"name":"agent-8","role":"agent"}`, 201)["secret"].(string)
	w.api(t, "POST", "/api/v1/repos/app/forks", other, `{"name":"t45-z","task":"t-45"}`, 201)

	const secretOut = "--- FAIL: TestHelper"
	const secretCmd = "Test Helper" // in the failed run's command
	apiSees := func(key, repo string) bool {
		t.Helper()
		req, _ := http.NewRequest("GET", w.srv.URL+"/api/v1/oplog?op=run.failed&repo="+repo+"&limit=1000", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m struct {
			Entries []json.RawMessage `json:"entries"`
		}
		if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&m) != nil {
			t.Fatalf("oplog: %d", resp.StatusCode)
		}
		for _, e := range m.Entries {
			if strings.Contains(string(e), "TestHelper") {
				return true
			}
		}
		return false
	}
	for _, who := range []struct {
		name, key string
		sees      bool
	}{{"the run's own agent", w.agent, true}, {"a reviewer", w.reviewer, true}, {"another agent", other, false}} {
		if got := apiSees(who.key, "t45-b"); got != who.sees {
			t.Fatalf("%s: /api/v1/oplog shows the failed run: %v, want %v", who.name, got, who.sees)
		}
		c := w.login(t, who.key)
		for _, page := range []string{"/ui/repos/t45-b", "/ui/repos/app/tasks/t-45", "/ui/oplog?repo=t45-b"} {
			status, body, _ := w.get(t, c, page)
			if status != 200 {
				t.Fatalf("%s: GET %s: %d", who.name, page, status)
			}
			got := strings.Contains(body, secretCmd) || strings.Contains(body, secretOut)
			if got != who.sees {
				t.Errorf("%s: %s shows the failed run: %v, want %v (as /api/v1/oplog)", who.name, page, got, who.sees)
			}
		}
	}
}
