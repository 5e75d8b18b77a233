package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/api"
	"github.com/lockstep-hq/lockstep/client"
	"github.com/lockstep-hq/lockstep/internal/e2ekit"
)

// runResult is run_command's structured result (api.RunJob).
type runResult struct {
	ID     string
	State  string
	Error  string
	Result struct {
		CheckedOut   string `json:"checked_out"`
		ExitCode     int    `json:"exit_code"`
		Succeeded    bool
		RolledBack   bool   `json:"rolled_back"`
		PushedCommit string `json:"pushed_commit"`
		Evidence     string
		Residue      []string
		StdoutTail   string `json:"stdout_tail"`
		Error        string
	}
}

// runCommand calls run_command asking for progress and returns the
// result, whether it was a tool error, and the progress messages.
func runCommand(t *testing.T, cs *mcp.ClientSession, lines *progressLines, args map[string]any) (runResult, string, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	p := &mcp.CallToolParams{Name: "run_command", Arguments: args}
	p.SetProgressToken("run-" + args["workspace"].(string))
	res, err := cs.CallTool(ctx, p)
	if err != nil {
		t.Fatalf("run_command: protocol error: %v", err)
	}
	text := res.Content[0].(*mcp.TextContent).Text
	var out runResult
	if !res.IsError {
		if res.StructuredContent == nil {
			t.Fatalf("run_command: no structured content:\n%s", text)
		}
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatalf("run_command structured content: %v\n%s", err, b)
		}
	}
	return out, text, res.IsError
}

type progressLines struct {
	mu    sync.Mutex
	lines []string
}

func (p *progressLines) add(s string) { p.mu.Lock(); p.lines = append(p.lines, s); p.mu.Unlock() }

func (p *progressLines) has(sub string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.lines {
		if strings.Contains(l, sub) {
			return true
		}
	}
	return false
}

// eventually reports whether a line containing sub arrives within 10 s:
// the SDK hands progress notifications to their handler on goroutines of
// their own, so one may be handled after the call's answer was returned
// (a readiness wait, not a timing assertion).
func (p *progressLines) eventually(sub string) bool {
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if p.has(sub) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

func (p *progressLines) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return fmt.Sprintf("%q", p.lines)
}

