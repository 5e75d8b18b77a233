package web_test

import (
	"net/http"
	"net/url"
	"strings"
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

// TestUICSRFTokenIsBoundToTheSession: a signed-in form's CSRF token is
// good for its own session only. A token from another session, or a
// cookie and field pair planted by an attacker (the old double-submit
// accepted any matching pair), is refused; the session's own token works.
func TestUICSRFTokenIsBoundToTheSession(t *testing.T) {
	w := mustUIWorld(t)
	ci := w.login(t, w.ci) // another signed-in session (CI may mark failed too)
	_, body, _ := w.get(t, ci, "/ui/repos/task-1")
	other := csrfRE.FindStringSubmatch(body)[1]
	post := func(cookies, token string) int {
		req, _ := http.NewRequest("POST", w.srv.URL+"/ui/repos/task-1/fail", strings.NewReader(url.Values{"csrf": {token}, "reason": {"x"}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Cookie", cookies)
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	planted := strings.Repeat("ab", 32)
	if s := post("lockstep_session="+w.reviewer+"; lockstep_csrf="+planted, planted); s != http.StatusForbidden {
		t.Fatalf("planted cookie/token pair: %d, want 403", s)
	}
	if s := post("lockstep_session="+w.reviewer+"; lockstep_csrf="+other, other); s != http.StatusForbidden {
		t.Fatalf("another session's token: %d, want 403", s)
	}
	if m := w.api(t, "GET", "/api/v1/repos/task-1", w.reviewer, "", 200); m["status"] != string(lockstep.StatusActive) {
		t.Fatalf("refused forms changed the status to %v", m["status"])
	}
	rev := w.login(t, w.reviewer)
	_, body, _ = w.get(t, rev, "/ui/repos/task-1")
	own := csrfRE.FindStringSubmatch(body)[1]
	if own == other {
		t.Fatal("two sessions got the same token")
	}
	if s := post("lockstep_session="+w.reviewer, own); s != http.StatusSeeOther {
		t.Fatalf("the session's own token: %d, want 303", s)
	}
}

var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
