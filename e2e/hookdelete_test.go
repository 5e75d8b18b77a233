package e2e

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// TestDeletedHookStopsRetrying: a hook deleted while one of its deliveries
// is in flight (the receiver is still answering) is not retried after the
// receiver answers 500: deletion drops what is pending, and the attempt
// that was in flight must not bring the delivery back.
func TestDeletedHookStopsRetrying(t *testing.T) {
	onBothBackends(t, testDeletedHook)
}

func testDeletedHook(t *testing.T, postgres bool) {
	var mu sync.Mutex
	calls := 0
	entered := make(chan struct{}, 10)
	release := make(chan struct{})
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls++
		n := calls
		mu.Unlock()
		entered <- struct{}{}
		if n == 1 {
			<-release
		}
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer rcv.Close()
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()

	s := startGateServer(t, serverOpts{Postgres: postgres, Args: []string{"--hook-timeout", "30s"}})
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
	if r := s.Call(t, "DELETE", "/api/v1/repos/base/hooks/"+hookID, s.AdminKey, nil, ""); r.Status != http.StatusNoContent {
		t.Fatalf("delete hook: %s", r)
	}
	close(release) // the in-flight attempt now fails with 500

	var d delivery
	eventually(t, 30*time.Second, "the in-flight attempt to be recorded", func() bool {
		ds := s.deliveries(t, "base", hookID)
		if len(ds) == 1 && len(ds[0].History) == 1 {
			d = ds[0]
			return true
		}
		return false
	})
	if d.Status != "failed" {
		t.Errorf("BUG: the delivery of a deleted hook is %q after its in-flight attempt, want failed (history %+v)", d.Status, d.History)
	}
	// Give the worker a chance to (wrongly) retry: the backoff is 100ms.
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		mu.Lock()
		n := calls
		mu.Unlock()
		if n > 1 {
			t.Fatalf("BUG: a deleted hook was called again (%d calls)", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
