package web_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep/internal/testenv"
	"github.com/lockstep-hq/lockstep/web"
)

// addTask gives the world three attempts at task t-45: t45-a changes
// main.go and passes its check, t45-b also adds util.go and has a failed
// run (exit code 3), t45-c has pushed nothing yet. It returns the tips.
func (w *uiWorld) addTask(t *testing.T) (a, b string) {
	t.Helper()
	for _, n := range []string{"t45-a", "t45-b", "t45-c"} {
		w.api(t, "POST", "/api/v1/repos/app/forks", w.agent, `{"name":"`+n+`","task":"t-45"}`, 201)
	}
	base := map[string]string{"README.md": "# app\n", "logo.png": "\x89PNG\x00\x01\x02"}
	with := func(extra map[string]string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	a = w.push(t, "t45-a", w.agent, w.baseHead, "attempt a", with(map[string]string{"main.go": "package main\n\nfunc main() {\n\tprintln(\"a\")\n}\n"}), 201)
	w.api(t, "POST", "/api/v1/repos/t45-a/commits/"+a+"/checks", w.ci, `{"name":"ci/test","status":"success","summary":"ok 3 tests in 0.2s"}`, 201)
	cp := w.api(t, "POST", "/api/v1/repos/t45-b/checkpoints", w.agent, `{"label":"before b"}`, 201)
	// b's first try fails its run and is rolled back; the second stays.
	broken := w.push(t, "t45-b", w.agent, w.baseHead, "attempt b (broken)", with(map[string]string{"main.go": "package main\n\nfunc main() { helpr() }\n"}), 201)
	w.api(t, "POST", "/api/v1/repos/t45-b/checkpoints/"+cp["id"].(string)+"/restore", w.agent,
		`{"expect_oid":"`+broken+`","failure":{"command":["go","test","-run","Test Helper"],"exit_code":3,"duration_ms":1500,"stderr_tail":"--- FAIL: TestHelper\n`+strings.Repeat("x", 200)+`"}}`, 200)
	tip := w.api(t, "GET", "/api/v1/repos/t45-b/refs", w.agent, "", 200)
	b = w.push(t, "t45-b", w.agent, refOID(t, tip, "refs/heads/main"), "attempt b", with(map[string]string{"main.go": "package main\n\nfunc main() { helper() }\n", "util.go": "package main\n\nfunc helper() {}\n"}), 201)
	w.api(t, "POST", "/api/v1/repos/t45-b/commits/"+b+"/checks", w.ci, `{"name":"ci/test","status":"failure","summary":"util_test.go:9: want 2, got 3"}`, 201)
	return a, b
}

func refOID(t *testing.T, m map[string]any, name string) string {
	t.Helper()
	refs, _ := m["refs"].([]any)
	for _, r := range refs {
		if r, ok := r.(map[string]any); ok && r["name"] == name {
			return r["oid"].(string)
		}
	}
	t.Fatalf("no ref %s in %v", name, m)
	return ""
}

func TestUITaskCompare(t *testing.T) {
	w := mustUIWorld(t)
	a, b := w.addTask(t)
	rev := w.login(t, w.reviewer)
	page := func(path string, want int) string {
		t.Helper()
		status, body, _ := w.get(t, rev, path)
		if status != want {
			t.Fatalf("GET %s: %d, want %d: %.300s", path, status, want, body)
		}
		return body
	}

	start := time.Now()
	task := page("/ui/repos/app/tasks/t-45", 200)
	t.Logf("task page with 3 attempts: %v", time.Since(start))
	mustContain(t, "task", task,
		`href="/ui/repos/t45-a"`, `href="/ui/repos/t45-b"`, `href="/ui/repos/t45-c"`, // one column per attempt
		a[:10], b[:10], // tips
		"ok 3 tests in 0.2s", "util_test.go:9: want 2, got 3", // check summaries shown, not only in a title
		"exit code 3", "go test -run &#39;Test Helper&#39;", // failed run of t45-b
		"✓ protected_path", "required_check", // gate rules met / unmet
		`class="list matrix"`, `<td class="path">util.go</td>`, `<td class="path">main.go</td>`,
		`action="/ui/repos/app/compare"`, `<option value="t45-a:main" selected>`, `<option value="t45-b:main" selected>`,
		`data-live="/ui/events?repo=app&amp;repo=t45-a`, `<script src="/ui/live.js"></script>`)
	// The matrix: util.go was touched by t45-b only, main.go by a and b.
	row := regexp.MustCompile(`<td class="path">util.go</td>(.*?)</tr>`).FindStringSubmatch(task)
	if row == nil || strings.Count(row[1], "●") != 1 || strings.Count(row[1], `<span class="muted">·</span>`) != 2 {
		t.Errorf("util.go matrix row: %v", row)
	}
	row = regexp.MustCompile(`<td class="path">main.go</td>(.*?)</tr>`).FindStringSubmatch(task)
	if row == nil || strings.Count(row[1], "●") != 2 {
		t.Errorf("main.go matrix row: %v", row)
	}
	// Picking two attempts is a plain GET of the compare page.
	cmp := page("/ui/repos/app/compare?base=t45-a:main&head=t45-b:main", 200)
	mustContain(t, "compare two attempts", cmp, "util.go", "helper()")

	// The repository page lists tasks with counts by status (and links
	// the task from each workspace row).
	repo := page("/ui/repos/app", 200)
	mustContain(t, "repository tasks", repo, `id="tasks"`, `href="/ui/repos/app/tasks/t-45"`, "<td>3</td>",
		`href="/ui/repos/app?task=t-45&amp;status=active">3</a>`)
	// A workspace page links its task.
	mustContain(t, "workspace task link", page("/ui/repos/t45-b", 200), `href="/ui/repos/app/tasks/t-45"`)

	page("/ui/repos/app/tasks/nope", http.StatusNotFound)
	page("/ui/repos/t45-a/tasks/t-45", http.StatusBadRequest)
}

// TestUIAttemptNumbers: attempts are numbered within their workspace
// (1, 2 …), not by the global sequence shared by all workspaces.
func TestUIAttemptNumbers(t *testing.T) {
	w := mustUIWorld(t)
	w.addTask(t)
	for _, ws := range []string{"task-1", "t45-a"} {
		req, _ := http.NewRequest("GET", w.srv.URL+"/api/v1/repos/"+ws+"/attempts", nil)
		req.Header.Set("Authorization", "Bearer "+w.reviewer)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			Attempts []struct {
				Seq    int64 `json:"seq"`
				Number int64 `json:"number"`
			} `json:"attempts"`
		}
		json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if len(body.Attempts) == 0 {
			t.Fatalf("%s: no attempts", ws)
		}
		for i, at := range body.Attempts { // newest first
			if want := int64(len(body.Attempts) - i); at.Number != want {
				t.Errorf("%s attempt seq %d: number %d, want %d", ws, at.Seq, at.Number, want)
			}
		}
		if ws == "t45-a" && body.Attempts[0].Seq == 1 {
			t.Errorf("t45-a's attempt has global seq 1: the test does not tell numbers from seqs")
		}
	}
	_, page, _ := w.get(t, w.login(t, w.reviewer), "/ui/repos/t45-a")
	mustContain(t, "workspace attempts", page, `title="attempt 1 of this workspace`)
}

