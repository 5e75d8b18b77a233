// Package runner is a small CI for Lockstep's gate (`lockstep runner`):
// it registers a gate hook on a repository, verifies each delivery's
// Standard Webhooks signature, timestamp and replay, checks the exact
// commit out into a fresh temporary directory, runs a command with a
// timeout in its own process group, and posts success or failure as a
// check with the lines of the output that name a failure and its tail.
package runner

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/api"
	"github.com/lockstep-hq/lockstep/client"
	"github.com/lockstep-hq/lockstep/internal/procenv"
)

// Options configure Run. Client, Repo, Check and Command are required.
type Options struct {
	// Client reaches the Lockstep server with a key that may create
	// hooks and post checks (role ci or admin).
	Client *client.Client
	// Repo is the base repository whose workspaces are tested.
	Repo string
	// Check is the name of the check posted.
	Check string
	// Command is run in the checked-out commit (Command[0] is looked up
	// in PATH). Its environment adds LOCKSTEP_COMMIT, LOCKSTEP_WORKSPACE
	// and LOCKSTEP_REPOSITORY.
	Command []string
	// Listener receives the hook deliveries; nil: Run listens on Listen
	// (default 127.0.0.1:0). Run closes it.
	Listener net.Listener
	Listen   string
	// PublicURL is where the server reaches the receiver; empty:
	// http://<listen address>/hook.
	PublicURL string
	// Timeout kills the command after this long (the check fails);
	// default 10 minutes.
	Timeout time.Duration
	// Parallel is how many commits are tested at once; default 1.
	Parallel int
	// Events are the hook events tested on; default push.
	Events []string
	// Secrets are the hook secrets accepted: the first is registered,
	// the others are still accepted (a rotation). Empty: a random one.
	Secrets []string
	// Tolerance refuses deliveries whose webhook-timestamp is further
	// than this from now; default client.DefaultWebhookTolerance.
	Tolerance time.Duration
	// Quiet leaves out the start-up lines (for --json).
	Quiet bool
	// Stdout receives a line per start and result, Stderr refusals and
	// failures to post; nil: discarded.
	Stdout, Stderr io.Writer
}

