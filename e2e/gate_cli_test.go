package e2e

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestCLI drives the gate through the lockstep CLI: gate set/show,
// checks, promote (exit status 5 when the gate refuses), hooks.
func TestGateCLI(t *testing.T) {
	t.Parallel()
	s := startGateServer(t, serverOpts{})
	s.CreateRepo(t, "base")
	base0 := s.push(t, s.AdminKey, "base", zeroOID, map[string]string{"README": "hi\n"}).Commit
	ci := s.CreateKey(t, "ci", "ci")
	agent := s.CreateKey(t, "agent", "agent")

	type policy struct {
		Branch          string   `json:"branch"`
		RequiredChecks  []string `json:"required_checks"`
		MaxChangedFiles int      `json:"max_changed_files"`
		MaxChangedLines int      `json:"max_changed_lines"`
		ProtectedPaths  []string `json:"protected_paths"`
		RequireClean    *bool    `json:"require_clean_merge"`
		PromoteMode     string   `json:"promote_mode"`
	}
	var set, shown policy
	s.cliJSON(t, s.AdminKey, &set, "gate", "set", "base", "--require-check", "tests", "--require-check", "lint",
		"--max-files", "10", "--max-lines", "100", "--protect", "secrets/**", "--json")
	s.cliJSON(t, agent.Secret, &shown, "gate", "show", "base", "--json")
	want := policy{Branch: "main", RequiredChecks: []string{"tests", "lint"}, MaxChangedFiles: 10, MaxChangedLines: 100,
		ProtectedPaths: []string{"secrets/**"}, PromoteMode: "merge"}
	for _, p := range []policy{set, shown} {
		if p.RequireClean == nil || !*p.RequireClean {
			t.Errorf("gate: require_clean_merge not true: %+v", p)
		}
		p.RequireClean = nil
		if !reflect.DeepEqual(p, want) {
			t.Errorf("gate: got %+v, want %+v", p, want)
		}
	}
	// For people: the limits set read as numbers, none as "no limit"
	// (it printed "max changed lines: 0").
	if r := s.CLI(t, agent.Secret, "", "gate", "show", "base"); r.Code != 0 || !strings.Contains(r.Stdout, "max changed files: 10\n") || !strings.Contains(r.Stdout, "max changed lines: 100\n") {
		t.Errorf("gate show: %s", r)
	}
	if r := s.CLI(t, agent.Secret, "", "gate", "set", "base", "--require-check", "tests"); r.Code != 1 || !strings.Contains(r.Stderr, "permission") {
		t.Errorf("gate set by an agent: want exit 1 and a permission error, got %s", r)
	}
	if r := s.CLI(t, s.AdminKey, "", "gate", "set", "base", "--protect", "["); r.Code != 2 {
		t.Errorf("gate set with a bad glob: want exit 2, got %s", r)
	}

	// A hook to a receiver that answers 200.
	rcv := newReceiver(t, false, 0)
	var hook struct {
		ID     string   `json:"id"`
		URL    string   `json:"url"`
		Events []string `json:"events"`
	}
	s.cliJSON(t, ci.Secret, &hook, "hooks", "create", "base", "--hook-url", rcv.srv.URL, "--secret", hookSecret, "--event", "push", "--json")
	if hook.ID == "" || hook.URL != rcv.srv.URL || !reflect.DeepEqual(hook.Events, []string{"push"}) {
		t.Fatalf("hooks create: %+v", hook)
	}
	var hooks struct {
		Hooks []struct {
			ID     string `json:"id"`
			Active bool   `json:"active"`
		} `json:"hooks"`
	}
	s.cliJSON(t, ci.Secret, &hooks, "hooks", "list", "base", "--json")
	if len(hooks.Hooks) != 1 || hooks.Hooks[0].ID != hook.ID || !hooks.Hooks[0].Active {
		t.Fatalf("hooks list: %+v", hooks)
	}

	s.forkTip(t, agent.Secret, "base", "ws")
	tip := s.push(t, agent.Secret, "ws", base0, map[string]string{"README": "hi\n", "feature.txt": "new\n"}).Commit

	var ds struct {
		Deliveries []delivery `json:"deliveries"`
	}
	eventually(t, 30*time.Second, "the push delivery", func() bool {
		s.cliJSON(t, ci.Secret, &ds, "hooks", "deliveries", "base", hook.ID, "--json")
		return len(ds.Deliveries) == 1 && ds.Deliveries[0].Status == "succeeded"
	})
	if d := ds.Deliveries[0]; d.Event != "push" || len(d.History) != 1 || d.History[0].StatusCode != 200 || !strings.Contains(d.Payload, tip) {
		t.Errorf("delivery: %+v", d)
	}

	// Checks: ci posts, anyone reads.
	var posted check
	s.cliJSON(t, ci.Secret, &posted, "checks", "ws", tip, "--post", "tests", "--status", "failure", "--summary", "2 tests failed")
	if posted.Name != "tests" || posted.Status != "failure" || posted.Commit != tip || posted.Key != "ci" {
		t.Errorf("checks --post: %+v", posted)
	}
	if r := s.CLI(t, ci.Secret, "", "checks", "ws", tip, "--post", "tests", "--status", "done"); r.Code != 2 {
		t.Errorf("checks --status done: want exit 2, got %s", r)
	}
	if r := s.CLI(t, agent.Secret, "", "checks", "ws", tip, "--post", "tests", "--status", "success"); r.Code != 1 || !strings.Contains(r.Stderr, "permission") {
		t.Errorf("checks --post by an agent: want exit 1 and a permission error, got %s", r)
	}
	var cs checkSet
	s.cliJSON(t, agent.Secret, &cs, "checks", "ws", tip, "--json")
	if cs.Commit != tip || len(cs.Checks) != 1 || cs.Checks[0].Status != "failure" {
		t.Errorf("checks --json: %+v", cs)
	}
	if r := s.CLI(t, agent.Secret, "", "checks", "ws", tip); r.Code != 0 || !strings.Contains(r.Stdout, "tests") || !strings.Contains(r.Stdout, "failure") {
		t.Errorf("checks (table): %s", r)
	}

	// Promote refused: exit status 5, every reason on stderr.
	r := s.CLI(t, agent.Secret, "", "promote", "ws")
	if r.Code != 5 || !strings.Contains(r.Stderr, "gate refused") || !strings.Contains(r.Stderr, `"tests"`) || !strings.Contains(r.Stderr, `"lint"`) {
		t.Fatalf("promote with a failed and a missing check: want exit 5 naming tests and lint, got %s", r)
	}
	if r := s.CLI(t, agent.Secret, "", "promote", "ws", "--json"); r.Code != 5 {
		t.Fatalf("promote --json refused: want exit 5, got %s", r)
	}
	if h := s.Head(t, "base"); h != base0 {
		t.Fatalf("main moved: %s", h)
	}

	// Both checks succeed: promote lands.
	s.cliJSON(t, ci.Secret, &posted, "checks", "ws", tip, "--post", "tests", "--status", "success")
	s.cliJSON(t, ci.Secret, &posted, "checks", "ws", tip, "--post", "lint", "--status", "success")
	var res struct {
		Commit    string `json:"commit"`
		Workspace string `json:"workspace"`
		Into      string `json:"into"`
	}
	s.cliJSON(t, agent.Secret, &res, "promote", "ws", "--json")
	if res.Commit != tip || res.Workspace != "ws" || res.Into != "base:main" {
		t.Fatalf("promote --json: %+v", res)
	}
	if h := s.Head(t, "base"); h != tip {
		t.Fatalf("main %s after promote, want %s", h, tip)
	}
	// Human output of a successful promote (another workspace).
	s.forkTip(t, agent.Secret, "base", "ws2")
	tip2 := s.push(t, agent.Secret, "ws2", tip, map[string]string{"README": "hi\n", "feature.txt": "new\n", "more.txt": "more\n"}).Commit
	s.postCheck(t, ci.Secret, "ws2", tip2, "tests", "success")
	s.postCheck(t, ci.Secret, "ws2", tip2, "lint", "success")
	if r := s.CLI(t, agent.Secret, "", "promote", "ws2"); r.Code != 0 || !strings.Contains(r.Stdout, "promoted ws2 into base:main") || !strings.Contains(r.Stdout, tip2) {
		t.Fatalf("promote ws2: %s", r)
	}
	// Without limits, for people: "no limit".
	if r := s.CLI(t, s.AdminKey, "", "gate", "set", "base", "--require-check", "tests"); r.Code != 0 || !strings.Contains(r.Stdout, "max changed files: no limit\n") || !strings.Contains(r.Stdout, "max changed lines: no limit\n") {
		t.Errorf("gate set without limits: %s", r)
	}
}