// TestUIOplogReadable: details are fields, commands unescaped, long values
// folded; a check's summary is shown next to its badge.
func TestUIOplogReadable(t *testing.T) {
	w := mustUIWorld(t)
	w.addTask(t)
	rev := w.login(t, w.reviewer)
	_, op, _ := w.get(t, rev, "/ui/oplog?repo=t45-b&op=run.failed")
	mustContain(t, "oplog fields", op, `<dl class="fields">`, `<dt>command</dt><dd>go test -run &#39;Test Helper&#39;</dd>`, `<dt>exit_code</dt><dd>3</dd>`)
	if strings.Contains(op, "[&#34;go&#34;") || strings.Contains(op, `["go"`) {
		t.Error("the command is shown as JSON")
	}
	if !regexp.MustCompile(`<dt>stderr_tail</dt><dd><details><summary>--- FAIL: TestHelper…</summary><pre class="tail">--- FAIL: TestHelper\nx{200}</pre></details>`).MatchString(op) {
		t.Error("a long detail is not folded")
	}
	_, ws, _ := w.get(t, rev, "/ui/repos/task-1")
	mustContain(t, "check summary", ws, `ci/test: failure</span><pre class="summary">main.go:4: syntax error: unexpected newline</pre>`)
}

// sseStream opens /ui/events as a signed-in browser and returns the data
// lines as they arrive, once the stream said it is ready.
func sseStream(t *testing.T, w *uiWorld, query string) <-chan string {
	t.Helper()
	c := w.login(t, w.reviewer)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, "GET", w.srv.URL+"/ui/events"+query, nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("events: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	sc := bufio.NewScanner(resp.Body)
	ready := false
	for sc.Scan() {
		if sc.Text() == "event: ready" {
			ready = true
		}
		if ready && sc.Text() == "" {
			break
		}
	}
	out := make(chan string, 100)
	go func() {
		defer close(out)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				out <- d
			}
		}
	}()
	return out
}

