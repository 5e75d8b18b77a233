package e2egate

import (
	"fmt"
	"net/http"
	"sync"
	"testing"

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
	a := startServer(t, serverOpts{Postgres: true, Args: redisArgs})
	b := startServer(t, serverOpts{Data: a.Data, DatabaseURL: a.opts.DatabaseURL, Args: redisArgs})
	a.createRepo(t, "base")
	files := map[string]string{"README": "shared\n"}
	base0 := a.push(t, a.AdminKey, "base", zeroOID, files).Commit
	a.setGate(t, "base", map[string]any{})
	agent := a.createKey(t, "agent", "agent")
	for i := 0; i < n; i++ {
		ws := fmt.Sprintf("ws-%d", i)
		srv := []*server{a, b}[i%2]
		srv.fork(t, agent.Secret, "base", ws)
		srv.push(t, agent.Secret, ws, base0, with(files, map[string]string{fmt.Sprintf("file-%d.txt", i): ws + "\n"}))
	}
	results := make([]*response, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			<-start
			srv := []*server{a, b}[i%2]
			results[i] = srv.call(t, "POST", fmt.Sprintf("/api/v1/repos/ws-%d/promote", i), agent.Secret, nil, "")
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
		main := srv.head(t, "base")
		for i := 0; i < n; i++ {
			if got := srv.blob(t, "base", main, fmt.Sprintf("file-%d.txt", i)); got != fmt.Sprintf("ws-%d\n", i) {
				t.Errorf("replica %s: main's file-%d.txt = %q", srv.URL, i, got)
			}
		}
		k := 0
		for c := main; c != base0 && k <= n; k++ {
			c = srv.commit(t, "base", c).Parents[0]
		}
		if k != n {
			t.Errorf("replica %s: first-parent chain of %d commits, want %d", srv.URL, k, n)
		}
	}
}