// Run registers the hook, tests the current tips of the repository's
// active workspaces that have no result of the check yet, then every
// commit a delivery names, until ctx is done; then it stops the
// receiver, waits for running commands (killed by ctx) and deletes the
// hook. It returns invalid_argument for missing options.
func Run(ctx context.Context, o Options) error {
	if o.Client == nil || o.Repo == "" || o.Check == "" || len(o.Command) == 0 {
		if o.Listener != nil {
			o.Listener.Close()
		}
		return lockstep.Errorf(lockstep.EINVALID, "usage: lockstep runner --repo R --check NAME -- COMMAND [ARGS...]")
	}
	if o.Stdout == nil {
		o.Stdout = io.Discard
	}
	if o.Stderr == nil {
		o.Stderr = io.Discard
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Minute
	}
	if o.Tolerance <= 0 {
		o.Tolerance = client.DefaultWebhookTolerance
	}
	if o.Listen == "" {
		o.Listen = "127.0.0.1:0"
	}
	events := o.Events
	if len(events) == 0 {
		events = []string{"push"}
	}
	c, repoName, check, rest, e := o.Client, o.Repo, o.Check, o.Command, &env{stdout: o.Stdout, stderr: o.Stderr}
	ln := o.Listener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", o.Listen); err != nil {
			return fmt.Errorf("listen: %w", err)
		}
	}
	publicURL := o.PublicURL
	if publicURL == "" {
		publicURL = "http://" + ln.Addr().String() + "/hook"
	}
	secrets := o.Secrets
	if len(secrets) == 0 {
		var sb [24]byte
		rand.Read(sb[:])
		secrets = []string{hex.EncodeToString(sb[:])}
	}
	secret := secrets[0]
	hook, err := c.CreateHook(ctx, repoName, publicURL, secret, events)
	if err != nil {
		ln.Close()
		return fmt.Errorf("register hook: %w", err)
	}
	r := &runner{c: c, e: e, check: check, cmd: rest, timeout: o.Timeout, seen: map[string]bool{}, jobs: make(chan hookPayload, 1024),
		secrets: secrets, tolerance: o.Tolerance, replays: client.NewReplayCache(o.Tolerance, 0)}
	srv := &http.Server{Handler: http.HandlerFunc(r.receive), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	if !o.Quiet {
		fmt.Fprintf(e.stdout, "runner: hook %s on %s → %s; check %q runs: %v\n", hook.ID, repoName, lockstep.RedactURL(publicURL), check, rest)
	}
	// Tips pushed before the runner started get no hook: test them now, so
	// a workspace pushed first and a runner started second (the README's
	// order) still gets its check.
	if slicesContain(events, "push") || slicesContain(events, "*") {
		n, err := r.queueCurrentTips(ctx, repoName)
		if err != nil {
			fmt.Fprintf(e.stderr, "runner: could not list current tips of %s: %v\n", repoName, err)
		} else if n > 0 && !o.Quiet {
			fmt.Fprintf(e.stdout, "runner: testing the current tip of %d workspace(s) of %s\n", n, repoName)
		}
	}
	var wg sync.WaitGroup
	for i := 0; i < max(o.Parallel, 1); i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-ctx.Done():
					return
				case p := <-r.jobs:
					r.run(ctx, p)
				}
			}
		}()
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv.Shutdown(sctx)
	wg.Wait()
	if err := c.DeleteHook(sctx, repoName, hook.ID); err != nil {
		fmt.Fprintf(e.stderr, "runner: could not delete hook %s: %v\n", hook.ID, err)
	}
	return nil
}

// env is where the runner writes.
type env struct {
	stdout, stderr io.Writer
}

type hookPayload struct {
	Event      string `json:"event"`
	Repository string `json:"repository"`
	Workspace  string `json:"workspace"`
	Commit     string `json:"commit"`
	DeliveryID string `json:"delivery_id"`
}

type runner struct {
	c       *client.Client
	e       *env
	check   string
	cmd     []string
	timeout time.Duration

	secrets   []string
	tolerance time.Duration
	replays   *client.ReplayCache

	mu   sync.Mutex
	seen map[string]bool // delivery ids and commits already taken
	jobs chan hookPayload
}