type liveEv struct {
	Seq   int64    `json:"seq"`
	Op    string   `json:"op"`
	Repos []string `json:"repos"`
}

func nextEvent(t *testing.T, ch <-chan string) liveEv {
	t.Helper()
	d, ok := <-ch
	if !ok {
		t.Fatal("the event stream ended")
	}
	var ev liveEv
	if err := json.Unmarshal([]byte(d), &ev); err != nil {
		t.Fatalf("event %q: %v", d, err)
	}
	return ev
}

// TestUILiveEvents: a push to a workspace arrives on the stream of a page
// showing it; events of other repositories do not.
func TestUILiveEvents(t *testing.T) {
	w := mustUIWorld(t)
	w.api(t, "POST", "/api/v1/repos/app/forks", w.agent, `{"name":"live-1"}`, 201)
	ch := sseStream(t, w, "?repo=live-1")
	w.api(t, "POST", "/api/v1/repos/app/forks", w.agent, `{"name":"elsewhere"}`, 201)
	c := w.push(t, "live-1", w.agent, w.baseHead, "live attempt", map[string]string{"README.md": "live\n"}, 201)
	ev := nextEvent(t, ch)
	if len(ev.Repos) != 1 || ev.Repos[0] != "live-1" || ev.Op == "" || ev.Seq == 0 {
		t.Fatalf("first event %+v, want the push to live-1 (%s)", ev, c)
	}
	// A check is an operation too.
	w.api(t, "POST", "/api/v1/repos/live-1/commits/"+c+"/checks", w.ci, `{"name":"ci/test","status":"success"}`, 201)
	if ev2 := nextEvent(t, ch); ev2.Seq <= ev.Seq || ev2.Repos[0] != "live-1" {
		t.Fatalf("check event %+v after %+v", ev2, ev)
	}
	// A new workspace shows on its base's pages (the repository and task
	// pages follow the base).
	base := sseStream(t, w, "?repo=app")
	w.api(t, "POST", "/api/v1/repos/app/forks", w.agent, `{"name":"t9-a","task":"t-9"}`, 201)
	if ev := nextEvent(t, base); ev.Op != "fork" || len(ev.Repos) < 2 || ev.Repos[0] != "t9-a" || ev.Repos[1] != "app" {
		t.Fatalf("fork event %+v", ev)
	}
}

// TestUILiveAcrossReplicas: two servers sharing one Redis (as replicas
// do): an operation on one reaches a page open on the other.
func TestUILiveAcrossReplicas(t *testing.T) {
	rdb, prefix := testenv.MustRedis(t)
	withRedis := func(s *web.Server) { s.Redis, s.EventsChannel = rdb, prefix+"ui-events" }
	a := mustUIWorld(t, withRedis)
	b := mustUIWorld(t, withRedis)
	ch := sseStream(t, b, "")
	a.api(t, "POST", "/api/v1/repos/app/forks", a.agent, `{"name":"replica-x"}`, 201)
	a.push(t, "replica-x", a.agent, a.baseHead, "on replica a", map[string]string{"README.md": "a\n"}, 201)
	for seen := 0; seen < 2; {
		ev := nextEvent(t, ch)
		for _, r := range ev.Repos {
			if r == "replica-x" {
				seen++
			}
		}
	}
}
