package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep/client"
	hookdelivery "github.com/lockstep-hq/lockstep/delivery"
	"github.com/lockstep-hq/lockstep/internal/e2ekit"
)

const hookSecret = "0123456789abcdef-test-secret"

// receiver is a gate-hook receiver that records every call.
type receiver struct {
	mu       sync.Mutex
	failing  bool // answer 500 while true
	failN    int  // ...and also the first failN calls
	calls    []call
	badSigs  int
	srv      *httptest.Server
	received chan struct{}
}

type call struct {
	Delivery string
	Event    string
	Status   int
	Body     map[string]any
}

func newReceiver(t *testing.T, failing bool, failN int) *receiver {
	r := &receiver{failing: failing, failN: failN, received: make(chan struct{}, 1000)}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	var m map[string]any
	json.Unmarshal(body, &m)
	r.mu.Lock()
	status := http.StatusOK
	if r.failing || len(r.calls) < r.failN {
		status = http.StatusInternalServerError
	}
	if !hookdelivery.Verify(hookSecret, body, req.Header.Get("X-Lockstep-Signature")) {
		r.badSigs++
		status = http.StatusUnauthorized
	}
	// The Standard Webhooks signature too (issue 15), on every delivery.
	if w, err := client.VerifyWebhook([]string{hookSecret}, req.Header, body, time.Now(), 0); err != nil || w.ID != req.Header.Get("X-Lockstep-Delivery") {
		r.badSigs++
		status = http.StatusUnauthorized
	}
	id := req.Header.Get("X-Lockstep-Delivery")
	if m["delivery_id"] != id {
		r.badSigs++ // the body names another delivery than the header
	}
	r.calls = append(r.calls, call{Delivery: id, Event: req.Header.Get("X-Lockstep-Event"), Status: status, Body: m})
	r.mu.Unlock()
	w.WriteHeader(status)
	select {
	case r.received <- struct{}{}:
	default:
	}
}

func (r *receiver) setFailing(f bool) {
	r.mu.Lock()
	r.failing = f
	r.mu.Unlock()
}

func (r *receiver) snapshot() ([]call, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]call(nil), r.calls...), r.badSigs
}

type delivery struct {
	ID       string `json:"id"`
	Event    string `json:"event"`
	Status   string `json:"status"`
	Attempts int    `json:"attempts"`
	Payload  string `json:"payload"`
	History  []struct {
		Attempt     int        `json:"attempt"`
		StatusCode  int        `json:"status_code"`
		DurationMS  float64    `json:"duration_ms"`
		Error       string     `json:"error"`
		NextRetryAt *time.Time `json:"next_retry_at"`
		At          time.Time  `json:"at"`
	} `json:"history"`
}

func (s *server) createHook(t testing.TB, repo, url string, events []string) string {
	t.Helper()
	var h struct {
		ID     string `json:"id"`
		Secret string `json:"secret"`
	}
	r := s.MustJSON(t, "POST", "/api/v1/repos/"+repo+"/hooks", s.AdminKey,
		map[string]any{"url": url, "secret": hookSecret, "events": events}, http.StatusCreated, &h)
	if h.ID == "" {
		t.Fatalf("hook without id: %s", r)
	}
	var raw map[string]any
	r.Decode(t, &raw)
	if _, ok := raw["secret"]; ok {
		t.Errorf("the hook's secret is echoed back: %s", r)
	}
	return h.ID
}

func (s *server) deliveries(t testing.TB, repo, hookID string) []delivery {
	t.Helper()
	var out struct {
		Deliveries []delivery `json:"deliveries"`
	}
	s.MustJSON(t, "GET", "/api/v1/repos/"+repo+"/hooks/"+hookID+"/deliveries", s.AdminKey, nil, http.StatusOK, &out)
	return out.Deliveries
}

// TestHookDeliveriesSurviveRestart: SIGKILL the server while deliveries
// wait for a retry; the restarted server finishes them, each exactly once.
func TestHookDeliveriesSurviveRestart(t *testing.T) {
	onBothBackends(t, testHookRestart)
}

