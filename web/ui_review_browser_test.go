package web_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
)

// TestUIChromiumReviewAids renders the review aids in real headless
// Chromium under the UI's CSP: the highlight stylesheet applies (tokens
// are coloured), check summaries keep their line breaks, the split view
// has two sides, and the conflicts of a workspace show base / ours /
// theirs side by side. Screenshots: split.png, conflicts.png,
// timeline.png (LOCKSTEP_UI_SHOTS=dir keeps them).
func TestUIChromiumReviewAids(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test")
	}
	w := mustUIWorld(t)
	a, _ := w.addTask(t)
	// A base change that conflicts with attempt a's main.go.
	w.push(t, "app", w.admin, w.baseHead, "greet the sun", map[string]string{"README.md": "# app\n", "logo.png": "\x89PNG\x00\x01\x02",
		"main.go": "package main\n\nfunc main() {\n\tprintln(\"hello, sun\")\n}\n"}, 201)
	w.api(t, "POST", "/api/v1/repos/t45-a/commits/"+a+"/checks", w.ci,
		`{"name":"ci/lint","status":"failure","summary":"main.go:4: line one\nmain.go:5: line two"}`, 201)
	authed := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		r.Header.Set("Cookie", "lockstep_session="+w.reviewer)
		w.handler.ServeHTTP(rw, r)
	}))
	t.Cleanup(authed.Close)
	shots := t.TempDir()
	if d := os.Getenv("LOCKSTEP_UI_SHOTS"); d != "" {
		shots = d
	}
	c := startCDP(t)

	split := c.open(authed.URL + "/ui/repos/task-1/commits/" + w.failing + "?view=split")
	if n := c.eval(split, "document.querySelector('table.diff.split tbody tr:not(.hunk)').children.length"); n != float64(4) {
		t.Errorf("split row cells: %v, want 4 (old number, old code, new number, new code)", n)
	}
	// A string token is coloured by /ui/highlight.css (the CSP lets it load).
	plain := c.eval(split, "getComputedStyle(document.querySelector('table.diff td.code')).color")
	str := c.eval(split, "getComputedStyle(document.querySelector('table.diff td.code span.s')).color")
	if str == nil || str == plain {
		t.Errorf("string tokens are not coloured: %v (plain text %v)", str, plain)
	}
	c.screenshot(split, filepath.Join(shots, "split.png"))

	ws := c.open(authed.URL + "/ui/repos/t45-a#conflicts")
	if n := c.eval(ws, "document.querySelectorAll('#conflicts .sides pre').length"); n != float64(3) {
		t.Errorf("conflict sides: %v, want 3 (base, ours, theirs)", n)
	}
	if ws := c.eval(ws, "getComputedStyle(document.querySelector('td.checks pre.summary')).whiteSpace"); ws != "pre-wrap" {
		t.Errorf("check summary white-space: %v, want pre-wrap", ws)
	}
	if h := c.eval(ws, "[...document.querySelectorAll('td.checks pre.summary')].find(p => p.textContent.includes('line two')).getBoundingClientRect().height > 20"); h != true {
		t.Error("a two-line check summary renders on one line")
	}
	c.screenshot(ws, filepath.Join(shots, "conflicts.png"))

	tl := c.open(authed.URL + "/ui/repos/t45-b#timeline")
	// The checkpoint restore: its commit and the restore's own entry.
	if n := c.eval(tl, "document.querySelectorAll('ol.timeline li.tl-restore').length"); n != float64(2) {
		t.Errorf("timeline restore items: %v, want 2", n)
	}
	c.screenshot(tl, filepath.Join(shots, "timeline.png"))
	t.Logf("screenshots in %s", shots)
}