// startJobRunner starts runner (a `lockstep runner --jobs` command) and
// waits until it has registered; at the end of the test it is stopped
// (SIGTERM), and its output logged if the test failed.
func startJobRunner(t *testing.T, runner *exec.Cmd) *e2ekit.SyncBuffer {
	t.Helper()
	out := &e2ekit.SyncBuffer{}
	runner.Stdout, runner.Stderr = out, out
	if err := runner.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		runner.Process.Signal(syscall.SIGTERM)
		runner.Wait()
		if t.Failed() {
			t.Logf("runner output:\n%s", out.String())
		}
	})
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(out.String(), "registered as"); { // a hang guard
		if time.Now().After(deadline) {
			t.Fatalf("the runner did not register:\n%s", out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return out
}

// TestMCPRunOnRunnerAcrossRestart is issue 24's "done when": an HTTP-only
// MCP client (the official Go SDK) drives the whole loop through a load
// balancer — fork, write with CAS, run the tests on a runner (`lockstep
// runner --jobs`, a separate process that dials out): a failing run is
// rolled back, a passing run pushed with CAS — then the server restarts
// (the client does not re-initialize, the runner reconnects), the base
// moves, sync, preflight clean, promote. Before any runner registers,
// run_command answers no_runner at once; the runner key can do nothing
// but take jobs.
func TestMCPRunOnRunnerAcrossRestart(t *testing.T) {
	s := e2ekit.StartServer(t, e2ekit.ServerOpts{})
	s.CreateRepo(t, "shop")
	s.PushWith(t, s.AdminKey, "shop", e2ekit.PushQuery("main", "", "force=true"), map[string]string{
		"app.txt": "one\ntwo\nthree\n",
		"test.sh": "grep -q fixed app.txt && echo 'tests pass'\n",
	})
	agent := s.CreateKey(t, "agent-run", "agent")
	runnerKey := s.CreateKey(t, "box", "runner")
	var target atomic.Pointer[url.URL]
	u, _ := url.Parse(s.URL)
	target.Store(u)
	lb := httptest.NewServer(&httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(target.Load()) }, FlushInterval: -1})
	defer lb.Close()
	lbServer := *s
	lbServer.URL = lb.URL

	var lines progressLines
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	mc := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) { lines.add(r.Params.Message) }})
	cs, err := mc.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: lb.URL + "/mcp",
		HTTPClient: &http.Client{Transport: bearer{agent.Secret}}, DisableStandaloneSSE: true}, nil)
	if err != nil {
		t.Fatalf("connect MCP over HTTP: %v", err)
	}
	defer cs.Close()

	// The tool advertises its output schema.
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range tools.Tools {
		if tl.Name == "run_command" && tl.OutputSchema == nil {
			t.Fatal("run_command has no outputSchema")
		}
	}

	mustTool(t, cs, "workspace_create", map[string]any{"repo": "shop", "name": "loop"}, nil)
	// No runner yet: a clear, immediate refusal.
	mustToolError(t, cs, "run_command", map[string]any{"workspace": "loop", "command": []string{"sh", "test.sh"}}, "no_runner")

	// A runner key takes jobs and nothing else.
	e2ekit.RequireError(t, "runner key forking", s.Call(t, "POST", "/api/v1/repos/shop/forks", runnerKey.Secret, map[string]string{"name": "mine"}, ""), 403, "permission_denied")

	// The runner: its own process, dialling out through the balancer.
	runner := exec.Command(e2ekit.Binary, "runner", "--jobs", "--workspaces", "loop", "--name", "e2e-box",
		"--driver", "copy", "--contain", "dir", "--egress", "off", "--state-root", t.TempDir(), "--instance-roots", t.TempDir(), "--work-dir", t.TempDir())
	runner.Env = append(e2ekit.CleanEnv(), "LOCKSTEP_URL="+lb.URL, "LOCKSTEP_KEY="+runnerKey.Secret, "XDG_CACHE_HOME="+t.TempDir())
	startJobRunner(t, runner)

	// Write with compare-and-swap: refused without expect_oid, naming the tip.
	text := mustToolError(t, cs, "file_write", map[string]any{"workspace": "loop", "path": "app.txt", "content": "x\n"}, "precondition_required")
	m := regexp.MustCompile(`expect_oid=([0-9a-f]{40})`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("the refusal names no tip:\n%s", text)
	}
	var w struct{ Commit string }
	mustTool(t, cs, "file_write", map[string]any{"workspace": "loop", "path": "app.txt", "content": "one\nTWO (agent)\nthree\n", "expect_oid": m[1]}, &w)

	// A failing run: it breaks app.txt, fails, and is rolled back.
	res, text, isErr := runCommand(t, cs, &lines, map[string]any{"workspace": "loop", "push_on_success": true,
		"command": []string{"sh", "-c", "echo broken > app.txt; echo about to fail; sh test.sh"}})
	if isErr || res.State != "done" || res.Result.Succeeded || !res.Result.RolledBack || res.Result.ExitCode != 1 || res.Result.PushedCommit != "" || res.Result.CheckedOut != w.Commit {
		t.Fatalf("failing run: %+v\n%s", res, text)
	}
	if !lines.eventually("stdout: about to fail") {
		t.Errorf("no progress notification carried the output line; got %s", &lines)
	}
	if got := s.Blob(t, "loop", "main", "app.txt"); got != "one\nTWO (agent)\nthree\n" {
		t.Fatalf("after the rolled-back run app.txt is %q", got)
	}

	// Restart behind the balancer: neither the client nor the runner
	// re-initializes.
	if code := s.Stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("graceful stop: exit %d", code)
	}
	s2 := s.Restart(t)
	u2, _ := url.Parse(s2.URL)
	target.Store(u2)

	// A passing run, pushed with CAS on the tip the runner checked out.
	tip := s2.Head(t, "loop")
	res, text, isErr = runCommand(t, cs, &lines, map[string]any{"workspace": "loop", "push_on_success": true,
		"command": []string{"sh", "-c", "sed -i 's/TWO (agent)/TWO (agent, fixed)/' app.txt && sh test.sh"}})
	if isErr || res.State != "done" || !res.Result.Succeeded || res.Result.PushedCommit == "" || res.Result.CheckedOut != tip {
		t.Fatalf("passing run (tip %s): %+v\n%s", tip, res, text)
	}
	if !lines.eventually("stdout: tests pass") {
		t.Errorf("no progress notification carried the passing output; got %s", &lines)
	}
	if got := s2.Blob(t, "loop", "main", "app.txt"); got != "one\nTWO (agent, fixed)\nthree\n" {
		t.Fatalf("after the pushed run app.txt is %q", got)
	}
	if head := s2.Head(t, "loop"); head != res.Result.PushedCommit {
		t.Fatalf("workspace tip %s, pushed %s", head, res.Result.PushedCommit)
	}

	// The base moves with a conflicting change; sync, resolve, promote.
	s2.PushWith(t, s2.AdminKey, "shop", e2ekit.PushQuery("main", "", "force", "true"), map[string]string{
		"app.txt": "one\ntwo (base)\nthree\n", "test.sh": "grep -q fixed app.txt && echo 'tests pass'\n"})
	mustToolError(t, cs, "sync", map[string]any{"workspace": "loop", "expect_oid": res.Result.PushedCommit}, "merge_conflict")
	var synced struct {
		Clean  bool
		Commit string
	}
	sr, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "sync", Arguments: map[string]any{"workspace": "loop", "expect_oid": res.Result.PushedCommit, "on_conflict": "markers"}})
	if err != nil || sr.IsError {
		t.Fatalf("sync with markers: %v %+v", err, sr)
	}
	b, _ := json.Marshal(sr.StructuredContent)
	if err := json.Unmarshal(b, &synced); err != nil {
		t.Fatalf("sync with markers: %v\n%s", err, b)
	}
	if synced.Clean || synced.Commit == "" {
		t.Fatalf("sync with markers: %+v", synced)
	}
	mustTool(t, cs, "files_edit", map[string]any{"workspace": "loop", "branch": "conflicts/main", "expect_oid": synced.Commit,
		"edits": []map[string]any{{"op": "write", "path": "app.txt", "content": "one\nTWO (agent, fixed, after base)\nthree\n"}}}, nil)
	mustTool(t, cs, "sync", map[string]any{"workspace": "loop", "resolved": true}, nil)
	var pre struct{ Clean bool }
	mustTool(t, cs, "merge_preflight", map[string]any{"workspace": "loop"}, &pre)
	if !pre.Clean {
		t.Fatal("merge_preflight not clean after sync")
	}
	mustTool(t, cs, "promote", map[string]any{"workspace": "loop"}, nil)
	if got := s2.Blob(t, "shop", "main", "app.txt"); got != "one\nTWO (agent, fixed, after base)\nthree\n" {
		t.Fatalf("base after promote: %q", got)
	}
}

