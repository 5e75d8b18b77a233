package e2e

import (
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep/internal/e2ekit"
)

// The base repository of the product scenario: a tiny Go module whose
// Counter.Add method is defined in counter.go and used in double.go.
var goModule = map[string]string{
	"go.mod": "module example.com/calc\n\ngo 1.22\n",
	"calc/counter.go": `package calc

// Counter counts.
type Counter struct{ n int }

// Add adds d.
func (c *Counter) Add(d int) { c.n += d }

// Value returns the count.
func (c *Counter) Value() int { return c.n }
`,
	"calc/double.go": `package calc

// Double doubles the count.
func Double(c *Counter) { c.Add(c.Value()) }
`,
	"calc/calc_test.go": `package calc

import "testing"

func TestDouble(t *testing.T) {
	var c Counter
	c.Add(21)
	Double(&c)
	if c.Value() != 42 {
		t.Fatalf("got %d, want 42", c.Value())
	}
}
`,
}

// runner is a `lockstep runner` process.
type runner struct {
	cmd    *exec.Cmd
	stdout *e2ekit.SyncBuffer
	stderr *e2ekit.SyncBuffer
	done   chan struct{}
}

// startRunner runs `lockstep runner --repo repo --check name -- go test ./...`
// with a ci key and waits until its hook is registered.
func (s *server) startRunner(t *testing.T, ciKey, repo, name string, command ...string) *runner {
	t.Helper()
	return s.startRunnerWith(t, ciKey, repo, name, nil, command...)
}

// startRunnerWith is startRunner with extra runner flags.
func (s *server) startRunnerWith(t *testing.T, ciKey, repo, name string, flags []string, command ...string) *runner {
	t.Helper()
	if len(command) == 0 {
		command = []string{"go", "test", "./..."}
	}
	args := append([]string{"runner", "--repo", repo, "--check", name, "--timeout", "3m"}, flags...)
	cmd := exec.Command(e2ekit.Binary, append(append(args, "--"), command...)...)
	home := t.TempDir()
	cmd.Env = append(e2ekit.CleanEnv(), "LOCKSTEP_URL="+s.URL, "LOCKSTEP_KEY="+ciKey,
		"GOFLAGS=-mod=mod", "GOCACHE="+goCache, "GOTOOLCHAIN=local", "GOPATH="+filepath.Join(home, "gopath"),
		"GOPROXY=off", "GOWORK=off", "CGO_ENABLED=0")
	r := &runner{cmd: cmd, stdout: &e2ekit.SyncBuffer{}, stderr: &e2ekit.SyncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = r.stdout, r.stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start runner: %v", err)
	}
	go func() { cmd.Wait(); close(r.done) }()
	t.Cleanup(func() {
		select {
		case <-r.done:
		default:
			cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-r.done:
			case <-time.After(30 * time.Second):
				cmd.Process.Kill()
				<-r.done
			}
		}
		if t.Failed() {
			t.Logf("runner stdout:\n%s\nrunner stderr:\n%s", r.stdout, r.stderr)
		}
		if strings.Contains(r.stderr.String(), "WARNING: DATA RACE") {
			t.Errorf("BUG: the runner reported a data race:\n%s", r.stderr)
		}
	})
	eventually(t, 60*time.Second, "the runner's hook", func() bool {
		select {
		case <-r.done:
			t.Fatalf("runner exited:\n%s\n%s", r.stdout, r.stderr)
		default:
		}
		var out struct {
			Hooks []struct {
				ID     string `json:"id"`
				Active bool   `json:"active"`
			} `json:"hooks"`
		}
		s.MustJSON(t, "GET", "/api/v1/repos/"+repo+"/hooks", s.AdminKey, nil, http.StatusOK, &out)
		return len(out.Hooks) > 0
	})
	return r
}

