package web_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/lockstep-hq/lockstep/web"
)

// TestScopedKeyOplogHoldsOnlyItsScope: a scoped reviewer or CI key (an
// admin mints them) reads the operations log of its scope only, on the
// API and the UI: another workspace's entries (their failed runs'
// output among them) are not listed, and asking for another repository
// by ?repo= is refused as any route naming it is.
func TestScopedKeyOplogHoldsOnlyItsScope(t *testing.T) {
	f := mustServerWith(t, web.Config{}, nil)
	f.want(t, "POST", "/api/v1/repos", f.admin, `{"name":"app"}`, 201)
	f.want(t, "POST", "/api/v1/repos/app/forks", f.agent, `{"name":"ws1","task":"t1"}`, 201)
	f.want(t, "POST", "/api/v1/repos/app/forks", f.admin, `{"name":"theirs","task":"t2"}`, 201)
	f.want(t, "POST", "/api/v1/repos/theirs/status", f.admin, `{"status":"failed","reason":"secret-of-theirs"}`, 200)
	for _, sc := range []string{`{"workspace":"ws1"}`, `{"base":"app","task":"t1"}`} {
		for _, role := range []string{"reviewer", "ci", "agent"} {
			key := f.want(t, "POST", "/api/v1/keys", f.admin, fmt.Sprintf(`{"name":"s-%s","role":"%s","ttl":"1h","scope":%s}`, role, role, sc), 201)["secret"].(string)
			for _, order := range []string{"asc", "desc"} {
				m := f.want(t, "GET", "/api/v1/oplog?limit=1000&order="+order, key, "", 200)
				for _, e := range m["entries"].([]any) {
					if r := e.(map[string]any)["repo"]; r == "theirs" {
						t.Errorf("scope %s, role %s: the oplog lists an entry of theirs: %v", sc, role, e)
					}
				}
			}
			if st, m, _ := f.do(t, "GET", "/api/v1/oplog?repo=theirs", key, ""); st != http.StatusForbidden {
				t.Errorf("scope %s, role %s: GET /oplog?repo=theirs: %d %v, want 403", sc, role, st, m)
			}
			for _, page := range []string{"/ui/oplog", "/ui/oplog?repo=theirs"} {
				req, _ := http.NewRequest("GET", f.srv.URL+page, nil)
				req.Header.Set("Authorization", "Bearer "+key)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if strings.Contains(string(b), "secret-of-theirs") {
					t.Errorf("scope %s, role %s: %s shows an entry of theirs (%d)", sc, role, page, resp.StatusCode)
				}
			}
		}
	}
}