// TestRunJobRunnerDies: a runner that takes a job and then goes silent
// (it died) loses its lease: the agent's call ends with the job failed
// and the reason, instead of hanging, and the runner's late result is
// refused.
func TestRunJobRunnerDies(t *testing.T) {
	s := e2ekit.StartServer(t, e2ekit.ServerOpts{Args: []string{"--runner-lease", "1s", "--runner-poll-wait", "1s"}})
	s.CreateRepo(t, "shop")
	s.PushWith(t, s.AdminKey, "shop", e2ekit.PushQuery("main", "", "force=true"), map[string]string{"a.txt": "a\n"})
	agentKey := s.CreateKey(t, "agent-dies", "agent")
	runnerKey := s.CreateKey(t, "box-dies", "runner")
	ctx := context.Background()
	agent, runner := client.New(s.URL, agentKey.Secret), client.New(s.URL, runnerKey.Secret)
	if _, err := agent.Fork(ctx, "shop", "dies"); err != nil {
		t.Fatal(err)
	}
	info, err := runner.RegisterRunner(ctx, api.RunnerRegistration{Name: "dies", Workspaces: []string{"dies"}})
	if err != nil {
		t.Fatal(err)
	}
	taken := make(chan *api.TakenJob, 1)
	go func() {
		for {
			tj, err := runner.TakeRunJob(ctx, info.ID, 1)
			if err != nil || tj != nil {
				taken <- tj
				return
			}
		}
	}()
	job, err := agent.ExecuteRun(ctx, "dies", api.RunJobRequest{Command: []string{"make", "test"}}, nil)
	tj := <-taken
	if tj == nil || job == nil || tj.Job.ID != job.ID {
		t.Fatalf("the runner did not take the job: %+v %+v", tj, job)
	}
	if lockstep.ErrorCode(err) != lockstep.EUNAVAILABLE || job.State != lockstep.JobFailed || !strings.Contains(job.Error, "lease") {
		t.Fatalf("a job whose runner died: %+v, %v; want failed, naming the lease", job, err)
	}
	if err := runner.FinishRunJob(ctx, info.ID, job.ID, api.RunJobResult{Succeeded: true}); lockstep.ErrorCode(err) != lockstep.EREFCONFLICT {
		t.Fatalf("late result: %v; want ref_conflict", err)
	}
	// The abandoned job's key died with it: a runner that comes back
	// cannot push with it.
	if _, err := client.New(s.URL, tj.Key).Whoami(ctx); lockstep.ErrorCode(err) != lockstep.EUNAUTH {
		t.Fatalf("the abandoned job's key: %v; want unauthenticated", err)
	}
}