func testHookRestart(t *testing.T, postgres bool) {
	rcv := newReceiver(t, true, 0)
	// A 1s first backoff leaves a wide window between attempts, so the
	// kill lands while the deliveries wait for a retry, not mid-request.
	s := startGateServer(t, serverOpts{Postgres: postgres, Args: []string{"--hook-backoff", "1s", "--hook-max-backoff", "2s", "--hook-max-attempts", "50", "--hook-timeout", "2s"}})
	s.CreateRepo(t, "base")
	base0 := s.push(t, s.AdminKey, "base", zeroOID, map[string]string{"README": "hi\n"}).Commit
	hookID := s.createHook(t, "base", rcv.srv.URL+"/hook", []string{"push"})
	agent := s.CreateKey(t, "agent", "agent")
	s.forkTip(t, agent.Secret, "base", "ws-1")
	s.forkTip(t, agent.Secret, "base", "ws-2")
	c1 := s.push(t, agent.Secret, "ws-1", base0, map[string]string{"README": "hi\n", "one": "1\n"}).Commit
	c2 := s.push(t, agent.Secret, "ws-2", base0, map[string]string{"README": "hi\n", "two": "2\n"}).Commit

	// Both deliveries failed at least once and wait for their retry.
	eventually(t, 30*time.Second, "a failed attempt of each delivery", func() bool {
		ds := s.deliveries(t, "base", hookID)
		if len(ds) != 2 {
			return false
		}
		for _, d := range ds {
			if d.Status != "pending" || len(d.History) == 0 || d.History[len(d.History)-1].NextRetryAt == nil {
				return false
			}
		}
		return true
	})
	s.Kill() // SIGKILL: no graceful shutdown
	before, _ := rcv.snapshot()
	if len(before) < 2 {
		t.Fatalf("receiver saw %d calls before the kill", len(before))
	}

	rcv.setFailing(false)
	s2 := s.restart(t)
	eventually(t, 60*time.Second, "both deliveries succeeded after the restart", func() bool {
		ds := s2.deliveries(t, "base", hookID)
		n := 0
		for _, d := range ds {
			if d.Status == "succeeded" {
				n++
			}
		}
		return n == 2
	})
	// A further push after the restart is delivered too, once.
	c3 := s2.push(t, agent.Secret, "ws-1", c1, map[string]string{"README": "hi\n", "one": "1\n", "three": "3\n"}).Commit
	eventually(t, 30*time.Second, "the third delivery", func() bool {
		n := 0
		for _, d := range s2.deliveries(t, "base", hookID) {
			if d.Status == "succeeded" {
				n++
			}
		}
		return n == 3
	})

	calls, bad := rcv.snapshot()
	if bad != 0 {
		t.Fatalf("%d calls with a bad signature or delivery id: %+v", bad, calls)
	}
	ok := map[string]int{}
	seen := map[string]int{}
	commits := map[string]string{}
	for _, c := range calls {
		seen[c.Delivery]++
		if c.Status/100 == 2 {
			ok[c.Delivery]++
		}
		if c.Event != "push" || c.Body["event"] != "push" {
			t.Errorf("delivery %s: event %q / %v, want push", c.Delivery, c.Event, c.Body["event"])
		}
		commits[c.Delivery], _ = c.Body["commit"].(string)
	}
	if len(seen) != 3 {
		t.Fatalf("receiver saw %d delivery ids, want 3: %+v", len(seen), calls)
	}
	got := map[string]bool{}
	for id, n := range ok {
		if n != 1 {
			t.Errorf("delivery %s succeeded %d times, want exactly once", id, n)
		}
		got[commits[id]] = true
	}
	for _, c := range []string{c1, c2, c3} {
		if !got[c] {
			t.Errorf("no successful delivery for commit %s (got %v)", c, got)
		}
	}
	// The recorded history matches what the receiver saw: every failure
	// before the kill is recorded, the last attempt is the 200.
	for _, d := range s2.deliveries(t, "base", hookID) {
		last := d.History[len(d.History)-1]
		if last.StatusCode != 200 || last.Error != "" || d.Attempts != len(d.History) {
			t.Errorf("delivery %s history: %+v", d.ID, d)
		}
		if seen[d.ID] < len(d.History) {
			t.Errorf("delivery %s: %d attempts recorded but the receiver saw %d calls", d.ID, len(d.History), seen[d.ID])
		}
		for i, a := range d.History {
			if a.Attempt != i+1 {
				t.Errorf("delivery %s attempt %d numbered %d", d.ID, i+1, a.Attempt)
			}
		}
	}
}

