package web_test

import (
	"net/http"
	"testing"
)

// TestRetentionRoute: GET and PUT /api/v1/repos/{repo}/retention are an
// admin's (403 before the body is read for an agent); the policy is off
// by default, takes days or Go durations, refuses a bad age and a
// workspace, and reads back as set.
func TestRetentionRoute(t *testing.T) {
	f := mustServer(t)
	if code, m, _ := f.do(t, "POST", "/api/v1/repos", f.admin, `{"name":"app"}`); code != http.StatusCreated {
		t.Fatalf("create: %d %v", code, m)
	}
	if st, m, _ := f.do(t, "PUT", "/api/v1/repos/app/retention", f.agent, `{"abandon_after":"7d"}`); st != http.StatusForbidden {
		t.Fatalf("agent: %d %v, want 403", st, m)
	}
	st, m, _ := f.do(t, "GET", "/api/v1/repos/app/retention", f.admin, ``)
	if st != http.StatusOK || m["abandon_after"] != "0" || m["delete_after"] != "0" || m["archive_failed"] != false || m["updated_at"] != nil {
		t.Fatalf("default policy: %d %v, want off", st, m)
	}
	if st, m, _ := f.do(t, "PUT", "/api/v1/repos/app/retention", f.admin, `{"abandon_after":"7 days"}`); st != http.StatusBadRequest {
		t.Fatalf("bad age: %d %v, want 400", st, m)
	}
	st, m, _ = f.do(t, "PUT", "/api/v1/repos/app/retention", f.admin, `{"abandon_after":"168h","delete_after":"30d","archive_failed":true}`)
	if st != http.StatusOK || m["abandon_after"] != "7d" || m["delete_after"] != "30d" || m["archive_failed"] != true || m["updated_at"] == nil {
		t.Fatalf("set: %d %v", st, m)
	}
	if st, m, _ = f.do(t, "GET", "/api/v1/repos/app/retention", f.admin, ``); st != http.StatusOK || m["delete_after"] != "30d" {
		t.Fatalf("read back: %d %v", st, m)
	}
	if code, m, _ := f.do(t, "POST", "/api/v1/repos/app/forks", f.agent, `{"name":"ws1"}`); code != http.StatusCreated {
		t.Fatalf("fork: %d %v", code, m)
	}
	if st, m, _ := f.do(t, "PUT", "/api/v1/repos/ws1/retention", f.admin, `{"abandon_after":"1d"}`); st != http.StatusBadRequest {
		t.Fatalf("workspace: %d %v, want 400", st, m)
	}
}
