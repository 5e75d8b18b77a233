package e2e

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep/internal/e2ekit"
)

// crashOpts: a short lease so a dead server's claim runs out quickly, a
// long wait so the retry waits for it, and the test-only pause points.
func crashOpts() e2ekit.ServerOpts {
	return e2ekit.ServerOpts{
		Args: []string{"--idempotency-lease", "1s", "--idempotency-wait", "30s"},
		Env:  []string{"LOCKSTEP_TEST_PAUSE_AFTER_COMMIT=crash-", "LOCKSTEP_TEST_PAUSE_BEFORE_RUN=early-"},
	}
}

// killDuring sends a request in the background, waits for the server to
// report the pause, SIGKILLs it, requires the client to have lost its
// connection, and returns a restarted server on the same data.
func killDuring(t *testing.T, s *e2ekit.Server, keepPauses bool, marker, method, path, key, idem string, body any, ctype string) *e2ekit.Server {
	t.Helper()
	type result struct {
		r   *e2ekit.Response
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := s.Try(method, path, key, body, ctype, "Idempotency-Key", idem)
		done <- result{r, err}
	}()
	want := marker + " (Idempotency-Key " + idem + ")"
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(s.Stderr.String(), want) {
		if time.Now().After(deadline) || !s.Running() {
			t.Fatalf("the server never reported %q:\n%s", want, s.Stderr)
		}
		time.Sleep(5 * time.Millisecond)
	}
	s.Kill()
	res := <-done
	if res.err == nil {
		t.Fatalf("the request answered although the server was killed first: %s", res.r)
	}
	// The same data; without the pause points when a retry is to execute
	// (it would pause too).
	o := s.Opts
	o.Postgres = false
	if !keepPauses {
		o.Env = nil
	}
	return e2ekit.StartServer(t, o)
}

// TestKilledBetweenCommitAndAnswer: the server is SIGKILLed after a push
// and a promote committed and before they answered; the retries get the
// first results, and nothing ran twice.
func TestKilledBetweenCommitAndAnswer(t *testing.T) {
	t.Parallel()
	w := newWorld(t, crashOpts())
	s := w.s
	tarball := e2ekit.TarOf(t, map[string]string{"README": "shop\n", "new.txt": "after the crash\n"})
	path := "/api/v1/repos/shop/worktree?expect_oid=" + w.tip0
	s = killDuring(t, s, true, "paused after commit", "PUT", path, s.AdminKey, "crash-push", tarball, "application/x-tar")

	r := send(t, s, "PUT", path, s.AdminKey, "crash-push", tarball, "application/x-tar")
	if r.Status != http.StatusCreated || r.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry after the crash: %s (replayed %q), want the first push's 201, replayed", r, r.Header.Get("Idempotent-Replayed"))
	}
	var p e2ekit.PushResult
	r.Decode(t, &p)
	if head := s.Head(t, "shop"); p.Commit != head || p.Parent != w.tip0 || !p.Changed {
		t.Fatalf("replayed push %+v; shop main is at %s (parent should be %s)", p, head, w.tip0)
	}
	again := send(t, s, "PUT", path, s.AdminKey, "crash-push", tarball, "application/x-tar")
	if again.Status != r.Status || string(again.Body) != string(r.Body) {
		t.Errorf("second replay differs: %s vs %s", again, r)
	}

	// An edit (201 when it changed something): the answer staged with the
	// commit carries the route's success status, not a default 200.
	edit := map[string]any{"expect_oid": p.Commit, "edits": []map[string]any{{"op": "write", "path": "edited.txt", "content": "edited\n"}}}
	s = killDuring(t, s, true, "paused after commit", "POST", "/api/v1/repos/shop/edits", s.AdminKey, "crash-edit", edit, "")
	r = send(t, s, "POST", "/api/v1/repos/shop/edits", s.AdminKey, "crash-edit", edit, "")
	if r.Status != http.StatusCreated || r.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("edit retry after the crash: %s (replayed %q), want the first edit's 201, replayed", r, r.Header.Get("Idempotent-Replayed"))
	}
	var ed e2ekit.PushResult
	r.Decode(t, &ed)
	if head := s.Head(t, "shop"); ed.Commit != head || ed.Parent != p.Commit || !ed.Changed {
		t.Fatalf("replayed edit %+v; shop main is at %s (parent should be %s)", ed, head, p.Commit)
	}

	// A promote: its commits (the landing and the workspace's status) were
	// made, the answer not sent.
	var fork struct {
		BaseCommit string `json:"base_commit"`
	}
	s.MustJSON(t, "POST", "/api/v1/repos/shop/forks", w.agent.Secret, map[string]string{"name": "ws"}, 201, &fork)
	s.Push(t, w.agent.Secret, "ws", fork.BaseCommit, map[string]string{"README": "shop\n", "new.txt": "after the crash\n", "ws.txt": "work\n"})
	s = killDuring(t, s, true, "paused after commit", "POST", "/api/v1/repos/ws/promote", w.agent.Secret, "crash-promote", map[string]any{}, "")
	r = send(t, s, "POST", "/api/v1/repos/ws/promote", w.agent.Secret, "crash-promote", map[string]any{}, "")
	if r.Status != http.StatusOK || r.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("promote retry after the crash: %s, want the first promote's 200, replayed", r)
	}
	var pr struct {
		Commit    string `json:"commit"`
		Workspace string `json:"workspace"`
		Into      string `json:"into"`
	}
	r.Decode(t, &pr)
	if head := s.Head(t, "shop"); pr.Commit != head || pr.Workspace != "ws" || pr.Into == "" {
		t.Fatalf("replayed promote %+v; shop main at %s", pr, head)
	}

	es := oplog(t, s)
	for _, k := range []string{"crash-push", "crash-edit", "crash-promote"} {
		op := strings.TrimPrefix(k, "crash-")
		var n int
		for _, e := range withKey(es, k) {
			if e.Op == op && e.Result == "ok" {
				n++
				if e.Replays < 2 && k == "crash-push" {
					t.Errorf("%s: %d replays counted, want 2", k, e.Replays)
				}
			}
		}
		if n != 1 {
			t.Errorf("%s: %d %s entries, want 1: %+v", k, n, op, withKey(es, k))
		}
	}
	if v := s.Verify(t); !v.OK {
		t.Fatalf("oplog chain: %+v", v)
	}
}

// TestKilledBeforeCommit: the server dies after claiming the key and
// before doing anything; once its lease ran out the retry runs the
// operation (nothing committed under the key), exactly once.
func TestKilledBeforeCommit(t *testing.T) {
	t.Parallel()
	w := newWorld(t, crashOpts())
	s := w.s
	tarball := e2ekit.TarOf(t, map[string]string{"README": "shop\n", "early.txt": "x\n"})
	path := "/api/v1/repos/shop/worktree?expect_oid=" + w.tip0
	s = killDuring(t, s, false, "paused before running", "PUT", path, s.AdminKey, "early-push", tarball, "application/x-tar")
	if head := s.Head(t, "shop"); head != w.tip0 {
		t.Fatalf("shop moved to %s although the server died before running the push", head)
	}
	r := send(t, s, "PUT", path, s.AdminKey, "early-push", tarball, "application/x-tar")
	if r.Status != http.StatusCreated || r.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("retry of a push that never ran: %s (replayed %q), want a fresh 201", r, r.Header.Get("Idempotent-Replayed"))
	}
	var n int
	for _, e := range withKey(oplog(t, s), "early-push") {
		if e.Op == "push" {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d push entries under early-push, want 1", n)
	}
}