// TestHookDeliveryGivesUp: a receiver that always fails; the attempts are
// recorded with status codes, errors and a growing backoff, and the
// delivery ends failed after --hook-max-attempts.
func TestHookDeliveryGivesUp(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, true, 0)
	s := startGateServer(t, serverOpts{Args: []string{"--hook-max-attempts", "4"}})
	s.CreateRepo(t, "base")
	base0 := s.push(t, s.AdminKey, "base", zeroOID, map[string]string{"README": "hi\n"}).Commit
	hookID := s.createHook(t, "base", rcv.srv.URL, []string{"push"})
	// A second hook whose receiver is down: errors without a status code.
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close()
	deadID := s.createHook(t, "base", deadURL, []string{"*"})
	agent := s.CreateKey(t, "agent", "agent")
	s.forkTip(t, agent.Secret, "base", "ws")
	s.push(t, agent.Secret, "ws", base0, map[string]string{"README": "hi\n", "x": "x\n"})

	var d delivery
	eventually(t, 60*time.Second, "the delivery to fail for good", func() bool {
		ds := s.deliveries(t, "base", hookID)
		if len(ds) == 1 && ds[0].Status == "failed" {
			d = ds[0]
			return true
		}
		return false
	})
	if d.Attempts != 4 || len(d.History) != 4 {
		t.Fatalf("want 4 attempts, got %d (history %d): %+v", d.Attempts, len(d.History), d)
	}
	var prevGap time.Duration
	var prevNext time.Time
	for i, a := range d.History {
		if a.Attempt != i+1 || a.StatusCode != 500 || a.Error == "" {
			t.Errorf("attempt %d: want status 500 with an error, got %+v", i+1, a)
		}
		if i == len(d.History)-1 {
			if a.NextRetryAt != nil {
				t.Errorf("the last attempt schedules a retry at %v", a.NextRetryAt)
			}
			continue
		}
		if a.NextRetryAt == nil {
			t.Fatalf("attempt %d has no next_retry_at: %+v", i+1, d.History)
		}
		// The retry is scheduled when the attempt ended: at + duration +
		// backoff, the backoff 100ms·2^(n-1) with ±20% jitter, capped at 1s.
		gap := a.NextRetryAt.Sub(a.At) - time.Duration(a.DurationMS*float64(time.Millisecond))
		nominal := min(100*time.Millisecond<<i, time.Second)
		if gap < nominal*8/10-time.Millisecond || gap > nominal*12/10+100*time.Millisecond {
			t.Errorf("attempt %d: backoff %s, want %s ±20%%", i+1, gap, nominal)
		}
		if i > 0 && gap <= prevGap {
			t.Errorf("attempt %d: backoff %s does not grow (previous %s)", i+1, gap, prevGap)
		}
		if !a.NextRetryAt.After(prevNext) {
			t.Errorf("attempt %d: next_retry_at %v not after %v", i+1, a.NextRetryAt, prevNext)
		}
		if next := d.History[i+1].At; next.Before(a.NextRetryAt.Add(-time.Millisecond)) {
			t.Errorf("attempt %d ran at %v, before its scheduled retry %v", i+2, next, a.NextRetryAt)
		}
		prevGap, prevNext = gap, *a.NextRetryAt
	}
	calls, bad := rcv.snapshot()
	if len(calls) != 4 || bad != 0 {
		t.Fatalf("receiver saw %d calls (%d bad), want 4 good ones", len(calls), bad)
	}

	var dd delivery
	eventually(t, 60*time.Second, "the dead receiver's delivery to fail", func() bool {
		ds := s.deliveries(t, "base", deadID)
		if len(ds) == 1 && ds[0].Status == "failed" {
			dd = ds[0]
			return true
		}
		return false
	})
	for _, a := range dd.History {
		if a.StatusCode != 0 || a.Error == "" {
			t.Errorf("dead receiver attempt: want no status and an error, got %+v", a)
		}
	}
	if len(dd.History) != 4 {
		t.Errorf("dead receiver: %d attempts, want 4", len(dd.History))
	}
	// Hooks of another repository are not reachable through this one.
	s.CreateRepo(t, "other")
	e2ekit.RequireError(t, "deliveries through another repo", s.Call(t, "GET", "/api/v1/repos/other/hooks/"+hookID+"/deliveries", s.AdminKey, nil, ""), 404, "not_found")
	_ = fmt.Sprint
}

