package runner

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/api"
	"github.com/lockstep-hq/lockstep/client"
	"github.com/lockstep-hq/lockstep/delivery"
	"github.com/lockstep-hq/lockstep/internal/e2ekit"
)

// syncBuf is a bytes.Buffer safe for the runner's goroutines and the test.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// started is a Run in a goroutine; stop cancels it and returns its error.
type started struct {
	cancel context.CancelFunc
	done   chan error
	out    *syncBuf
	errs   *syncBuf
}

func start(t *testing.T, o Options) *started {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &started{cancel: cancel, done: make(chan error, 1), out: &syncBuf{}, errs: &syncBuf{}}
	o.Stdout, o.Stderr = r.out, r.errs
	go func() { r.done <- Run(ctx, o) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

func (r *started) stop(t *testing.T) error {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		r.done <- err // a second stop (the cleanup) gets it too
		return err
	case <-time.After(60 * time.Second):
		t.Fatal("Run did not return after its context ended")
		return nil
	}
}

// check waits until commit of repo has a final result of check name and
// returns it.
func check(t *testing.T, c *client.Client, repo, commit, name string) api.Check {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second) // a hang guard, not a timing assertion
	for {
		cs, err := checks(c, repo, commit)
		if err != nil {
			t.Fatalf("checks of %s@%s: %v", repo, commit, err)
		}
		for _, ch := range cs {
			if ch.Name == name && ch.Status != lockstep.CheckPending {
				return ch
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no final %q result on %s@%s: %+v", name, repo, commit, cs)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func checks(c *client.Client, repo, commit string) ([]api.Check, error) {
	set, err := c.Checks(context.Background(), repo, commit)
	if err != nil {
		return nil, err
	}
	return set.Latest, nil
}

// TestRunTestsTipsAndDeliveries: a workspace tip pushed before the runner
// starts is tested on start (success), a commit pushed after it arrives
// as a signed hook delivery from the server and is tested too (failure,
// with the failing line and the commit in the summary); on stop the
// runner deletes its hook.
func TestRunTestsTipsAndDeliveries(t *testing.T) {
	t.Parallel()
	s := e2ekit.StartServer(t, e2ekit.ServerOpts{Args: []string{"--hook-backoff", "100ms", "--hook-max-backoff", "1s"}})
	s.CreateRepo(t, "base")
	base0 := s.Push(t, s.AdminKey, "base", e2ekit.ZeroOID, map[string]string{"README": "hi\n"}).Commit
	agent := s.CreateKey(t, "agent", "agent")
	ci := s.CreateKey(t, "ci", "ci")
	s.MustJSON(t, "POST", "/api/v1/repos/base/forks", agent.Secret, map[string]string{"name": "ws"}, http.StatusCreated, nil)
	tip1 := s.Push(t, agent.Secret, "ws", base0, map[string]string{"README": "hi\n", "ok": "yes\n"}).Commit
	c := client.New(s.URL, ci.Secret)

	r := start(t, Options{Client: c, Repo: "base", Check: "unit",
		Command: []string{"sh", "-c", `echo "commit=$LOCKSTEP_COMMIT ws=$LOCKSTEP_WORKSPACE"; test -f ok || { echo "--- FAIL: TestOK (ok is missing)"; exit 1; }`}})
	if got := check(t, c, "ws", tip1, "unit"); got.Status != lockstep.CheckSuccess || !strings.Contains(got.Summary, "commit="+tip1+" ws=ws") {
		t.Errorf("tip pushed before the start: %s %q, want success naming the commit", got.Status, got.Summary)
	}

	tip2 := s.Push(t, agent.Secret, "ws", tip1, map[string]string{"README": "hi\n"}).Commit
	got := check(t, c, "ws", tip2, "unit")
	if got.Status != lockstep.CheckFailure {
		t.Errorf("commit without ok: %s %q, want failure", got.Status, got.Summary)
	}
	if !strings.Contains(got.Summary, "--- FAIL: TestOK (ok is missing)\n--- last lines of output ---") || !strings.Contains(got.Summary, "commit="+tip2) {
		t.Errorf("failure summary lacks the failing line or the output's tail:\n%s", got.Summary)
	}
	if err := r.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if out := r.out.String(); !strings.Contains(out, "ws "+tip2[:12]+" failure") || !strings.Contains(out, "check \"unit\" runs") {
		t.Errorf("runner output:\n%s", out)
	}
	hooks, err := c.Hooks(context.Background(), "base")
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hooks {
		if h.Active {
			t.Errorf("hook %s still active after the runner stopped", h.ID)
		}
	}
}

// TestReceiveVerifiesDeliveries posts deliveries to the receiver
// directly: only a correctly signed, fresh one runs the command; a
// replay is refused, the sender's own retry is acknowledged and not run
// again, and a second (rotation) secret is accepted.
func TestReceiveVerifiesDeliveries(t *testing.T) {
	t.Parallel()
	s := e2ekit.StartServer(t, e2ekit.ServerOpts{})
	s.CreateRepo(t, "base")
	base0 := s.Push(t, s.AdminKey, "base", e2ekit.ZeroOID, map[string]string{"README": "hi\n"}).Commit
	base1 := s.Push(t, s.AdminKey, "base", base0, map[string]string{"README": "ho\n"}).Commit
	ci := s.CreateKey(t, "ci", "ci")
	c := client.New(s.URL, ci.Secret)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String() + "/hook"
	const newSecret, oldSecret = "new-secret-0123456789", "old-secret-0123456789"
	r := start(t, Options{Client: c, Repo: "base", Check: "unit", Command: []string{"true"}, Listener: ln,
		Secrets: []string{newSecret, oldSecret}})

	post := func(secret, id string, ts time.Time, body string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
		req.Header.Set("webhook-id", id)
		req.Header.Set("webhook-timestamp", strconv.FormatInt(ts.Unix(), 10))
		if secret != "" {
			req.Header.Set("webhook-signature", delivery.SignStandard(secret, id, ts, []byte(body)))
		}
		var resp *http.Response
		for i := 0; ; i++ { // the receiver starts serving in Run's goroutine
			if resp, err = http.DefaultClient.Do(req); err == nil || i == 100 {
				break
			}
			time.Sleep(50 * time.Millisecond)
			req.Body, _ = req.GetBody()
		}
		if err != nil {
			select {
			case rerr := <-r.done:
				t.Fatalf("post a delivery: %v (Run returned %v)", err, rerr)
			default:
				t.Fatalf("post a delivery: %v", err)
			}
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	payload := func(commit, id string) string {
		return `{"event":"push","repository":"base","workspace":"","commit":"` + commit + `","delivery_id":"` + id + `"}`
	}
	now := time.Now()
	for _, x := range []struct {
		what, secret, id string
		ts               time.Time
		body             string
		want             int
	}{
		{"unsigned", "", "dlv_1", now, payload(base0, "dlv_1"), http.StatusUnauthorized},
		{"wrong secret", "guess", "dlv_1", now, payload(base0, "dlv_1"), http.StatusUnauthorized},
		{"stale timestamp", newSecret, "dlv_1", now.Add(-time.Hour), payload(base0, "dlv_1"), http.StatusUnauthorized},
		{"id differs from the payload's", newSecret, "dlv_2", now, payload(base0, "dlv_1"), http.StatusBadRequest},
		{"not a commit", newSecret, "dlv_3", now, payload("main", "dlv_3"), http.StatusBadRequest},
		{"signed and fresh", newSecret, "dlv_1", now, payload(base0, "dlv_1"), http.StatusAccepted},
		{"replayed", newSecret, "dlv_1", now, payload(base0, "dlv_1"), http.StatusConflict},
		{"the sender's retry", newSecret, "dlv_1", now.Add(time.Second), payload(base0, "dlv_1"), http.StatusOK},
		{"the rotation's old secret", oldSecret, "dlv_4", now, payload(base1, "dlv_4"), http.StatusAccepted},
	} {
		if got := post(x.secret, x.id, x.ts, x.body); got != x.want {
			t.Errorf("%s: receiver answered %d, want %d", x.what, got, x.want)
		}
	}
	for _, commit := range []string{base0, base1} {
		if got := check(t, c, "base", commit, "unit"); got.Status != lockstep.CheckSuccess {
			t.Errorf("%s: %s %q, want success", commit[:12], got.Status, got.Summary)
		}
	}
	if err := r.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	// The retry ran nothing: one run per accepted delivery.
	if n := strings.Count(r.out.String(), " success ("); n != 2 {
		t.Errorf("%d runs, want 2:\n%s", n, r.out.String())
	}
	if e := r.errs.String(); !strings.Contains(e, "refused a delivery") || !strings.Contains(e, "refused delivery dlv_1") {
		t.Errorf("refusals not reported on stderr:\n%s", e)
	}
}

func TestRunRequiresOptions(t *testing.T) {
	c := client.New("http://127.0.0.1:1", "k")
	for _, o := range []Options{
		{Repo: "r", Check: "c", Command: []string{"true"}},
		{Client: c, Check: "c", Command: []string{"true"}},
		{Client: c, Repo: "r", Command: []string{"true"}},
		{Client: c, Repo: "r", Check: "c"},
	} {
		err := Run(context.Background(), o)
		var le *lockstep.Error
		if !errors.As(err, &le) || lockstep.ErrorCode(err) != lockstep.EINVALID {
			t.Errorf("Run(%+v) = %v, want invalid_argument", o, err)
		}
	}
}

func TestFailureLine(t *testing.T) {
	for l, want := range map[string]bool{
		"--- FAIL: TestX (0.01s)":           true,
		"    x_test.go:12: want 1, got 2":   true,
		"panic: runtime error":              true,
		"./main.go:3:4: undefined: y":       true,
		"error: could not compile":          true,
		"Error: 2 tests failed":             true,
		"FAIL":                              false,
		"FAIL\tgithub.com/x/y\t0.1s":        false,
		"ok  \tgithub.com/x/y\t0.1s":        false,
		"=== RUN   TestX":                   false,
		"see docs/setup.go: nothing failed": false,
		"":                                  false,
	} {
		if got := failureLine(l); got != want {
			t.Errorf("failureLine(%q) = %v, want %v", l, got, want)
		}
	}
}

// TestTailBuffer: the summary keeps the failure lines wherever they are
// and the last 4 KiB of the output.
func TestTailBuffer(t *testing.T) {
	var b tailBuffer
	b.Write([]byte("=== RUN TestA\n--- FAIL: TestA (0.00s)\n    a_test.go:3: boom\n"))
	for i := 0; i < 2000; i++ {
		b.Write([]byte("noise line " + strconv.Itoa(i) + "\n"))
	}
	b.Write([]byte("last line without newline"))
	if got, want := b.Failures(), []string{"--- FAIL: TestA (0.00s)", "    a_test.go:3: boom"}; strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("Failures() = %q, want %q", got, want)
	}
	s := b.String()
	if len(s) > 4<<10 || !strings.HasSuffix(s, "noise line 1999\nlast line without newline") || strings.Contains(s, "TestA") {
		t.Errorf("String() keeps %d bytes, ending %q", len(s), s[max(0, len(s)-60):])
	}
}

// TestCommandGetsNoRunnerKey: the command a runner tests a commit with is
// the commit's own code (an agent's). It ran with the runner's
// environment, LOCKSTEP_KEY included: a ci key, with which a test could
// post a passing check for any commit and pass the gate.
func TestCommandGetsNoRunnerKey(t *testing.T) {
	s := e2ekit.StartServer(t, e2ekit.ServerOpts{})
	s.CreateRepo(t, "base")
	base0 := s.Push(t, s.AdminKey, "base", e2ekit.ZeroOID, map[string]string{"README": "hi\n"}).Commit
	agent := s.CreateKey(t, "agent", "agent")
	ci := s.CreateKey(t, "ci", "ci")
	s.MustJSON(t, "POST", "/api/v1/repos/base/forks", agent.Secret, map[string]string{"name": "ws"}, http.StatusCreated, nil)
	tip := s.Push(t, agent.Secret, "ws", base0, map[string]string{"README": "hi\n", "x": "1\n"}).Commit
	// The runner's key as an operator gives it (the README's example).
	t.Setenv("LOCKSTEP_KEY", ci.Secret)
	t.Setenv("LOCKSTEP_KEY_FILE", "/nonexistent/ci.key")
	c := client.New(s.URL, ci.Secret)
	start(t, Options{Client: c, Repo: "base", Check: "unit",
		Command: []string{"sh", "-c", `echo "key=${LOCKSTEP_KEY:-none} file=${LOCKSTEP_KEY_FILE:-none} commit=$LOCKSTEP_COMMIT"`}})
	got := check(t, c, "ws", tip, "unit")
	if got.Status != lockstep.CheckSuccess || !strings.Contains(got.Summary, "key=none file=none commit="+tip) {
		t.Errorf("the command's environment: %s %q; want no LOCKSTEP_KEY or LOCKSTEP_KEY_FILE (and the commit)", got.Status, got.Summary)
	}
	if strings.Contains(got.Summary, ci.Secret) {
		t.Errorf("the runner's key reached the command: %q", got.Summary)
	}
}
