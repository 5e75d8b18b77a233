package e2e

import (
	"net/http"
	"strings"
	"testing"

	"github.com/lockstep-hq/lockstep/internal/e2ekit"
)

// TestNULTextIsInvalidArgument: text PostgreSQL cannot hold (a NUL
// character in a checkpoint label, a check summary, a list filter) is the
// client's input, a 400 invalid_argument, not a 500 internal; and no
// answer carries the driver's text.
func TestNULTextIsInvalidArgument(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOpts{Postgres: true})
	s.CreateRepo(t, "nul")
	p := s.Push(t, s.AdminKey, "nul", "", map[string]string{"a.txt": "a\n"})
	s.MustJSON(t, "POST", "/api/v1/repos/nul/forks", s.AdminKey, map[string]string{"name": "nul-ws"}, http.StatusCreated, nil)

	for _, c := range []struct {
		what, method, path string
		body               any
	}{
		{"checkpoint label", "POST", "/api/v1/repos/nul-ws/checkpoints", map[string]string{"label": "a\x00b"}},
		{"check summary", "POST", "/api/v1/repos/nul/commits/" + p.Commit + "/checks", map[string]string{"name": "tests", "status": "success", "summary": "a\x00b"}},
		{"oplog repo filter", "GET", "/api/v1/oplog?repo=a%00b", nil},
		{"oplog op filter", "GET", "/api/v1/oplog?op=a%00b", nil},
		{"workspaces task filter", "GET", "/api/v1/repos/nul/workspaces?task=a%00b", nil},
		{"workspaces after", "GET", "/api/v1/repos/nul/workspaces?after=a%00b", nil},
		{"oplog repo filter, not UTF-8", "GET", "/api/v1/oplog?repo=a%ffb", nil},
	} {
		r := s.Call(t, c.method, c.path, s.AdminKey, c.body, "")
		if r.Status != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 400 invalid_argument", c.what, r.Status, r.Body)
			continue
		}
		e2ekit.WantError(t, r, http.StatusBadRequest, "invalid_argument")
		for _, leak := range []string{"SQLSTATE", "UTF8", "0x00", "ERROR:", "pgx", "sqlstore"} {
			if strings.Contains(string(r.Body), leak) {
				t.Errorf("%s: the answer carries driver text %q: %s", c.what, leak, r.Body)
			}
		}
	}
	// The server still answers, and the refused writes wrote nothing.
	r := s.Call(t, "GET", "/api/v1/repos/nul-ws/checkpoints", s.AdminKey, nil, "")
	if r.Status != http.StatusOK || strings.Contains(string(r.Body), `"id"`) {
		t.Errorf("checkpoints after the refused one: %d %s", r.Status, r.Body)
	}
}
