package e2e

import (
	"bytes"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	hookdelivery "github.com/lockstep-hq/lockstep/delivery"
)

// TestRunnerStopMidRun: a runner stopped (SIGTERM) while its command runs
// must not report the commit as failing: the command did not fail, the
// runner went away. It reports error (an infrastructure problem), removes
// its hook, and leaves no process behind.
func TestRunnerStopMidRun(t *testing.T) {
	t.Parallel()
	s := startGateServer(t, serverOpts{})
	s.CreateRepo(t, "base")
	base0 := s.push(t, s.AdminKey, "base", zeroOID, map[string]string{"README": "hi\n"}).Commit
	ci := s.CreateKey(t, "ci", "ci")
	agent := s.CreateKey(t, "agent", "agent")
	marker := filepath.Join(t.TempDir(), "started")
	// The workspace's tip exists before the runner starts: the runner
	// tests it on start (and a fork racing its start-up scan would give it
	// a second, earlier commit to run).
	s.forkTip(t, agent.Secret, "base", "ws")
	tip := s.push(t, agent.Secret, "ws", base0, map[string]string{"README": "hi\n", "x": "x\n"}).Commit
	r := s.startRunner(t, ci.Secret, "base", "slow", "sh", "-c", "touch "+marker+" && exec sleep 120")

	// The receiver refuses a forged delivery (the secret is the runner's).
	var hooks struct {
		Hooks []struct {
			URL string `json:"url"`
		} `json:"hooks"`
	}
	s.MustJSON(t, "GET", "/api/v1/repos/base/hooks", s.AdminKey, nil, http.StatusOK, &hooks)
	forged := `{"event":"push","repository":"base","workspace":"ws","commit":"` + base0 + `","delivery_id":"dlv_forged"}`
	resp, err := http.Post(hooks.Hooks[0].URL, "application/json", strings.NewReader(forged))
	if err != nil {
		t.Fatalf("post a forged delivery: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("forged delivery: runner answered %d, want 401", resp.StatusCode)
	}

	eventually(t, 60*time.Second, "the command to start", func() bool {
		_, err := os.Stat(marker)
		return err == nil
	})
	if cs := s.checks(t, "ws", tip); len(cs.Checks) != 1 || cs.Checks[0].Status != "pending" {
		t.Fatalf("while running: %+v", cs)
	}
	r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.done:
	case <-time.After(60 * time.Second):
		t.Fatal("the runner did not exit on SIGTERM")
	}
	if cs := s.checks(t, "ws", base0); len(cs.History) != 0 {
		t.Errorf("the forged delivery ran: %+v", cs)
	}
	cs := s.checks(t, "ws", tip)
	if len(cs.Checks) != 1 {
		t.Fatalf("checks after the runner stopped: %+v", cs)
	}
	if st := cs.Checks[0].Status; st == "failure" || st == "success" {
		t.Errorf("BUG: a runner stopped mid-run posted %q for %s: %q", st, tip[:12], cs.Checks[0].Summary)
	}
	var after struct {
		Hooks []struct {
			Active bool `json:"active"`
		} `json:"hooks"`
	}
	s.MustJSON(t, "GET", "/api/v1/repos/base/hooks", s.AdminKey, nil, http.StatusOK, &after)
	for _, h := range after.Hooks {
		if h.Active {
			t.Errorf("the stopped runner's hook is still active: %+v", after)
		}
	}
}

