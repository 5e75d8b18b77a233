package web_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep/internal/testenv"
)

// cdp drives headless Chromium over the DevTools protocol on a pipe
// (--remote-debugging-pipe: JSON messages separated by NUL bytes on fds 3
// and 4), so a test can keep a page open, act, and look at it again.
type cdp struct {
	t   *testing.T
	in  io.WriteCloser
	out *bufio.Reader
	mu  sync.Mutex
	id  int
}

func startCDP(t *testing.T) *cdp {
	t.Helper()
	chromium := testenv.Chromium(t)
	toChrome, chromeIn, err := os.Pipe() // chromium reads fd 3
	if err != nil {
		t.Fatal(err)
	}
	chromeOut, fromChrome, err := os.Pipe() // chromium writes fd 4
	if err != nil {
		t.Fatal(err)
	}
	// The profile and chromium's own temp files (its TMPDIR: a killed
	// browser leaves org.chromium.Chromium.* there) live in one directory
	// removed by hand: chromium's helper processes can still write into
	// it just after the browser exits, which fails t.TempDir's cleanup.
	scratch, err := os.MkdirTemp("", "lockstep-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	profile, tmp := filepath.Join(scratch, "profile"), filepath.Join(scratch, "tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
		"--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars", "--remote-debugging-pipe",
		"--user-data-dir="+profile, "about:blank")
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	cmd.ExtraFiles = []*os.File{toChrome, fromChrome}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	toChrome.Close()
	fromChrome.Close()
	t.Cleanup(func() {
		chromeIn.Close()
		cancel()
		cmd.Wait()
		chromeOut.Close()
		for i := 0; i < 50 && os.RemoveAll(scratch) != nil; i++ {
			time.Sleep(100 * time.Millisecond)
		}
	})
	return &cdp{t: t, in: chromeIn, out: bufio.NewReader(chromeOut)}
}