// TestHookEvents: a hook gets the events it subscribed to and no others;
// a workspace push names the workspace and the exact commit; a promote
// names the landed commit.
func TestHookEvents(t *testing.T) {
	t.Parallel()
	pushes := newReceiver(t, false, 0)
	promotes := newReceiver(t, false, 0)
	s := startGateServer(t, serverOpts{})
	s.CreateRepo(t, "base")
	base0 := s.push(t, s.AdminKey, "base", zeroOID, map[string]string{"README": "hi\n"}).Commit
	s.setGate(t, "base", map[string]any{})
	pushID := s.createHook(t, "base", pushes.srv.URL, []string{"push"})
	promoteID := s.createHook(t, "base", promotes.srv.URL, []string{"promote"})
	agent := s.CreateKey(t, "agent", "agent")
	s.forkTip(t, agent.Secret, "base", "ws")
	tip := s.push(t, agent.Secret, "ws", base0, map[string]string{"README": "hi\n", "f": "f\n"}).Commit
	landed := s.promote(t, agent.Secret, "ws").Commit

	done := func(id string, n int) func() bool {
		return func() bool {
			ds := s.deliveries(t, "base", id)
			k := 0
			for _, d := range ds {
				if d.Status == "succeeded" {
					k++
				}
			}
			return len(ds) == n && k == n
		}
	}
	eventually(t, 30*time.Second, "the push delivery", done(pushID, 1))
	eventually(t, 30*time.Second, "the promote delivery", done(promoteID, 1))

	calls, bad := pushes.snapshot()
	if bad != 0 || len(calls) != 1 {
		t.Fatalf("push receiver: %d calls, %d bad: %+v", len(calls), bad, calls)
	}
	b := calls[0].Body
	if calls[0].Event != "push" || b["workspace"] != "ws" || b["repository"] != "base" || b["commit"] != tip || b["base_commit"] != base0 {
		t.Errorf("push payload: %v", b)
	}
	calls, bad = promotes.snapshot()
	if bad != 0 || len(calls) != 1 {
		t.Fatalf("promote receiver: %d calls, %d bad: %+v", len(calls), bad, calls)
	}
	b = calls[0].Body
	if calls[0].Event != "promote" || b["repository"] != "base" || b["commit"] != landed || b["branch"] != "main" {
		t.Errorf("promote payload: %v", b)
	}
	if b["workspace"] != "ws" {
		t.Logf("NOTE: the promote event does not name the workspace that landed: %v", b)
	}
}

// TestHookLeaseTakeover: SIGKILL while a delivery is in flight. The dead
// worker's lease (--hook-timeout + 30s) expires and the restarted server
// takes the delivery over: it succeeds exactly once, and the attempt that
// died with the process is not in the history.
func TestHookLeaseTakeover(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var calls []int
	entered := make(chan struct{}, 10)
	release := make(chan struct{})
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		first := len(calls) == 0
		status := http.StatusOK
		if first {
			status = http.StatusInternalServerError
		}
		if !hookdelivery.Verify(hookSecret, body, r.Header.Get("X-Lockstep-Signature")) {
			status = http.StatusUnauthorized
		}
		calls = append(calls, status)
		mu.Unlock()
		entered <- struct{}{}
		if first {
			<-release
		}
		w.WriteHeader(status)
	}))
	defer rcv.Close()
	defer close(release)

	s := startGateServer(t, serverOpts{Args: []string{"--hook-timeout", "1s"}})
	s.CreateRepo(t, "base")
	base0 := s.push(t, s.AdminKey, "base", zeroOID, map[string]string{"README": "hi\n"}).Commit
	hookID := s.createHook(t, "base", rcv.URL, []string{"push"})
	agent := s.CreateKey(t, "agent", "agent")
	s.forkTip(t, agent.Secret, "base", "ws")
	s.push(t, agent.Secret, "ws", base0, map[string]string{"README": "hi\n", "x": "x\n"})
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the delivery never reached the receiver")
	}
	s.Kill() // mid-request: the attempt is never recorded, the lease stays
	s2 := s.restart(t)
	var d delivery
	eventually(t, 90*time.Second, "the delivery after the lease expired", func() bool {
		ds := s2.deliveries(t, "base", hookID)
		if len(ds) == 1 && ds[0].Status == "succeeded" {
			d = ds[0]
			return true
		}
		return false
	})
	mu.Lock()
	got := append([]int(nil), calls...)
	mu.Unlock()
	oks := 0
	for _, c := range got {
		if c == http.StatusOK {
			oks++
		}
	}
	if oks != 1 || len(got) != 2 {
		t.Errorf("receiver answered %v; want the killed call and exactly one 200", got)
	}
	if len(d.History) != 1 || d.History[0].StatusCode != 200 || d.Attempts != 1 {
		t.Errorf("history after the takeover: %+v", d)
	}
}
