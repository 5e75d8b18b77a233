package web_test

import (
	"net/http"
	"testing"
)

// TestGCRoute: POST /api/v1/gc is an admin's (403 before the body is
// read for an agent), refuses a bad --prune value, and answers what it
// dropped; a dry run and an empty body work.
func TestGCRoute(t *testing.T) {
	f := mustServer(t)
	if st, m, _ := f.do(t, "POST", "/api/v1/gc", f.agent, `{"prune":"now"}`); st != http.StatusForbidden {
		t.Fatalf("agent: %d %v, want 403", st, m)
	}
	if st, m, _ := f.do(t, "POST", "/api/v1/gc", f.admin, `{"prune":"soon"}`); st != http.StatusBadRequest {
		t.Fatalf("bad prune: %d %v, want 400", st, m)
	}
	if st, m, _ := f.do(t, "POST", "/api/v1/gc", f.admin, `{"repo":"nope"}`); st != http.StatusNotFound {
		t.Fatalf("unknown repo: %d %v, want 404", st, m)
	}
	st, m, _ := f.do(t, "POST", "/api/v1/gc", f.admin, `{"prune":"now","dry_run":true}`)
	if st != http.StatusOK || m["dry_run"] != true || m["retention"] != "0s" {
		t.Fatalf("dry run: %d %v", st, m)
	}
	st, m, _ = f.do(t, "POST", "/api/v1/gc", f.admin, ``)
	if st != http.StatusOK || m["dry_run"] != false || m["retention"] != "336h0m0s" {
		t.Fatalf("default run: %d %v, want the default retention", st, m)
	}
}