// receive verifies the Standard Webhooks signature and timestamp (a
// delivery older than the tolerance is refused: 401), refuses a replay of
// a delivery it accepted (409), acknowledges at once and queues the job.
// The server's own retry of a delivery (same id, newly signed) or a
// delivery of a commit already taken is acknowledged, not re-run.
func (r *runner) receive(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	if err != nil || req.Method != http.MethodPost {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	now := time.Now()
	wh, err := client.VerifyWebhook(r.secrets, req.Header, body, now, r.tolerance)
	if err != nil {
		fmt.Fprintf(r.e.stderr, "runner: refused a delivery: %v\n", err)
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	switch err := r.replays.Check(wh, now); {
	case errors.Is(err, client.ErrWebhookDuplicate):
		w.WriteHeader(http.StatusOK)
		return
	case err != nil:
		fmt.Fprintf(r.e.stderr, "runner: refused delivery %s: %v\n", wh.ID, err)
		http.Error(w, err.Error(), http.StatusConflict)
		return
	}
	var p hookPayload
	if err := json.Unmarshal(body, &p); err != nil || !lockstep.IsOID(p.Commit) || p.DeliveryID != wh.ID {
		http.Error(w, "bad payload", http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	dup := r.seen[p.DeliveryID] || r.seen[p.Commit]
	r.seen[p.DeliveryID], r.seen[p.Commit] = true, true
	r.mu.Unlock()
	if !dup {
		select {
		case r.jobs <- p:
		default:
			http.Error(w, "queue full", http.StatusServiceUnavailable)
			r.mu.Lock()
			delete(r.seen, p.DeliveryID)
			delete(r.seen, p.Commit)
			r.mu.Unlock()
			return
		}
	}
	w.WriteHeader(http.StatusAccepted)
}

func slicesContain(l []string, v string) bool {
	for _, x := range l {
		if x == v {
			return true
		}
	}
	return false
}

// queueCurrentTips queues every active workspace's tip that has no
// result of this check yet (what a promote would need).
func (r *runner) queueCurrentTips(ctx context.Context, base string) (int, error) {
	var todo []hookPayload
	ws, err := r.c.TaskWorkspaces(ctx, base, "")
	if err != nil {
		return 0, err
	}
	for _, w := range ws {
		if lockstep.Status(w.Status).Movable() && lockstep.IsOID(w.Tip) {
			todo = append(todo, hookPayload{Event: "startup", Repository: base, Workspace: w.Name, Commit: w.Tip})
		}
	}
	n := 0
	for _, p := range todo {
		repoName := p.Repository
		if p.Workspace != "" {
			repoName = p.Workspace
		}
		if r.hasResult(ctx, repoName, p.Commit) {
			continue
		}
		r.mu.Lock()
		dup := r.seen[p.Commit]
		r.seen[p.Commit] = true
		r.mu.Unlock()
		if dup {
			continue
		}
		select {
		case r.jobs <- p:
			n++
		default:
			return n, fmt.Errorf("queue full")
		}
	}
	return n, nil
}

// hasResult reports whether commit already has a finished result of
// this check (a restarted runner does not test it again).
func (r *runner) hasResult(ctx context.Context, repo, commit string) bool {
	set, err := r.c.Checks(ctx, repo, commit)
	if err != nil {
		return false
	}
	for _, ch := range set.Latest {
		if ch.Name == r.check && ch.Status != lockstep.CheckPending {
			return true
		}
	}
	return false
}

func (r *runner) post(ctx context.Context, repo, commit, status, summary string) {
	_, err := r.c.PostCheck(ctx, repo, commit, api.CheckRequest{Name: r.check, Status: status, Summary: summary})
	if err != nil {
		fmt.Fprintf(r.e.stderr, "runner: post %s %s for %s: %v\n", r.check, status, commit[:12], err)
	}
}

func (r *runner) run(ctx context.Context, p hookPayload) {
	repo := p.Repository
	if p.Workspace != "" {
		repo = p.Workspace
	}
	start := time.Now()
	r.post(ctx, repo, p.Commit, lockstep.CheckPending, "running: "+fmt.Sprint(r.cmd))
	dir, err := os.MkdirTemp("", "lockstep-runner-")
	if err != nil {
		r.post(ctx, repo, p.Commit, lockstep.CheckError, "runner: "+err.Error())
		return
	}
	defer os.RemoveAll(dir)
	_, _, err = r.c.Checkout(ctx, repo, p.Commit, dir, nil)
	if err != nil {
		r.post(ctx, repo, p.Commit, lockstep.CheckError, "runner: checkout failed: "+err.Error())
		return
	}
	cctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	cmd := exec.CommandContext(cctx, r.cmd[0], r.cmd[1:]...)
	cmd.Dir = dir
	// The command is the commit's code (an agent's): the runner's key,
	// which may post checks, is not in its environment.
	cmd.Env = append(procenv.Drop(os.Environ(), "LOCKSTEP_KEY", "LOCKSTEP_KEY_FILE"), "LOCKSTEP_COMMIT="+p.Commit, "LOCKSTEP_WORKSPACE="+p.Workspace, "LOCKSTEP_REPOSITORY="+p.Repository)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var out tailBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	if cmd.Process != nil {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // nothing the command started outlives it
	}
	d := time.Since(start).Round(time.Millisecond)
	status := lockstep.CheckSuccess
	head := fmt.Sprintf("%v passed in %s", r.cmd, d)
	var ee *exec.ExitError
	switch {
	case err != nil && ctx.Err() != nil:
		// The runner is shutting down and killed the command: that says
		// nothing about the commit, so it is not a failure.
		status, head = lockstep.CheckError, fmt.Sprintf("%v interrupted: the runner stopped after %s", r.cmd, d)
	case cctx.Err() == context.DeadlineExceeded:
		status, head = lockstep.CheckFailure, fmt.Sprintf("%v timed out after %s", r.cmd, r.timeout)
	case errors.As(err, &ee):
		status, head = lockstep.CheckFailure, fmt.Sprintf("%v failed (%s) in %s", r.cmd, ee.ProcessState, d)
	case err != nil:
		status, head = lockstep.CheckError, fmt.Sprintf("%v could not run: %v", r.cmd, err)
	}
	summary := head + "\n"
	if fails := out.Failures(); status == lockstep.CheckFailure && len(fails) > 0 {
		summary += strings.Join(fails, "\n") + "\n--- last lines of output ---\n"
	}
	r.post(context.WithoutCancel(ctx), repo, p.Commit, status, summary+out.String())
	fmt.Fprintf(r.e.stdout, "runner: %s %s %s (%s)\n", repo, p.Commit[:12], status, d)
}

// tailBuffer keeps the last 4 KiB of output, and the first lines that
// name a failure (a failing test, a panic, a compile error) wherever they
// are, so the check's summary quotes what failed rather than the noise at
// the end.
type tailBuffer struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	line  []byte
	fails []string
}

// maxFailLines bounds the failure lines kept for a summary.
const maxFailLines = 20

// failureLine reports whether a line of test or build output names a
// failure: `--- FAIL: TestX`, `x_test.go:12: want…`, `panic:`, a
// compiler's `file.go:3:4: …`, or a line starting "FAIL"/"Error"/"error:".
func failureLine(l string) bool {
	t := strings.TrimSpace(l)
	switch {
	case t == "" || t == "FAIL" || strings.HasPrefix(t, "FAIL\t") || strings.HasPrefix(t, "ok "):
		return false
	case strings.HasPrefix(t, "--- FAIL"), strings.HasPrefix(t, "panic:"), strings.HasPrefix(t, "FAIL:"),
		strings.HasPrefix(t, "Error"), strings.HasPrefix(t, "error:"), strings.HasPrefix(t, "ERROR"):
		return true
	}
	if i := strings.Index(t, ".go:"); i > 0 && !strings.Contains(t[:i], " ") {
		return true
	}
	return false
}

// Failures returns the failure lines seen, in order.
func (t *tailBuffer) Failures() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := append([]string(nil), t.fails...)
	if len(t.line) > 0 && len(out) < maxFailLines && failureLine(string(t.line)) {
		out = append(out, string(t.line))
	}
	return out
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	rest := p
	for len(rest) > 0 && len(t.fails) < maxFailLines {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			if len(t.line) < 1024 {
				t.line = append(t.line, rest...)
			}
			break
		}
		if len(t.line) < 1024 {
			t.line = append(t.line, rest[:i]...)
		}
		if l := string(t.line); failureLine(l) {
			if len(l) > 300 {
				l = l[:300] + "…"
			}
			t.fails = append(t.fails, l)
		}
		t.line, rest = t.line[:0], rest[i+1:]
	}
	t.buf.Write(p)
	if t.buf.Len() > 8<<10 {
		b := t.buf.Bytes()[t.buf.Len()-4<<10:]
		t.buf = *bytes.NewBuffer(append([]byte(nil), b...))
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.buf.Bytes()
	if len(b) > 4<<10 {
		b = b[len(b)-4<<10:]
	}
	return string(b)
}