// TestRunnerRefusesReplayAndStale (issue 15): the real runner verifies the
// Standard Webhooks signature: a correctly signed delivery older than the
// tolerance is refused (401) and not run; a fresh one runs; the same
// delivery sent again (a captured request replayed) is refused (409) and
// not run again.
func TestRunnerRefusesReplayAndStale(t *testing.T) {
	t.Parallel()
	s := startGateServer(t, serverOpts{})
	s.CreateRepo(t, "base")
	base0 := s.push(t, s.AdminKey, "base", zeroOID, map[string]string{"README": "hi\n"}).Commit
	ci := s.CreateKey(t, "ci", "ci")
	agent := s.CreateKey(t, "agent", "agent")
	s.forkTip(t, agent.Secret, "base", "ws")
	// Pushed before the runner's hook exists: no real delivery for it.
	tip := s.push(t, agent.Secret, "ws", base0, map[string]string{"README": "hi\n", "x": "x\n"}).Commit

	dir := t.TempDir()
	const secret = "whsec_cnVubmVyLXRlc3Qtc2VjcmV0LWtleS1ieXRlcyE="
	secretFile := filepath.Join(dir, "secret")
	os.WriteFile(secretFile, []byte(secret+"\n"), 0o600)
	runs := filepath.Join(dir, "runs")
	s.startRunnerWith(t, ci.Secret, "base", "tests", []string{"--secret-file", secretFile}, "sh", "-c", "echo run >> "+runs)
	var hooks struct {
		Hooks []struct {
			URL string `json:"url"`
		} `json:"hooks"`
	}
	s.MustJSON(t, "GET", "/api/v1/repos/base/hooks", s.AdminKey, nil, http.StatusOK, &hooks)
	hookURL := hooks.Hooks[0].URL

	send := func(id string, ts time.Time) int {
		t.Helper()
		body := []byte(`{"event":"push","repository":"base","workspace":"ws","commit":"` + tip + `","delivery_id":"` + id + `"}`)
		req, _ := http.NewRequest("POST", hookURL, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("webhook-id", id)
		req.Header.Set("webhook-timestamp", strconv.FormatInt(ts.Unix(), 10))
		req.Header.Set("webhook-signature", hookdelivery.SignStandard(secret, id, ts, body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("send delivery: %v", err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := send("dlv_stale", time.Now().Add(-10*time.Minute)); code != http.StatusUnauthorized {
		t.Errorf("stale delivery: runner answered %d, want 401", code)
	}
	fresh := time.Now()
	if code := send("dlv_fresh", fresh); code != http.StatusAccepted {
		t.Fatalf("fresh delivery: runner answered %d, want 202", code)
	}
	if c := s.waitCheck(t, "ws", tip, "tests", 60*time.Second); c.Status != "success" {
		t.Fatalf("check: %+v", c)
	}
	if code := send("dlv_fresh", fresh); code != http.StatusConflict {
		t.Errorf("BUG: replayed delivery: runner answered %d, want 409", code)
	}
	b, _ := os.ReadFile(runs)
	if n := strings.Count(string(b), "run"); n != 1 {
		t.Errorf("the command ran %d times, want 1 (the stale and the replayed deliveries must not run)", n)
	}
	if h := s.checks(t, "ws", tip).History; len(h) != 2 { // pending, success
		t.Errorf("check history: %+v, want pending then success only", h)
	}
}

// TestRunnerTestsTipsPushedBeforeItStarted: in the README's order the
// agent pushes first and CI starts its runner second; no hook fires for
// the earlier push, so the runner must test the current tips on start or
// the promote is refused for a check that never comes. A failing check's
// summary quotes the failing test, not only the output's last lines.
func TestRunnerTestsTipsPushedBeforeItStarted(t *testing.T) {
	t.Parallel()
	s := startGateServer(t, serverOpts{})
	s.CreateRepo(t, "base")
	base0 := s.push(t, s.AdminKey, "base", zeroOID, map[string]string{"README": "hi\n"}).Commit
	ci := s.CreateKey(t, "ci", "ci")
	agent := s.CreateKey(t, "agent", "agent")
	s.forkTip(t, agent.Secret, "base", "ws")
	tip := s.push(t, agent.Secret, "ws", base0, map[string]string{"README": "hi\n", "x": "x\n"}).Commit
	// A failing test buried under 12 KB of later output.
	script := `echo "=== RUN   TestSum"; echo "--- FAIL: TestSum (0.00s)"; echo "    sum_test.go:9: got 3, want 4"; ` +
		`i=0; while [ $i -lt 1000 ]; do echo "later noise line $i"; i=$((i+1)); done; exit 1`
	s.startRunner(t, ci.Secret, "base", "tests", "sh", "-c", script)
	c := s.waitCheck(t, "ws", tip, "tests", 90*time.Second)
	if c.Status != "failure" {
		t.Fatalf("check of the tip pushed before the runner started: %+v", c)
	}
	for _, want := range []string{"--- FAIL: TestSum", "sum_test.go:9: got 3, want 4"} {
		if !strings.Contains(c.Summary, want) {
			t.Errorf("the failure summary does not quote %q:\n%.600s", want, c.Summary)
		}
	}
}