// TestRunJobStreamEndsOnShutdown: a graceful stop ends a job's stream and
// a runner's long poll at once (Drain) instead of waiting for the job;
// the caller is told the stream ended before the result, and the job,
// kept in the metadata database, is still there after the restart.
func TestRunJobStreamEndsOnShutdown(t *testing.T) {
	s := e2ekit.StartServer(t, e2ekit.ServerOpts{})
	s.CreateRepo(t, "shop")
	s.PushWith(t, s.AdminKey, "shop", e2ekit.PushQuery("main", "", "force=true"), map[string]string{"a.txt": "a\n"})
	agentKey := s.CreateKey(t, "agent-stop", "agent")
	runnerKey := s.CreateKey(t, "box-stop", "runner")
	ctx := context.Background()
	agent, runner := client.New(s.URL, agentKey.Secret), client.New(s.URL, runnerKey.Secret)
	agent.Retry, runner.Retry = client.RetryPolicy{MaxAttempts: 1}, client.RetryPolicy{MaxAttempts: 1}
	if _, err := agent.Fork(ctx, "shop", "stop"); err != nil {
		t.Fatal(err)
	}
	info, err := runner.RegisterRunner(ctx, api.RunnerRegistration{Name: "stop", Workspaces: []string{"stop"}})
	if err != nil {
		t.Fatal(err)
	}
	type answer struct {
		job *api.RunJob
		err error
	}
	done := make(chan answer, 1)
	go func() {
		job, err := agent.ExecuteRun(ctx, "stop", api.RunJobRequest{Command: []string{"sleep", "600"}}, nil)
		done <- answer{job, err}
	}()
	var tj *api.TakenJob
	for tj == nil {
		if tj, err = runner.TakeRunJob(ctx, info.ID, 1); err != nil {
			t.Fatal(err)
		}
	}
	// A second runner call is a long poll in flight during the stop.
	polled := make(chan error, 1)
	go func() { _, err := runner.TakeRunJob(ctx, info.ID, 600); polled <- err }()
	if code := s.Stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("graceful stop with a job stream and a long poll open: exit %d", code)
	}
	a := <-done
	if lockstep.ErrorCode(a.err) != lockstep.EUNAVAILABLE || a.job == nil || a.job.ID != tj.Job.ID || a.job.State == lockstep.JobFailed {
		t.Fatalf("the caller after the stop: %+v, %v; want unavailable (stream ended) with the job as created", a.job, a.err)
	}
	<-polled
	s2 := s.Restart(t)
	again, err := client.New(s2.URL, agentKey.Secret).RunJob(ctx, "stop", tj.Job.ID, 0)
	if err != nil || again.State != lockstep.JobRunning || again.RunnerID != info.ID {
		t.Fatalf("the job after the restart: %+v, %v; want still running on its runner", again, err)
	}
}