// call sends one command (to a page when session is set) and returns its
// result, skipping the events that arrive meanwhile.
func (c *cdp) call(session, method string, params any) json.RawMessage {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.id++
	msg := map[string]any{"id": c.id, "method": method, "params": params}
	if session != "" {
		msg["sessionId"] = session
	}
	b, _ := json.Marshal(msg)
	if _, err := c.in.Write(append(b, 0)); err != nil {
		c.t.Fatalf("cdp %s: %v", method, err)
	}
	for {
		raw, err := c.out.ReadBytes(0)
		if err != nil {
			c.t.Fatalf("cdp %s: %v", method, err)
		}
		var resp struct {
			ID     int             `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal(raw[:len(raw)-1], &resp); err != nil {
			c.t.Fatalf("cdp %s: %v", method, err)
		}
		if resp.ID != c.id {
			continue // an event
		}
		if resp.Error != nil {
			c.t.Fatalf("cdp %s: %s", method, resp.Error.Message)
		}
		return resp.Result
	}
}

// open loads url in a new tab of the given size and returns its session
// once the document has loaded.
func (c *cdp) open(url string) string {
	c.t.Helper()
	var tgt struct {
		TargetID string `json:"targetId"`
	}
	json.Unmarshal(c.call("", "Target.createTarget", map[string]any{"url": "about:blank"}), &tgt)
	var att struct {
		SessionID string `json:"sessionId"`
	}
	json.Unmarshal(c.call("", "Target.attachToTarget", map[string]any{"targetId": tgt.TargetID, "flatten": true}), &att)
	c.call(att.SessionID, "Emulation.setDeviceMetricsOverride", map[string]any{"width": 1200, "height": 820, "deviceScaleFactor": 1, "mobile": false})
	c.call(att.SessionID, "Page.navigate", map[string]any{"url": url})
	c.wait(att.SessionID, `document.readyState === "complete" && location.href !== "about:blank"`)
	return att.SessionID
}

// eval evaluates a JavaScript expression in the page and returns its value.
func (c *cdp) eval(session, expr string) any {
	c.t.Helper()
	var r struct {
		Result struct {
			Value any `json:"value"`
		} `json:"result"`
	}
	json.Unmarshal(c.call(session, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true}), &r)
	return r.Result.Value
}

// wait polls until expr is true in the page; a page that never gets there
// fails the test after a generous bound (no timing is asserted).
func (c *cdp) wait(session, expr string) {
	c.t.Helper()
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if c.eval(session, expr) == true {
			return
		}
	}
	c.t.Fatalf("page never satisfied %s; it shows: %.500v", expr, c.eval(session, "document.body && document.body.innerText"))
}

func (c *cdp) screenshot(session, file string) {
	c.t.Helper()
	var r struct {
		Data string `json:"data"`
	}
	json.Unmarshal(c.call(session, "Page.captureScreenshot", map[string]any{"format": "png"}), &r)
	b, err := base64.StdEncoding.DecodeString(r.Data)
	if err != nil || len(b) < 5_000 {
		c.t.Fatalf("screenshot %s: %v (%d bytes)", file, err, len(b))
	}
	if err := os.WriteFile(file, b, 0o644); err != nil {
		c.t.Fatal(err)
	}
}

// TestUIChromiumTaskAndLive opens the pages in real headless Chromium: the
// task page comparing three attempts, the workspace page with a failed
// run's evidence, and a live update — the workspace page stays open, an
// agent pushes through the API, and the page shows the new attempt
// without being reloaded. Screenshots of each page go to the test's temp
// dir (LOCKSTEP_UI_SHOTS=dir keeps them; docs/screenshots holds them).
func TestUIChromiumTaskAndLive(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test")
	}
	w := mustUIWorld(t)
	_, b := w.addTask(t)
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

	task := c.open(authed.URL + "/ui/repos/app/tasks/t-45")
	html, _ := c.eval(task, "document.querySelector('main').innerHTML").(string)
	mustContain(t, "chromium task", html, "t45-a", "t45-b", "t45-c", "util.go", "exit code 3", "ok 3 tests in 0.2s", b[:10])
	if n := c.eval(task, "document.querySelectorAll('table.matrix tbody tr').length"); n != float64(2) {
		t.Errorf("matrix rows: %v, want 2 (main.go, util.go)", n)
	}
	if n := c.eval(task, "document.querySelectorAll('table.cmp thead th.att').length"); n != float64(3) {
		t.Errorf("attempt columns: %v, want 3", n)
	}
	c.screenshot(task, filepath.Join(shots, "task.png"))

	ws := c.open(authed.URL + "/ui/repos/t45-b")
	html, _ = c.eval(ws, "document.querySelector('main').innerHTML").(string)
	mustContain(t, "chromium workspace failure", html, "Failed runs", "exit code 3", "--- FAIL: TestHelper", "1.5 s")
	c.screenshot(ws, filepath.Join(shots, "workspace.png"))

	for name, path := range map[string]string{"index.png": "/ui/", "repository.png": "/ui/repos/app", "oplog.png": "/ui/oplog"} {
		s := c.open(authed.URL + path)
		c.screenshot(s, filepath.Join(shots, name))
	}

	// Live: the page of t45-a is open and subscribed; a push arrives.
	live := c.open(authed.URL + "/ui/repos/t45-a")
	c.wait(live, `document.body.getAttribute("data-live-ready") === "1"`)
	c.eval(live, "window.__notReloaded = true")
	tip := w.api(t, "GET", "/api/v1/repos/t45-a/refs", w.agent, "", 200)
	next := w.push(t, "t45-a", w.agent, refOID(t, tip, "refs/heads/main"), "attempt a, second push", map[string]string{"README.md": "# app, live\n"}, 201)
	c.wait(live, fmt.Sprintf(`document.querySelector("main").innerHTML.includes(%q)`, next[:10]))
	if c.eval(live, "window.__notReloaded === true") != true {
		t.Error("the page was reloaded instead of updated in place")
	}
	if !strings.Contains(c.eval(live, "document.querySelector('main').innerText").(string), "attempt a, second push") {
		t.Error("the new attempt's message is not shown")
	}
	t.Logf("screenshots in %s", shots)
}
