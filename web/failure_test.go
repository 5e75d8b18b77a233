package web_test

import (
	"strings"
	"testing"
)

// TestUIFailureEvidence: a failed run's exit code, duration, output tails
// and evidence commit, and the reason a reviewer gave when marking the
// workspace failed, are on the workspace page.
func TestUIFailureEvidence(t *testing.T) {
	w := mustUIWorld(t)
	cp := w.api(t, "POST", "/api/v1/repos/task-1/checkpoints", w.agent, `{"label":"before run"}`, 201)
	tip := w.api(t, "GET", "/api/v1/repos/task-1/refs", w.agent, "", 200)["refs"].([]any)[0].(map[string]any)["oid"].(string)
	evidence := w.push(t, "task-1", w.agent, tip, "failed run: make test", map[string]string{"README.md": "broken\n"}, 201)
	body := `{"failure":{"command":["make","test"],"exit_code":3,"duration_ms":1234,"stdout_tail":"ok pkg/a\n","stderr_tail":"FAIL pkg/b: <boom> expected 2, got 3\n","evidence":"` + evidence + `","reason":"exit code 3"}}`
	w.api(t, "POST", "/api/v1/repos/task-1/checkpoints/"+cp["id"].(string)+"/restore", w.agent, body, 200)
	w.api(t, "POST", "/api/v1/repos/task-1/status", w.reviewer, `{"status":"failed","reason":"flaky <b>tests</b> never fixed"}`, 200)

	c := w.login(t, w.reviewer)
	_, page, _ := w.get(t, c, "/ui/repos/task-1")
	mustContain(t, "workspace page", page,
		`id="failed-runs"`, "<code>make test</code>", "<strong>exit code 3</strong> after 1.2 s",
		"FAIL pkg/b: &lt;boom&gt; expected 2, got 3", "ok pkg/a", "/ui/repos/task-1/commits/"+evidence,
		`id="failure-reason"`, "by <strong>rita</strong>", "<q>flaky &lt;b&gt;tests&lt;/b&gt; never fixed</q>")
	if strings.Contains(page, "<b>tests</b>") || strings.Contains(page, "<boom>") {
		t.Error("failure text is not escaped")
	}
	// The world's earlier restore (exit code 1, no tails) is listed too.
	if n := strings.Count(page, `class="box failbox run"`); n != 2 {
		t.Errorf("%d failed runs shown, want 2", n)
	}
}