// TestProductScenario is the gate issue's story: CI (a real `lockstep
// runner` running `go test ./...`) gates what agents promote into main.
func TestProductScenario(t *testing.T) {
	t.Parallel()
	s := startGateServer(t, serverOpts{})
	s.CreateRepo(t, "base")
	base0 := s.push(t, s.AdminKey, "base", zeroOID, goModule).Commit
	s.setGate(t, "base", map[string]any{"required_checks": []string{"tests"}})
	ci := s.CreateKey(t, "ci-runner", "ci")
	agentA := s.CreateKey(t, "agent-a", "agent")
	agentB := s.CreateKey(t, "agent-b", "agent")
	agentC := s.CreateKey(t, "agent-c", "agent")
	s.startRunner(t, ci.Secret, "base", "tests")

	if got := s.forkTip(t, agentA.Secret, "base", "ws-a"); got != base0 {
		t.Fatalf("ws-a base commit %s, want %s", got, base0)
	}
	s.forkTip(t, agentB.Secret, "base", "ws-b")
	s.forkTip(t, agentC.Secret, "base", "ws-c") // forked from the OLD base, promoted last

	// Agent B renames Add in the file that defines it, misses its call in
	// double.go: the build breaks, so the tests fail.
	bFiles := with(goModule, map[string]string{
		"calc/counter.go":   strings.ReplaceAll(goModule["calc/counter.go"], "Add", "Increment"),
		"calc/calc_test.go": strings.ReplaceAll(goModule["calc/calc_test.go"], "c.Add(21)", "c.Increment(21)"),
	})
	bCommit := s.push(t, agentB.Secret, "ws-b", base0, bFiles).Commit

	// Agent A adds a method and its test.
	aFiles := with(goModule, map[string]string{
		"calc/counter.go": goModule["calc/counter.go"] + `
// Reset sets the count to zero.
func (c *Counter) Reset() { c.n = 0 }
`,
		"calc/calc_test.go": goModule["calc/calc_test.go"] + `
func TestReset(t *testing.T) {
	var c Counter
	c.Add(3)
	c.Reset()
	if c.Value() != 0 {
		t.Fatalf("got %d after Reset", c.Value())
	}
}
`,
	})
	aCommit := s.push(t, agentA.Secret, "ws-a", base0, aFiles).Commit

	// Agent C, on the old base, adds a new file and its test: no overlap
	// with A.
	cFiles := with(goModule, map[string]string{
		"calc/triple.go": "package calc\n\n// Triple triples the count.\nfunc Triple(c *Counter) { c.Add(2 * c.Value()) }\n",
		"calc/triple_test.go": `package calc

import "testing"

func TestTriple(t *testing.T) {
	var c Counter
	c.Add(5)
	Triple(&c)
	if c.Value() != 15 {
		t.Fatalf("got %d, want 15", c.Value())
	}
}
`,
	})
	cCommit := s.push(t, agentC.Secret, "ws-c", base0, cFiles).Commit

	// B: the runner's check fails, promote is refused and names it.
	bCheck := s.waitCheck(t, "ws-b", bCommit, "tests", 4*time.Minute)
	if bCheck.Status != "failure" || bCheck.Key != "ci-runner" {
		t.Fatalf("ws-b tests: want failure by ci-runner, got %+v", bCheck)
	}
	if !strings.Contains(bCheck.Summary, "Add") {
		t.Errorf("ws-b failure summary should show the compiler error about Add:\n%s", bCheck.Summary)
	}
	reasons := s.promoteRefused(t, agentB.Secret, "ws-b", map[string]any{})
	if len(reasons) != 1 || reasons[0].Rule != "required_check" || !strings.Contains(reasons[0].Message, `"tests"`) ||
		!strings.Contains(reasons[0].Message, "failure") {
		t.Fatalf("ws-b promote reasons: want the failed check \"tests\", got %+v", reasons)
	}
	if h := s.Head(t, "base"); h != base0 {
		t.Fatalf("main moved after a refused promote: %s, want %s", h, base0)
	}
	// The failed attempt stays readable.
	if c := s.Commit(t, "ws-b", bCommit); c.Commit != bCommit {
		t.Fatalf("ws-b attempt: %+v", c)
	}
	var att struct {
		Attempts []struct {
			Commit string `json:"commit"`
		} `json:"attempts"`
	}
	s.MustJSON(t, "GET", "/api/v1/repos/ws-b/attempts", s.AdminKey, nil, http.StatusOK, &att)
	found := false
	for _, a := range att.Attempts {
		found = found || a.Commit == bCommit
	}
	if !found {
		t.Fatalf("ws-b attempts do not list %s: %+v", bCommit, att)
	}
	if got := s.Blob(t, "ws-b", bCommit, "calc/counter.go"); !strings.Contains(got, "Increment") {
		t.Fatalf("ws-b attempt content: %s", got)
	}

	// A: tests pass, promote lands (main had not moved: a fast-forward).
	if c := s.waitCheck(t, "ws-a", aCommit, "tests", 4*time.Minute); c.Status != "success" {
		t.Fatalf("ws-a tests: want success, got %+v", c)
	}
	resA := s.promote(t, agentA.Secret, "ws-a")
	mainA := s.Head(t, "base")
	if mainA == base0 || mainA != resA.Commit {
		t.Fatalf("after promoting ws-a main is %s (promote answered %s, old %s)", mainA, resA.Commit, base0)
	}
	if !strings.Contains(s.Blob(t, "base", "main", "calc/counter.go"), "Reset") {
		t.Fatalf("main lacks A's Reset")
	}

	// C: forked before A landed, tests pass, promote lands as a clean
	// two-parent merge commit on top of A.
	if c := s.waitCheck(t, "ws-c", cCommit, "tests", 4*time.Minute); c.Status != "success" {
		t.Fatalf("ws-c tests: want success, got %+v", c)
	}
	resC := s.promote(t, agentC.Secret, "ws-c")
	if !resC.Clean || resC.FastForward {
		t.Fatalf("ws-c promote: want a clean merge commit, got %+v", resC)
	}
	mainC := s.Head(t, "base")
	mc := s.Commit(t, "base", mainC)
	if mainC != resC.Commit || len(mc.Parents) != 2 || mc.Parents[0] != mainA || mc.Parents[1] != cCommit {
		t.Fatalf("new main %s: want parents [%s %s], got %+v", mainC, mainA, cCommit, mc)
	}

	// The real git CLI agrees, and the merged main builds and passes.
	dir := filepath.Join(t.TempDir(), "clone")
	e2ekit.Git(t, "", "clone", "-q", s.GitURL("base", s.AdminKey), dir)
	if got := e2ekit.Git(t, dir, "rev-parse", "HEAD"); got != mainC {
		t.Fatalf("git clone HEAD %s, want %s", got, mainC)
	}
	if got := strings.Fields(e2ekit.Git(t, dir, "log", "-1", "--format=%P")); len(got) != 2 || got[0] != mainA || got[1] != cCommit {
		t.Fatalf("git log parents of main: %v", got)
	}
	if got := e2ekit.Git(t, dir, "status", "--porcelain"); got != "" {
		t.Fatalf("merged checkout not clean: %s", got)
	}
	for _, f := range []string{"calc/triple.go", "calc/triple_test.go"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Fatalf("merged main lacks %s: %v", f, err)
		}
	}
	gt := exec.Command("go", "test", "./...")
	gt.Dir = dir
	gt.Env = append(e2ekit.CleanEnv(), "GOFLAGS=-mod=mod", "GOCACHE="+goCache, "GOTOOLCHAIN=local", "GOPROXY=off", "GOWORK=off", "CGO_ENABLED=0")
	if out, err := gt.CombinedOutput(); err != nil {
		t.Fatalf("go test on merged main: %v\n%s", err, out)
	}

	// The workspaces end promoted; B is still active; the log names who.
	for ws, want := range map[string]string{"ws-a": "promoted", "ws-b": "active", "ws-c": "promoted"} {
		var info struct {
			Status string `json:"status"`
		}
		s.MustJSON(t, "GET", "/api/v1/repos/"+ws, s.AdminKey, nil, http.StatusOK, &info)
		if info.Status != want {
			t.Errorf("%s status %q, want %q", ws, info.Status, want)
		}
	}
	var refused, landed int
	for _, e := range s.Oplog(t, url.Values{"op": {"promote"}}) {
		switch e.Result {
		case "gate_failed":
			refused++
		case "ok", "":
			landed++
		}
	}
	if refused != 1 || landed != 2 {
		t.Errorf("oplog promote entries: %d refused, %d landed; want 1 and 2", refused, landed)
	}
}

