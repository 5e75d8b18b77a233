package e2e

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestRevisionExpressions: every route that takes a revision accepts
// abbreviated oids and git's ~N / ^N suffixes (a 12-character oid link of
// the UI, `lockstep rollback --to main~1`).
func TestRevisionExpressions(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOpts{})
	s.CreateRepo(t, "revs")
	c1 := s.Push(t, s.AdminKey, "revs", zeroOID, map[string]string{"a.txt": "1\n"}).Commit
	c2 := s.Push(t, s.AdminKey, "revs", c1, map[string]string{"a.txt": "2\n"}).Commit
	c3 := s.Push(t, s.AdminKey, "revs", c2, map[string]string{"a.txt": "3\n"}).Commit

	commit := func(rev string) (string, *http.Response) {
		r := s.Call(t, "GET", "/api/v1/repos/revs/commits/"+url.PathEscape(rev), s.AdminKey, nil, "")
		if r.Status != http.StatusOK {
			return r.String(), nil
		}
		var c struct{ Commit string }
		r.Decode(t, &c)
		return c.Commit, &http.Response{StatusCode: r.Status}
	}
	for rev, want := range map[string]string{
		c3[:12]: c3, c2[:7]: c2, c1[:4]: c1, c3: c3,
		"main": c3, "main~1": c2, "main~2": c1, "main^": c2, "main^^": c1, "main~0": c3, "main^0": c3,
		"HEAD~1": c2, c3[:12] + "~2": c1, "revs:main~1": c2, "main~1^": c1,
	} {
		if got, ok := commit(rev); ok == nil || got != want {
			t.Errorf("commit %q: got %s, want %s", rev, got, want)
		}
	}
	for rev, code := range map[string]string{
		"main~3": "not_found", "main^2": "not_found", "ffffffffffff": "not_found", "main~x": "invalid_argument",
		"~1": "invalid_argument", "main~99999999999": "invalid_argument",
	} {
		r := s.Call(t, "GET", "/api/v1/repos/revs/commits/"+url.PathEscape(rev), s.AdminKey, nil, "")
		if r.Status < 400 || !strings.Contains(r.String(), code) {
			t.Errorf("commit %q: got %s, want %s", rev, r, code)
		}
	}
	// Rollback, tree, blob and compare take the same expressions.
	var rb struct{ Commit, Tree string }
	s.MustJSON(t, "POST", "/api/v1/repos/revs/rollback", s.AdminKey, map[string]any{"to": "main~2", "expect_oid": c3[:40]}, http.StatusCreated, &rb)
	if got := s.Blob(t, "revs", "main", "a.txt"); got != "1\n" {
		t.Fatalf("rollback --to main~2: a.txt = %q", got)
	}
	if got := s.Blob(t, "revs", c2[:10], "a.txt"); got != "2\n" {
		t.Errorf("blob at an abbreviated oid: %q", got)
	}
	s.MustJSON(t, "GET", "/api/v1/repos/revs/compare?base="+c1[:8]+"&head=main~1", s.AdminKey, nil, http.StatusOK, nil)
}
