package e2e

import (
	"net/http"
	"sync"
	"testing"

	"github.com/lockstep-hq/lockstep/internal/e2ekit"
)

// TestPromoteRaces: the gate is evaluated inside the landing queue on the
// branch as it is then, so a workspace promoted twice at once lands once,
// and of two workspaces that conflict with each other only the first
// lands; the second is refused with clean_merge.
func TestPromoteRaces(t *testing.T) {
	t.Parallel()
	s := startGateServer(t, serverOpts{})
	s.CreateRepo(t, "base")
	files := map[string]string{"shared.txt": "a\nb\nc\n"}
	base0 := s.push(t, s.AdminKey, "base", zeroOID, files).Commit
	s.setGate(t, "base", map[string]any{})
	agent := s.CreateKey(t, "agent", "agent")
	s.forkTip(t, agent.Secret, "base", "twice")
	s.forkTip(t, agent.Secret, "base", "left")
	s.forkTip(t, agent.Secret, "base", "right")
	s.push(t, agent.Secret, "twice", base0, with(files, map[string]string{"t.txt": "t\n"}))
	s.push(t, agent.Secret, "left", base0, with(files, map[string]string{"shared.txt": "a\nLEFT\nc\n"}))
	s.push(t, agent.Secret, "right", base0, with(files, map[string]string{"shared.txt": "a\nRIGHT\nc\n"}))

	promoteAll := func(names ...string) []*e2ekit.Response {
		out := make([]*e2ekit.Response, len(names))
		var wg sync.WaitGroup
		for i, n := range names {
			wg.Add(1)
			go func() {
				defer wg.Done()
				out[i] = s.Call(t, "POST", "/api/v1/repos/"+n+"/promote", agent.Secret, nil, "")
			}()
		}
		wg.Wait()
		return out
	}

	rs := promoteAll("twice", "twice", "twice")
	ok := 0
	for _, r := range rs {
		switch r.Status {
		case http.StatusOK:
			ok++
		case http.StatusBadRequest:
			e2ekit.RequireError(t, "second promote of the same workspace", r, 400, "invalid_argument")
		default:
			t.Errorf("promote twice: %s", r)
		}
	}
	if ok != 1 {
		t.Fatalf("the same workspace promoted at once three times: %d landed, want 1", ok)
	}
	afterTwice := s.Head(t, "base")

	rs = promoteAll("left", "right")
	var won, lost int
	for _, r := range rs {
		switch r.Status {
		case http.StatusOK:
			won++
		case http.StatusPreconditionFailed:
			lost++
			var e struct {
				Error struct {
					Details struct {
						Reasons []reason `json:"reasons"`
					} `json:"details"`
				} `json:"error"`
			}
			r.Decode(t, &e)
			if got := rules(e.Error.Details.Reasons); len(got) != 1 || got[0] != "clean_merge" {
				t.Errorf("the loser's reasons: %+v", e.Error.Details.Reasons)
			}
		default:
			t.Errorf("promote left/right: %s", r)
		}
	}
	if won != 1 || lost != 1 {
		t.Fatalf("left/right: %d landed, %d refused; want 1 and 1", won, lost)
	}
	main := s.Head(t, "base")
	if c := s.Commit(t, "base", main); len(c.Parents) != 2 || c.Parents[0] != afterTwice {
		t.Fatalf("main after left/right: %+v", c)
	}
}

// TestPromoteCommitOfAnotherWorkspace: the commit a promote names must be
// the workspace's own work. Objects are shared by the fork network, so a
// commit pushed to another agent's workspace resolves everywhere.
func TestPromoteCommitOfAnotherWorkspace(t *testing.T) {
	t.Parallel()
	s := startGateServer(t, serverOpts{})
	s.CreateRepo(t, "base")
	files := map[string]string{"README": "hi\n"}
	base0 := s.push(t, s.AdminKey, "base", zeroOID, files).Commit
	s.setGate(t, "base", map[string]any{})
	alice := s.CreateKey(t, "alice", "agent")
	bob := s.CreateKey(t, "bob", "agent")
	s.forkTip(t, alice.Secret, "base", "ws-alice")
	s.forkTip(t, bob.Secret, "base", "ws-bob")
	a1 := s.push(t, alice.Secret, "ws-alice", base0, with(files, map[string]string{"alice.txt": "a\n"})).Commit
	s.push(t, alice.Secret, "ws-alice", a1, with(files, map[string]string{"alice.txt": "a\n", "alice2.txt": "a2\n"}))
	bobs := s.push(t, bob.Secret, "ws-bob", base0, with(files, map[string]string{"bob.txt": "b\n"})).Commit

	// Found by this suite: PromoteTarget resolved the oid anywhere in the
	// network, and alice landed bob's commit through ws-alice (fixed in
	// forks/promote.go: the commit must be in the workspace's history).
	r := s.Call(t, "POST", "/api/v1/repos/ws-alice/promote", alice.Secret, map[string]any{"commit": bobs}, "")
	e2ekit.RequireError(t, "promote ws-alice with bob's commit", r, http.StatusBadRequest, "invalid_argument")
	r = s.Call(t, "GET", "/api/v1/repos/ws-alice/gate/evaluate?commit="+bobs, alice.Secret, nil, "")
	e2ekit.RequireError(t, "evaluate ws-alice with bob's commit", r, http.StatusBadRequest, "invalid_argument")
	if h := s.Head(t, "base"); h != base0 {
		t.Fatalf("main moved: %s", h)
	}
	// An earlier attempt of the workspace itself is its own work: it lands.
	var res promoteResult
	s.MustJSON(t, "POST", "/api/v1/repos/ws-alice/promote", alice.Secret, map[string]any{"commit": a1}, http.StatusOK, &res)
	if h := s.Head(t, "base"); h != a1 || res.Commit != a1 {
		t.Fatalf("promote of alice's first attempt: main %s, answer %+v, want %s", h, res, a1)
	}
	// bob's workspace is untouched and still promotes its own tip.
	if res := s.promote(t, bob.Secret, "ws-bob"); res.Commit == "" {
		t.Fatal("promote ws-bob")
	}
}
