package web_test

import (
	"net/http"
	"regexp"
	"strings"
	"testing"
)

// TestUIKeysPage (issue 28): /ui/keys lists every key for an admin —
// role, scope, expiry, parent, active workspaces against the quota,
// uploads in progress against the upload quota, revoked state — with no
// secret in the page; other roles get 403 and no Keys link.
func TestUIKeysPage(t *testing.T) {
	w := mustUIWorld(t)
	minted := w.api(t, "POST", "/api/v1/keys", w.agent, `{"name":"sub-1","role":"agent","ttl":"1h","scope":{"workspace":"task-1"}}`, 201)
	secret, _ := minted["secret"].(string)
	if secret == "" {
		t.Fatalf("minted key: %v", minted)
	}
	admin := w.login(t, w.admin)
	st, body, _ := w.get(t, admin, "/ui/keys")
	if st != http.StatusOK {
		t.Fatalf("admin: %d %s", st, body)
	}
	row := func(name string) string {
		m := regexp.MustCompile(`(?s)<tr class="key">\s*<td>` + regexp.QuoteMeta(name) + `</td>.*?</tr>`).FindString(body)
		if m == "" {
			t.Fatalf("no row for %s in %s", name, body)
		}
		return m
	}
	if r := row("agent-7"); !strings.Contains(r, "<td>agent</td>") || !strings.Contains(r, "<td>1 / unlimited</td>") || !strings.Contains(r, "<td>active</td>") {
		t.Fatalf("agent-7 row: %s", r)
	}
	if r := row("sub-1"); !strings.Contains(r, "workspace task-1") || !strings.Contains(r, "<td>agent-7</td>") || strings.Contains(r, "never") {
		t.Fatalf("sub-1 row (scope, parent, expiry): %s", r)
	}
	if r := row("gone"); !strings.Contains(r, "<td>revoked</td>") {
		t.Fatalf("revoked key row: %s", r)
	}
	for _, s := range []string{w.admin, w.agent, w.reviewer, secret} {
		if strings.Contains(body, s) {
			t.Fatal("a key secret is on the keys page")
		}
	}
	if !strings.Contains(body, `href="/ui/keys"`) {
		t.Fatal("no Keys link in the admin's nav")
	}
	rita := w.login(t, w.reviewer)
	if st, body, _ := w.get(t, rita, "/ui/keys"); st != http.StatusForbidden {
		t.Fatalf("reviewer: %d, want 403", st)
	} else if strings.Contains(body, `href="/ui/keys"`) {
		t.Fatal("a reviewer's nav links to the keys page")
	}
}
