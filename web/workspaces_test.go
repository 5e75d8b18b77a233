package web_test

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
)

// TestWorkspacePages: workspace listings filter and page in the store —
// by task, by status, `limit` + `after` — in the API and on the UI's
// repository page, which shows one page and a link to the next.
func TestWorkspacePages(t *testing.T) {
	w := mustUIWorld(t)
	const n = 230
	for i := range n {
		task := fmt.Sprintf("task-%d", i%3)
		w.api(t, "POST", "/api/v1/repos/app/forks", w.agent, fmt.Sprintf(`{"name":"ws-%03d","task":%q}`, i, task), 201)
	}
	for i := 0; i < n; i += 10 {
		w.api(t, "POST", fmt.Sprintf("/api/v1/repos/ws-%03d/status", i), w.reviewer, `{"status":"failed","reason":"tests"}`, 200)
	}
	page := func(q string) ([]string, string) {
		m := w.api(t, "GET", "/api/v1/repos/app/workspaces?"+q, w.agent, "", 200)
		var names []string
		for _, x := range m["workspaces"].([]any) {
			ws := x.(map[string]any)
			names = append(names, ws["name"].(string))
			if q != "" && strings.Contains(q, "task=task-1") && ws["task"] != "task-1" {
				t.Fatalf("task filter returned %v", ws)
			}
		}
		return names, m["next_after"].(string)
	}
	// Default page: 100 by name; the world's own task-1 sorts first.
	names, next := page("")
	if len(names) != 100 || names[0] != "task-1" || next != names[99] {
		t.Fatalf("default page: %d names from %s, next %q", len(names), names[0], next)
	}
	var all []string
	after := ""
	for {
		names, next := page("limit=64&after=" + url.QueryEscape(after))
		all = append(all, names...)
		if next == "" {
			break
		}
		after = next
	}
	if len(all) != n+1 || all[1] != "ws-000" || all[n] != fmt.Sprintf("ws-%03d", n-1) {
		t.Fatalf("paging with limit 64: %d names (%v … %v)", len(all), all[:3], all[len(all)-1])
	}
	failed, next := page("status=failed&limit=1000")
	if len(failed) != n/10 || next != "" {
		t.Fatalf("status=failed: %d workspaces (want %d), next %q", len(failed), n/10, next)
	}
	tasked, _ := page("task=task-1&limit=1000")
	if want := (n + 1) / 3; len(tasked) != want { // i%3 == 1 for i < n
		t.Fatalf("task=task-1: %d workspaces, want %d", len(tasked), want)
	}
	for _, bad := range []string{"limit=0", "limit=1001", "status=weird", "limit=x"} {
		m := w.api(t, "GET", "/api/v1/repos/app/workspaces?"+bad, w.agent, "", 400)
		if errCode(m) != "invalid_argument" {
			t.Errorf("%s: %v", bad, m)
		}
	}

	// The UI: one page of 100 with a next link that carries the filters.
	c := w.login(t, w.reviewer)
	_, body, _ := w.get(t, c, "/ui/repos/app")
	if rows := strings.Count(body, `<a class="strong" href="/ui/repos/`); rows != 100 {
		t.Errorf("repository page shows %d workspaces, want a page of 100", rows)
	}
	mustContain(t, "repository page", body, `rel="next" href="/ui/repos/app?after=ws-098"`, `?task=task-1`)
	_, body, _ = w.get(t, c, "/ui/repos/app?status=failed&task=task-0")
	if rows := strings.Count(body, `<a class="strong" href="/ui/repos/`); rows != 8 {
		t.Errorf("failed task-0 workspaces: %d rows, want 8", rows)
	}
	mustContain(t, "filtered page", body, "<strong>failed</strong>", "task <code>task-0</code>")
}
