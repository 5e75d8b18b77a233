package web_test

import (
	"regexp"
	"strings"
	"testing"
)

// TestUIReviewAids covers issue 27's reviewer items 11–13 at the HTML
// level: conflicts with their hunks, check summaries, restore commits,
// how a promoted workspace landed, a rolled-back workspace, gate reasons
// in the oplog, highlighted and split diffs, and the timeline.
func TestUIReviewAids(t *testing.T) {
	w := mustUIWorld(t)
	rev := w.login(t, w.reviewer)
	page := func(path string) string {
		t.Helper()
		status, body, _ := w.get(t, rev, path)
		if status != 200 {
			t.Fatalf("%s: %d\n%s", path, status, body)
		}
		return body
	}

	// A multi-line check summary keeps its line breaks and shows once.
	w.api(t, "POST", "/api/v1/repos/task-1/commits/"+w.failing+"/checks", w.ci,
		`{"name":"ci/lint","status":"failure","summary":"internal/very/long/path/to/parser_generated.go:1: x\nb.go:2: unused y"}`, 201)
	// A refused promote: its gate reasons are logged.
	w.api(t, "POST", "/api/v1/repos/task-1/promote", w.admin, `{}`, 412)

	ws := page("/ui/repos/task-1")
	mustContain(t, "summary", ws, "<pre class=\"summary\">internal/very/long/path/to/parser_generated.go:1: x\nb.go:2: unused y</pre>")
	if n := strings.Count(ws, "b.go:2: unused y"); n != 1 {
		t.Errorf("the check summary shows %d times on the workspace page, want once", n)
	}
	// The checkpoint restore after the failed run is labelled, not numbered.
	if !regexp.MustCompile(`title="an automatic restore commit \(checkpoint.restore\), not an attempt"><span class="tag">restore</span>`).MatchString(ws) {
		t.Error("the restore commit is not labelled restore in the attempts table")
	}
	// The timeline: pushes, checks, the failed run, the restore, the refused promote.
	mustContain(t, "timeline", ws, `<ol class="timeline">`, `class="tl-push"`, `class="tl-check"`, `tl-run`, `class="tl-restore"`,
		"<strong>check ci/lint failure</strong>", "<strong>promote refused</strong>", "<strong>restored a checkpoint</strong>")

	// Gate reasons in the oplog are a list, not JSON.
	op := page("/ui/oplog?repo=task-1&op=promote")
	mustContain(t, "oplog reasons", op, `<dt>reasons</dt><dd><ul class="reasons"><li>required_check: `)
	if strings.Contains(op, "&#34;rule&#34;") {
		t.Error("gate reasons are shown as JSON")
	}

	// Highlighted diffs, with the stylesheet served same-origin.
	commit := page("/ui/repos/task-1/commits/" + w.failing)
	mustContain(t, "highlight", commit, `<table class="diff chroma">`, `<span class="pfx">-</span>`, `<span class="nb">println</span>`,
		`<span class="s">&#34;hello, world&#34;</span>`, `<link rel="stylesheet" href="/ui/highlight.css">`,
		`href="/ui/repos/task-1/commits/`+w.failing+`?view=split"`)
	status, css, h := w.get(t, rev, "/ui/highlight.css")
	if status != 200 || !strings.HasPrefix(h.Get("Content-Type"), "text/css") || !strings.Contains(css, ".chroma .nb") {
		t.Errorf("highlight.css: %d %s\n%.300s", status, h.Get("Content-Type"), css)
	}
	// The split view: the deleted line left, its replacement right, in one row.
	split := page("/ui/repos/task-1/commits/" + w.failing + "?view=split")
	mustContain(t, "split", split, `<table class="diff split chroma">`, "<strong>Split</strong>")
	if !regexp.MustCompile(`<tr><td class="ln del">4</td><td class="code del">.*println.*</td><td class="ln add">4</td><td class="code add">.*println.*</td></tr>`).MatchString(split) {
		t.Errorf("split view does not pair the changed line:\n%s", split)
	}

	// A promoted workspace says who landed it, when, how and as what.
	w.api(t, "POST", "/api/v1/repos/app/forks", w.agent, `{"name":"task-2"}`, 201)
	c2 := w.push(t, "task-2", w.agent, w.baseHead, "add notes", map[string]string{
		"README.md": "# app\n", "main.go": "package main\n\nfunc main() {\n\tprintln(\"hello\")\n}\n", "NOTES.md": "notes\n", "logo.png": "\x89PNG\x00\x01\x02"}, 201)
	w.api(t, "POST", "/api/v1/repos/task-2/commits/"+c2+"/checks", w.ci, `{"name":"ci/test","status":"success"}`, 201)
	res := w.api(t, "POST", "/api/v1/repos/task-2/promote", w.admin, `{"mode":"squash"}`, 200)
	landed, _ := res["commit"].(string)
	p2 := page("/ui/repos/task-2")
	mustContain(t, "promoted", p2, `<div class="box landing" id="landing">`, "by <strong>admin</strong>", "mode <code>squash</code>",
		"into <code>app:main</code>", `href="/ui/repos/app/commits/`+landed+`"`, "<strong>Landed:</strong>")
	if strings.Contains(p2, "Not evaluated") {
		t.Error("a promoted workspace still says Not evaluated")
	}

	// A workspace whose change was rolled back has nothing to land.
	w.api(t, "POST", "/api/v1/repos/app/forks", w.agent, `{"name":"task-3"}`, 201)
	tip3 := w.push(t, "task-3", w.agent, landed, "try something", map[string]string{"README.md": "# broken\n"}, 201)
	w.api(t, "POST", "/api/v1/repos/task-3/rollback", w.agent, `{"to":"`+landed+`","expect_oid":"`+tip3+`"}`, 201)
	mustContain(t, "rolled back", page("/ui/repos/task-3"), "Rolled back: no net change")
	base := page("/ui/repos/app")
	if !regexp.MustCompile(`<a class="strong" href="/ui/repos/task-3">task-3</a>(?s:[^<]|<[^/]|</[^t]|</t[^r])*?rolled back: no net change</span>`).MatchString(base) {
		t.Error("the base page shows task-3 as ahead, not as rolled back")
	}
	if n := strings.Count(base, "rolled back: no net change</span>"); n != 1 {
		t.Errorf("%d workspaces shown as rolled back on the base page, want 1 (task-3)", n)
	}

	// Conflicts: the workspace and the base both change main.go's line 4.
	w.api(t, "POST", "/api/v1/repos/app/forks", w.agent, `{"name":"task-4"}`, 201)
	files := func(greeting string) map[string]string {
		return map[string]string{"README.md": "# app\n", "NOTES.md": "notes\n", "logo.png": "\x89PNG\x00\x01\x02",
			"main.go": "package main\n\nfunc main() {\n\tprintln(\"" + greeting + "\")\n}\n"}
	}
	w.push(t, "task-4", w.agent, landed, "greet the moon", files("hello, moon"), 201)
	w.push(t, "app", w.admin, landed, "greet the sun", files("hello, sun"), 201)
	for name, body := range map[string]string{
		"workspace": page("/ui/repos/task-4"),
		"compare":   page("/ui/repos/task-4/compare?base=app:main&head=main&from=merge-base"),
	} {
		mustContain(t, name+" conflicts", body, `<section class="conflicts" id="conflicts">`, `<span class="tag">content</span> <span class="path">main.go</span>`,
			`<pre class="side base">	println(&#34;hello&#34;)`, `<pre class="side ours">	println(&#34;hello, sun&#34;)`, `<pre class="side theirs">	println(&#34;hello, moon&#34;)`,
			"<pre class=\"markers\">&lt;&lt;&lt;&lt;&lt;&lt;&lt; app:main\n\tprintln(&#34;hello, sun&#34;)\n||||||| base\n\tprintln(&#34;hello&#34;)\n=======\n\tprintln(&#34;hello, moon&#34;)\n&gt;&gt;&gt;&gt;&gt;&gt;&gt; ")
	}
	if strings.Contains(ws, `id="conflicts"`) { // before the base moved
		t.Error("a workspace that merges cleanly shows a conflicts section")
	}
}

// TestUITaskCountsNoRestores: the task page's attempt count of a workspace
// leaves out the commit its checkpoint restore wrote (t45-b: two pushes
// and one restore).
func TestUITaskCountsNoRestores(t *testing.T) {
	w := mustUIWorld(t)
	w.addTask(t)
	_, page, _ := w.get(t, w.login(t, w.reviewer), "/ui/repos/app/tasks/t-45")
	mustContain(t, "task", page, `<span class="muted small">2 attempts</span>`)
	if strings.Contains(page, `<span class="muted small">3 attempts</span>`) {
		t.Error("the restore commit is counted as an attempt")
	}
}
