package web_test

import (
	"net/http"
	"testing"

	"github.com/lockstep-hq/lockstep"
)

// TestBasicAuthOnlyOnGit: /api takes Authorization: Bearer only; the
// basic-auth password is for git clients under /git (issue 9).
func TestBasicAuthOnlyOnGit(t *testing.T) {
	f := mustServer(t)
	f.do(t, "POST", "/api/v1/repos", f.admin, `{"name":"shop"}`)
	get := func(path string, basic bool) int {
		req, _ := http.NewRequest("GET", f.srv.URL+path, nil)
		if basic {
			req.SetBasicAuth("x", f.admin)
		} else {
			req.Header.Set("Authorization", "Bearer "+f.admin)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if s := get("/api/v1/whoami", true); s != http.StatusUnauthorized {
		t.Errorf("basic auth on /api: %d, want 401", s)
	}
	if s := get("/api/v1/whoami", false); s != http.StatusOK {
		t.Errorf("bearer on /api: %d, want 200", s)
	}
	if s := get("/git/shop.git/info/refs?service=git-upload-pack", true); s != http.StatusOK {
		t.Errorf("basic auth on /git: %d, want 200", s)
	}
	status, m, _ := f.do(t, "GET", "/api/v1/whoami", "", "")
	if status != 401 || errCode(m) != lockstep.EUNAUTH {
		t.Errorf("no key: %d %v", status, m)
	}
}
