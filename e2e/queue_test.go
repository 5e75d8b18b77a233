package e2e

import (
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"testing"

	"github.com/lockstep-hq/lockstep/internal/e2ekit"
)

// TestConcurrentPromotes: 8 workspaces promoted at once into one branch
// all land, one on top of the other, in the order the landing queue
// served them.
func TestConcurrentPromotes(t *testing.T) {
	onBothBackends(t, testConcurrentPromotes)
}

func testConcurrentPromotes(t *testing.T, postgres bool) {
	const n = 8
	s := startGateServer(t, serverOpts{Postgres: postgres})
	s.CreateRepo(t, "base")
	files := map[string]string{"README": "shared\n"}
	base0 := s.push(t, s.AdminKey, "base", zeroOID, files).Commit
	s.setGate(t, "base", map[string]any{})
	agent := s.CreateKey(t, "agent", "agent")
	tips := map[string]string{}
	for i := 0; i < n; i++ {
		ws := fmt.Sprintf("ws-%d", i)
		s.forkTip(t, agent.Secret, "base", ws)
		tips[ws] = s.push(t, agent.Secret, ws, base0, with(files, map[string]string{fmt.Sprintf("file-%d.txt", i): fmt.Sprintf("work of %s\n", ws)})).Commit
	}

	start := make(chan struct{})
	var wg sync.WaitGroup
	results := make([]*e2ekit.Response, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			<-start
			results[i] = s.Call(t, "POST", fmt.Sprintf("/api/v1/repos/ws-%d/promote", i), agent.Secret, map[string]any{}, "")
		}(i)
	}
	close(start)
	wg.Wait()
	for i, r := range results {
		if r.Status != http.StatusOK {
			t.Errorf("promote ws-%d: %s", i, r)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	main := s.Head(t, "base")
	for i := 0; i < n; i++ {
		if got := s.Blob(t, "base", main, fmt.Sprintf("file-%d.txt", i)); got != fmt.Sprintf("work of ws-%d\n", i) {
			t.Errorf("main's file-%d.txt = %q", i, got)
		}
	}

	// First-parent chain: exactly n new commits down to the old base,
	// each one bringing in one workspace.
	var chain []e2ekit.Commit
	for c := main; c != base0; {
		ci := s.Commit(t, "base", c)
		chain = append(chain, ci)
		if len(ci.Parents) == 0 || len(chain) > n {
			t.Fatalf("first-parent chain from %s does not reach the old base %s within %d commits: %+v", main, base0, n, chain)
		}
		c = ci.Parents[0]
	}
	if len(chain) != n {
		t.Fatalf("first-parent chain has %d new commits, want %d", len(chain), n)
	}

	// The oplog's successful promotes form one chain of ref moves of
	// base's main: each starts where the previous one ended.
	var moves []e2ekit.RefMove
	var order []string
	for _, e := range s.Oplog(t, url.Values{"op": {"promote"}}) {
		if e.Result != "ok" && e.Result != "" {
			t.Errorf("promote entry %d: result %q", e.Seq, e.Result)
			continue
		}
		if len(e.Refs) != 1 || e.Refs[0].Ref != "refs/heads/main" {
			t.Fatalf("promote entry %d moves %+v, want base's main", e.Seq, e.Refs)
		}
		moves = append(moves, e.Refs[0])
		ws, _ := e.Details["workspace"].(string)
		order = append(order, ws)
	}
	if len(moves) != n {
		t.Fatalf("%d promote entries, want %d", len(moves), n)
	}
	prev := base0
	for i, m := range moves {
		if m.Old != prev {
			t.Errorf("promote %d (%s) moved main from %s, but the previous one left it at %s", i, order[i], m.Old, prev)
		}
		// the chain walked above, oldest first
		if want := chain[n-1-i].Commit; m.New != want {
			t.Errorf("promote %d (%s) landed %s, first-parent chain has %s", i, order[i], m.New, want)
		}
		// and it is the workspace the entry names: a fast-forward to its
		// tip or a merge commit whose second parent is its tip
		c := chain[n-1-i]
		if c.Commit != tips[order[i]] && (len(c.Parents) != 2 || c.Parents[1] != tips[order[i]]) {
			t.Errorf("promote %d names %s (tip %s) but landed %+v", i, order[i], tips[order[i]], c)
		}
		prev = m.New
	}
	if prev != main {
		t.Errorf("the last promote left main at %s, main is %s", prev, main)
	}
	seen := map[string]bool{}
	for _, ws := range order {
		if seen[ws] || tips[ws] == "" {
			t.Errorf("oplog promote order %v: %q repeated or unknown", order, ws)
		}
		seen[ws] = true
	}
	t.Logf("landing order: %v", order)

	// The hash chain of the operations log survived the concurrency.
	var v struct {
		OK      bool  `json:"ok"`
		Entries int64 `json:"entries"`
	}
	s.MustJSON(t, "GET", "/api/v1/oplog/verify", s.AdminKey, nil, http.StatusOK, &v)
	if !v.OK || v.Entries == 0 {
		t.Errorf("oplog verify: %+v", v)
	}
}