// TestCheckCountsOnlyForItsCommit: a success on an earlier commit does
// not let the new tip through.
func TestCheckCountsOnlyForItsCommit(t *testing.T) {
	t.Parallel()
	s := startGateServer(t, serverOpts{})
	s.CreateRepo(t, "base")
	base0 := s.push(t, s.AdminKey, "base", zeroOID, map[string]string{"README": "hello\n"}).Commit
	s.setGate(t, "base", map[string]any{"required_checks": []string{"tests"}})
	ci := s.CreateKey(t, "ci", "ci")
	agent := s.CreateKey(t, "agent", "agent")
	s.forkTip(t, agent.Secret, "base", "ws")

	first := s.push(t, agent.Secret, "ws", base0, map[string]string{"README": "hello\n", "a.txt": "a\n"}).Commit
	s.postCheck(t, ci.Secret, "ws", first, "tests", "success")
	second := s.push(t, agent.Secret, "ws", first, map[string]string{"README": "hello\n", "a.txt": "a\n", "b.txt": "b\n"}).Commit

	reasons := s.promoteRefused(t, agent.Secret, "ws", map[string]any{})
	if len(reasons) != 1 || reasons[0].Rule != "required_check" || !strings.Contains(reasons[0].Message, "no result") ||
		!strings.Contains(reasons[0].Message, second[:12]) {
		t.Fatalf("want a missing check for %s, got %+v", second[:12], reasons)
	}
	if h := s.Head(t, "base"); h != base0 {
		t.Fatalf("main moved: %s", h)
	}
	// pending does not count either
	s.postCheck(t, ci.Secret, "ws", second, "tests", "pending")
	reasons = s.promoteRefused(t, agent.Secret, "ws", map[string]any{})
	if len(reasons) != 1 || !strings.Contains(reasons[0].Message, "pending") {
		t.Fatalf("want a pending check, got %+v", reasons)
	}
	// the newest result for the exact commit decides
	s.postCheck(t, ci.Secret, "ws", second, "tests", "success")
	res := s.promote(t, agent.Secret, "ws")
	if h := s.Head(t, "base"); h != res.Commit || h != second {
		t.Fatalf("main %s after promote, want the fast-forward to %s", h, second)
	}
}
