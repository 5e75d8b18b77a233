package web_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// TestTaskScopedKeyListsOnlyItsTask: a key scoped to task t1 of base app
// names app (in its scope), but its listing of app's workspaces, on the
// API and on the base's UI page, holds the workspaces of t1 only (it held
// every task's, as GET /repos did not); asking for another task is 403.
func TestTaskScopedKeyListsOnlyItsTask(t *testing.T) {
	w := mustUIWorld(t)
	w.api(t, "POST", "/api/v1/repos/app/forks", w.agent, `{"name":"mine-1","task":"t1"}`, 201)
	w.api(t, "POST", "/api/v1/repos/app/forks", w.admin, `{"name":"hidden-2","task":"t2"}`, 201)
	for _, role := range []string{"reviewer", "agent", "ci"} {
		key := w.api(t, "POST", "/api/v1/keys", w.admin, `{"name":"s-`+role+`","role":"`+role+`","ttl":"1h","scope":{"base":"app","task":"t1"}}`, 201)["secret"].(string)
		for _, p := range []string{"/api/v1/repos/app/workspaces", "/api/v1/repos/app/workspaces?task=t1"} {
			got := fmt.Sprint(w.api(t, "GET", p, key, "", 200)["workspaces"])
			if strings.Contains(got, "hidden-2") || !strings.Contains(got, "mine-1") {
				t.Errorf("%s %s: %s, want mine-1 and not hidden-2", role, p, got)
			}
		}
		req, _ := http.NewRequest("GET", w.srv.URL+"/api/v1/repos/app/workspaces?task=t2", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		if m := w.send(t, req, http.StatusForbidden); errCode(m) != "permission_denied" {
			t.Errorf("%s ?task=t2: %v", role, m)
		}
		st, body, _ := w.get(t, w.login(t, key), "/ui/repos/app")
		if st != http.StatusOK || strings.Contains(body, "hidden-2") || !strings.Contains(body, "mine-1") {
			t.Errorf("%s /ui/repos/app: %d, shows hidden-2 %v, mine-1 %v", role, st, strings.Contains(body, "hidden-2"), strings.Contains(body, "mine-1"))
		}
	}
}
