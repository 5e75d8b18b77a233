package e2egate

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRunnerStopMidRun: a runner stopped (SIGTERM) while its command runs
// must not report the commit as failing: the command did not fail, the
// runner went away. It reports error (an infrastructure problem), removes
// its hook, and leaves no process behind.
func TestRunnerStopMidRun(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOpts{})
	s.CreateRepo(t, "base")
	base0 := s.push(t, s.AdminKey, "base", zeroOID, map[string]string{"README": "hi\n"}).Commit
	ci := s.CreateKey(t, "ci", "ci")
	agent := s.CreateKey(t, "agent", "agent")
	marker := filepath.Join(t.TempDir(), "started")
	r := s.startRunner(t, ci.Secret, "base", "slow", "sh", "-c", "touch "+marker+" && exec sleep 120")
	s.fork(t, agent.Secret, "base", "ws")
	tip := s.push(t, agent.Secret, "ws", base0, map[string]string{"README": "hi\n", "x": "x\n"}).Commit

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
