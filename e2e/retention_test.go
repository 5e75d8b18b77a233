package e2e

import (
	"strings"
	"testing"
	"time"
)

// TestRetentionCLIAndSweeper (issue 28 item 2): `lockstep repo retention`
// shows the policy (off by default), sets the flags given, refuses a bad
// age; a running server's sweeper (--retention-interval 1s) then abandons
// an idle workspace as the system key. It polls for the outcome (up to
// 30 s): the ages are real time in a real server.
func TestRetentionCLIAndSweeper(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOpts{Args: []string{"--retention-interval", "1s"}})
	key := s.AdminKey
	if cr := s.CLI(t, key, "", "repo", "create", "app"); cr.Code != 0 {
		t.Fatalf("repo create: %s", cr)
	}
	if cr := s.CLI(t, key, "", "repo", "retention", "app"); cr.Code != 0 || !strings.Contains(cr.Stdout, "retention of app: off") {
		t.Fatalf("default: %s", cr)
	}
	if cr := s.CLI(t, key, "", "repo", "retention", "app", "--abandon-after", "7 days"); cr.Code == 0 {
		t.Fatalf("a bad age was accepted: %s", cr)
	}
	if cr := s.CLI(t, key, "", "repo", "retention", "app", "--delete-after", "30d", "--archive-failed"); cr.Code != 0 ||
		!strings.Contains(cr.Stdout, "abandon after 0, delete after 30d, archive failed true") {
		t.Fatalf("set delete-after: %s", cr)
	}
	if cr := s.CLI(t, key, "", "fork", "app", "ws1"); cr.Code != 0 {
		t.Fatalf("fork: %s", cr)
	}
	if cr := s.CLI(t, key, "", "repo", "retention", "app", "--abandon-after", "1s"); cr.Code != 0 ||
		!strings.Contains(cr.Stdout, "abandon after 1s, delete after 30d, archive failed true") {
		t.Fatalf("set abandon-after (the other settings kept): %s", cr)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		cr := s.CLI(t, key, "", "repo", "show", "ws1")
		if strings.Contains(cr.Stdout, "abandoned") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ws1 not abandoned by the sweeper after 30 s: %s", cr)
		}
		time.Sleep(200 * time.Millisecond)
	}
	cr := s.CLI(t, key, "", "oplog", "--repo", "ws1", "--json")
	if cr.Code != 0 || !strings.Contains(cr.Stdout, `"workspace.abandoned"`) || !strings.Contains(cr.Stdout, `"system"`) || !strings.Contains(cr.Stdout, "abandon after 1s") {
		t.Fatalf("oplog of ws1: %s", cr)
	}
}
