package e2e

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	hookdelivery "github.com/lockstep-hq/lockstep/delivery"

	"github.com/lockstep-hq/lockstep/internal/e2ekit"
	"github.com/lockstep-hq/lockstep/internal/testenv"
)

// TestReplicasPromote: two `lockstep serve` replicas on one data
// directory, one Postgres and one Redis (the landing queue's lock across
// replicas); 8 promotes spread over both all land, one on top of the
// other.
func TestReplicasPromote(t *testing.T) {
	t.Parallel()
	const n = 8
	testenv.MustRedis(t) // reachable, or fail with instructions
	redisArgs := []string{"--redis-url", testenv.RedisURL(t)}
	a := startGateServer(t, serverOpts{Postgres: true, Args: redisArgs})
	b := startGateServer(t, serverOpts{Data: a.Data, DatabaseURL: a.Opts.DatabaseURL, Args: redisArgs})
	a.CreateRepo(t, "base")
	files := map[string]string{"README": "shared\n"}
	base0 := a.push(t, a.AdminKey, "base", zeroOID, files).Commit
	a.setGate(t, "base", map[string]any{})
	agent := a.CreateKey(t, "agent", "agent")
	for i := 0; i < n; i++ {
		ws := fmt.Sprintf("ws-%d", i)
		srv := []*server{a, b}[i%2]
		srv.forkTip(t, agent.Secret, "base", ws)
		srv.push(t, agent.Secret, ws, base0, with(files, map[string]string{fmt.Sprintf("file-%d.txt", i): ws + "\n"}))
	}
	results := make([]*e2ekit.Response, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			<-start
			srv := []*server{a, b}[i%2]
			results[i] = srv.Call(t, "POST", fmt.Sprintf("/api/v1/repos/ws-%d/promote", i), agent.Secret, nil, "")
		}(i)
	}
	close(start)
	wg.Wait()
	for i, r := range results {
		if r.Status != http.StatusOK {
			t.Errorf("promote ws-%d on replica %d: %s", i, i%2, r)
		}
	}
	for _, srv := range []*server{a, b} {
		main := srv.Head(t, "base")
		for i := 0; i < n; i++ {
			if got := srv.Blob(t, "base", main, fmt.Sprintf("file-%d.txt", i)); got != fmt.Sprintf("ws-%d\n", i) {
				t.Errorf("replica %s: main's file-%d.txt = %q", srv.URL, i, got)
			}
		}
		k := 0
		for c := main; c != base0 && k <= n; k++ {
			c = srv.Commit(t, "base", c).Parents[0]
		}
		if k != n {
			t.Errorf("replica %s: first-parent chain of %d commits, want %d", srv.URL, k, n)
		}
	}
}

// TestReplicasDeliverOnce: two replicas' delivery workers share one
// outbox (Postgres); every delivery is sent by one of them at a time:
// the receiver sees each delivery's attempts exactly as recorded, and
// exactly one success per delivery.
func TestReplicasDeliverOnce(t *testing.T) {
	t.Parallel()
	const n = 10
	var mu sync.Mutex
	perID := map[string][]int{}
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		id := r.Header.Get("X-Lockstep-Delivery")
		mu.Lock()
		status := http.StatusOK
		if len(perID[id]) == 0 {
			status = http.StatusServiceUnavailable // every delivery fails once
		}
		if !hookdelivery.Verify(hookSecret, body, r.Header.Get("X-Lockstep-Signature")) {
			status = http.StatusUnauthorized
		}
		perID[id] = append(perID[id], status)
		mu.Unlock()
		w.WriteHeader(status)
	}))
	defer rcv.Close()
	a := startGateServer(t, serverOpts{Postgres: true})
	b := startGateServer(t, serverOpts{Data: a.Data, DatabaseURL: a.Opts.DatabaseURL})
	a.CreateRepo(t, "base")
	base0 := a.push(t, a.AdminKey, "base", zeroOID, map[string]string{"README": "hi\n"}).Commit
	hookID := a.createHook(t, "base", rcv.URL, []string{"push"})
	agent := a.CreateKey(t, "agent", "agent")
	for i := 0; i < n; i++ {
		srv := []*server{a, b}[i%2]
		ws := fmt.Sprintf("ws-%d", i)
		srv.forkTip(t, agent.Secret, "base", ws)
		srv.push(t, agent.Secret, ws, base0, map[string]string{"README": "hi\n", "f": ws})
	}
	var ds []delivery
	eventually(t, 60*time.Second, "every delivery to succeed", func() bool {
		ds = b.deliveries(t, "base", hookID)
		for _, d := range ds {
			if d.Status != "succeeded" {
				return false
			}
		}
		return len(ds) == n
	})
	mu.Lock()
	defer mu.Unlock()
	if len(perID) != n {
		t.Fatalf("receiver saw %d delivery ids, want %d", len(perID), n)
	}
	for _, d := range ds {
		got := perID[d.ID]
		if len(got) != 2 || got[0] != http.StatusServiceUnavailable || got[1] != http.StatusOK {
			t.Errorf("delivery %s: receiver answered %v, want [503 200]", d.ID, got)
		}
		if len(d.History) != len(got) || d.Attempts != len(got) {
			t.Errorf("delivery %s: %d attempts recorded, receiver saw %d", d.ID, len(d.History), len(got))
		}
	}
}
