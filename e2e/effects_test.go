package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep/api"
	"github.com/lockstep-hq/lockstep/client"
)

// effectReceiver is a real HTTP receiver on loopback that de-duplicates
// by Idempotency-Key, as the README asks receivers to: seen counts every
// request of a key, processed only the first one answered 2xx.
type effectReceiver struct {
	*httptest.Server
	mu        sync.Mutex
	seen      map[string]int
	processed map[string]int
	methods   map[string]string
	auth      map[string]string
	failFirst map[string]int // key → requests answered 500 before a 200
	hold      chan struct{}  // when set, requests wait on it
	waiting   int            // requests waiting on hold
}

func newEffectReceiver(t *testing.T) *effectReceiver {
	r := &effectReceiver{seen: map[string]int{}, processed: map[string]int{}, methods: map[string]string{}, auth: map[string]string{}, failFirst: map[string]int{}}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		io.Copy(io.Discard, req.Body)
		key := req.Header.Get("Idempotency-Key")
		r.mu.Lock()
		hold := r.hold
		r.mu.Unlock()
		if hold != nil {
			r.mu.Lock()
			r.waiting++
			r.mu.Unlock()
			select {
			case <-hold:
			case <-req.Context().Done():
			}
			r.mu.Lock()
			r.waiting--
			r.mu.Unlock()
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		r.seen[key]++
		r.methods[key] = req.Method
		r.auth[key] = req.Header.Get("Authorization")
		if req.Header.Get("webhook-id") != key || key == "" {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if r.failFirst[key] > 0 {
			r.failFirst[key]--
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		r.processed[key]++ // a real receiver would store the key here
		if r.processed[key] > 1 {
			r.processed[key] = 1 // answered from its record: not processed again
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *effectReceiver) count(key string) (seen, processed int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seen[key], r.processed[key]
}

func (r *effectReceiver) keys() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int{}
	for k, v := range r.seen {
		out[k] = v
	}
	return out
}

func effectServer(t *testing.T, opts serverOpts) *server {
	opts.Env = append([]string{"LOCKSTEP_EFFECT_ALLOW_HOSTS=127.0.0.1"}, opts.Env...)
	opts.Args = append([]string{"--effect-backoff", "100ms", "--effect-max-backoff", "500ms", "--effect-timeout", "2s"}, opts.Args...)
	return startGateServer(t, opts)
}

func stage(t *testing.T, c *client.Client, ws string, req api.EffectRequest) api.Effect {
	t.Helper()
	e, err := c.StageEffect(context.Background(), ws, req)
	if err != nil {
		t.Fatalf("stage on %s: %v", ws, err)
	}
	if e.Status != "staged" || e.Seq == 0 || !strings.HasPrefix(e.ID, "eff_") {
		t.Fatalf("staged %+v", e)
	}
	return e
}

func effectNow(t *testing.T, c *client.Client, repo, id string) api.Effect {
	t.Helper()
	e, err := c.Effect(context.Background(), repo, id)
	if err != nil {
		t.Fatalf("effect %s: %v", id, err)
	}
	return e
}

// TestEffectsOutbox: effects staged on a workspace reach the receiver
// only through a promote, exactly once; a checkpoint restore, a failed
// workspace and a failed run discard theirs; a held class waits for a
// reviewer; the receiver sees one Idempotency-Key on every retry; secret
// headers are delivered but never shown or stored in clear.
func TestEffectsOutbox(t *testing.T) {
	onBothBackends(t, testEffectsOutbox)
}

func testEffectsOutbox(t *testing.T, postgres bool) {
	ctx := context.Background()
	rcv := newEffectReceiver(t)
	s := effectServer(t, serverOpts{Postgres: postgres})
	s.CreateRepo(t, "base")
	files := map[string]string{"README": "hi\n"}
	base0 := s.push(t, s.AdminKey, "base", zeroOID, files).Commit
	s.setGate(t, "base", map[string]any{"hold_effect_classes": []string{"payment"}})
	agent := s.CreateKey(t, "agent", "agent")
	reviewer := s.CreateKey(t, "rev", "reviewer")
	ac := client.New(s.URL, agent.Secret)
	rc := client.New(s.URL, reviewer.Secret)
	const token = "Bearer s3cr3t-effect-token"

	// ws1: checkpoint, stage, restore → the effect is discarded; one
	// staged after the restore survives and is released by the promote.
	s.forkTip(t, agent.Secret, "base", "ws1")
	cp, err := ac.CreateCheckpoint(ctx, "ws1", api.CheckpointRequest{})
	if err != nil {
		t.Fatal(err)
	}
	undone := stage(t, ac, "ws1", api.EffectRequest{Method: "POST", URL: rcv.URL + "/undone", Body: `{"a":1}`})
	if _, err := ac.RestoreCheckpoint(ctx, "ws1", cp.ID, api.RestoreRequest{}); err != nil {
		t.Fatalf("restore: %v", err)
	}
	if e := effectNow(t, ac, "ws1", undone.ID); e.Status != "discarded" || !strings.Contains(e.DiscardReason, cp.ID) {
		t.Fatalf("after the restore %+v", e)
	}
	kept := stage(t, ac, "ws1", api.EffectRequest{Method: "POST", URL: rcv.URL + "/kept", Body: `{"b":2}`,
		Headers: map[string]string{"Authorization": token, "Content-Type": "application/json"}, Label: "notify", Consuming: true})
	if kept.Headers["Authorization"] != "[redacted]" || !kept.Consuming {
		t.Fatalf("the staged answer shows %+v", kept)
	}
	// Another agent sees neither the list nor one effect (403), as with
	// another agent's failed-run output; the reviewer sees both.
	stranger := client.New(s.URL, s.CreateKey(t, "agent-2", "agent").Secret)
	if _, err := stranger.Effect(ctx, "ws1", kept.ID); !isCode(err, "permission_denied") {
		t.Fatalf("another agent read an effect: %v", err)
	}
	if _, _, err := stranger.Effects(ctx, "ws1", 0, 0); !isCode(err, "permission_denied") {
		t.Fatalf("another agent listed effects: %v", err)
	}
	if _, err := rc.Effect(ctx, "ws1", kept.ID); err != nil {
		t.Fatalf("the reviewer could not read an effect: %v", err)
	}
	rcv.mu.Lock()
	rcv.failFirst[kept.ID] = 1 // the receiver answers 500 first
	rcv.mu.Unlock()

	// ws2: staged, then the workspace is marked failed → discarded.
	s.forkTip(t, agent.Secret, "base", "ws2")
	failed := stage(t, ac, "ws2", api.EffectRequest{Method: "PUT", URL: rcv.URL + "/failed"})
	s.MustJSON(t, "POST", "/api/v1/repos/ws2/status", reviewer.Secret, map[string]string{"status": "failed", "reason": "bad"}, http.StatusOK, nil)
	if e := effectNow(t, ac, "ws2", failed.ID); e.Status != "discarded" {
		t.Fatalf("after failed %+v", e)
	}
	if _, err := ac.StageEffect(ctx, "ws2", api.EffectRequest{Method: "POST", URL: rcv.URL}); err == nil {
		t.Fatal("a failed workspace took an effect")
	}

	// ws3: a failed run discards what it staged, by run id.
	s.forkTip(t, agent.Secret, "base", "ws3")
	run1 := stage(t, ac, "ws3", api.EffectRequest{Method: "POST", URL: rcv.URL + "/run1", RunID: "run-1"})
	other := stage(t, ac, "ws3", api.EffectRequest{Method: "POST", URL: rcv.URL + "/other", RunID: "run-2"})
	res, err := ac.DiscardEffects(ctx, "ws3", api.EffectDiscard{RunID: "run-1", Reason: "run exited 1"})
	if err != nil || len(res.Discarded) != 1 || res.Discarded[0] != run1.ID {
		t.Fatalf("discard run: %+v %v", res, err)
	}
	if e := effectNow(t, ac, "ws3", other.ID); e.Status != "staged" {
		t.Fatalf("another run's effect %+v", e)
	}

	// ws4: a held class waits for a reviewer.
	s.forkTip(t, agent.Secret, "base", "ws4")
	pay := stage(t, ac, "ws4", api.EffectRequest{Method: "POST", URL: rcv.URL + "/pay", Class: "payment", Body: "1 EUR"})

	// Bad input: clear errors, nothing staged.
	for _, bad := range []api.EffectRequest{
		{Method: "GET", URL: rcv.URL},
		{Method: "POST", URL: "http://169.254.169.254/latest"},
		{Method: "POST", URL: rcv.URL, Headers: map[string]string{"Host": "x"}},
		{Method: "POST", URL: rcv.URL, Body: "x", BodyBase64: "eA=="},
		{Method: "POST", URL: rcv.URL, Class: "Bad Class"},
	} {
		if _, err := ac.StageEffect(ctx, "ws4", bad); errCode(err) != "invalid_argument" {
			t.Errorf("staging %+v: %v, want invalid_argument", bad, err)
		}
	}
	if _, err := ac.StageEffect(ctx, "ws4", api.EffectRequest{Method: "POST", URL: rcv.URL, Body: strings.Repeat("x", 1<<20+1)}); errCode(err) != "too_large" {
		t.Errorf("a body over the limit: %v, want too_large", err)
	}

	// Nothing reached the receiver before any promote.
	time.Sleep(300 * time.Millisecond)
	if k := rcv.keys(); len(k) != 0 {
		t.Fatalf("BUG: the receiver was called before a promote: %v", k)
	}

	s.push(t, agent.Secret, "ws1", base0, with(files, map[string]string{"ws1.txt": "1\n"}))
	s.promote(t, agent.Secret, "ws1")
	eventually(t, 60*time.Second, "the kept effect to be released", func() bool {
		return effectNow(t, ac, "ws1", kept.ID).Status == "released"
	})
	seen, processed := rcv.count(kept.ID)
	if seen != 2 || processed != 1 {
		t.Errorf("the receiver saw the kept effect's key %d times (processed %d), want 2 (one 500, one retry) and 1", seen, processed)
	}
	rcv.mu.Lock()
	gotAuth := rcv.auth[kept.ID]
	rcv.mu.Unlock()
	if gotAuth != token {
		t.Errorf("the receiver got Authorization %q, want the staged one", gotAuth)
	}
	e := effectNow(t, ac, "ws1", kept.ID)
	if e.Attempts != 2 || e.LastStatusCode != 200 || len(e.History) != 2 || e.History[0].StatusCode != 500 || e.ReleasedInto != "base" || len(e.ReleasedCommit) != 40 {
		t.Errorf("released effect %+v", e)
	}

	s.push(t, agent.Secret, "ws4", base0, with(files, map[string]string{"ws4.txt": "4\n"}))
	s.promote(t, agent.Secret, "ws4")
	if e := effectNow(t, ac, "ws4", pay.ID); e.Status != "held" {
		t.Fatalf("a payment after promote: %+v", e)
	}
	if _, err := ac.ApproveEffect(ctx, "ws4", pay.ID, ""); errCode(err) != "permission_denied" {
		t.Fatalf("an agent approved: %v", err)
	}
	if _, err := rc.ApproveEffect(ctx, "ws4", pay.ID, "checked"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "the approved payment to be released", func() bool {
		return effectNow(t, ac, "ws4", pay.ID).Status == "released"
	})

	// Only the kept and the approved effects ever reached the receiver.
	for k := range rcv.keys() {
		if k != kept.ID && k != pay.ID {
			t.Errorf("BUG: the receiver got %s, which was discarded or never promoted", k)
		}
	}
	// Each discard is a log entry.
	if ops := s.Oplog(t, map[string][]string{"op": {"effect.discard"}}); len(ops) != 3 {
		t.Errorf("%d effect.discard entries, want 3 (restore, failed, run)", len(ops))
	}
	// The secret header is never at rest in clear (SQLite: the files of
	// the data directory).
	if !postgres {
		filepath.Walk(s.Data, func(p string, fi os.FileInfo, err error) error {
			if err != nil || fi.IsDir() {
				return nil
			}
			b, _ := os.ReadFile(p)
			if strings.Contains(string(b), "s3cr3t-effect-token") {
				t.Errorf("BUG: %s holds the Authorization header in clear", p)
			}
			return nil
		})
	}
}

// effectRounds is how many kill rounds TestEffectReleaseSurvivesSIGKILL
// runs (LOCKSTEP_TEST_EFFECT_ROUNDS, default 20; the issue asks for 50).
func effectRounds() int {
	if n, err := strconv.Atoi(os.Getenv("LOCKSTEP_TEST_EFFECT_ROUNDS")); err == nil && n > 0 {
		return n
	}
	return 20
}

// TestEffectReleaseSurvivesSIGKILL: a server SIGKILLed after a promote
// committed (the outbox rows with the ref move) delivers every released
// effect after restart, each processed once by a receiver that
// de-duplicates by Idempotency-Key. Most rounds kill a server whose
// worker is off (--effect-delivery=false), so the kill falls exactly
// between the ref move and any delivery, and the receiver must see each
// key exactly once; every fifth round kills a delivering server while the
// receiver holds its requests (a crash mid-release), where a key may be
// sent again after the lease, never processed twice.
func TestEffectReleaseSurvivesSIGKILL(t *testing.T) {
	t.Parallel()
	rcv := newEffectReceiver(t)
	s := effectServer(t, serverOpts{Args: []string{"--effect-timeout", "1s"}})
	s.CreateRepo(t, "base")
	files := map[string]string{"README": "hi\n"}
	s.push(t, s.AdminKey, "base", zeroOID, files)
	agent := s.CreateKey(t, "agent", "agent")
	rounds := effectRounds()
	for i := 0; i < rounds; i++ {
		midRelease := i%5 == 4
		delivering := "true"
		if !midRelease {
			delivering = "false"
		}
		s.Opts.Env = append(s.Opts.Env, "LOCKSTEP_EFFECT_DELIVERY="+delivering)
		s.Kill()
		s = s.restart(t)
		ac := client.New(s.URL, agent.Secret)
		ws := fmt.Sprintf("ws-%d", i)
		s.forkTip(t, agent.Secret, "base", ws)
		var ids []string
		for j := 0; j < 3; j++ {
			ids = append(ids, stage(t, ac, ws, api.EffectRequest{Method: "POST", URL: fmt.Sprintf("%s/r%d/e%d", rcv.URL, i, j), Body: "x"}).ID)
		}
		tip := s.Head(t, ws)
		s.push(t, agent.Secret, ws, tip, with(files, map[string]string{ws + ".txt": ws}))
		var hold chan struct{}
		if midRelease {
			hold = make(chan struct{})
			rcv.mu.Lock()
			rcv.hold = hold
			rcv.mu.Unlock()
		}
		s.promote(t, agent.Secret, ws)
		if midRelease {
			eventually(t, 30*time.Second, "the first effect to be in flight", func() bool {
				// The worker took the first row: the receiver holds it.
				return effectNow(t, ac, ws, ids[0]).Status == "releasing" && inFlight(rcv)
			})
		}
		s.Kill() // SIGKILL: no shutdown at all
		if midRelease {
			rcv.mu.Lock()
			rcv.hold = nil
			rcv.mu.Unlock()
			close(hold)
		}
		s.Opts.Env = append(s.Opts.Env, "LOCKSTEP_EFFECT_DELIVERY=true")
		s = s.restart(t)
		ac = client.New(s.URL, agent.Secret)
		eventually(t, 90*time.Second, fmt.Sprintf("round %d: every effect released after the restart", i), func() bool {
			for _, id := range ids {
				if effectNow(t, ac, ws, id).Status != "released" {
					return false
				}
			}
			return true
		})
		for _, id := range ids {
			seen, processed := rcv.count(id)
			if processed != 1 || (!midRelease && seen != 1) {
				t.Errorf("round %d (mid-release %v): effect %s seen %d times, processed %d", i, midRelease, id, seen, processed)
			}
		}
	}
}

// inFlight reports whether a request waits in the receiver's hold.
func inFlight(r *effectReceiver) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.waiting > 0
}

// errCode is the error code of a client error ("" for none).
func errCode(err error) string {
	var e *client.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// TestEffectCompensation: a promote releases a POST; a rollback of the
// base offers its compensation; running the offers sends the DELETE once
// (its own key), and running them again sends nothing.
func TestEffectCompensation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rcv := newEffectReceiver(t)
	s := effectServer(t, serverOpts{})
	s.CreateRepo(t, "base")
	files := map[string]string{"README": "hi\n"}
	base0 := s.push(t, s.AdminKey, "base", zeroOID, files).Commit
	agent := s.CreateKey(t, "agent", "agent")
	ac := client.New(s.URL, agent.Secret)
	admin := client.New(s.URL, s.AdminKey)
	s.forkTip(t, agent.Secret, "base", "ws")
	e := stage(t, ac, "ws", api.EffectRequest{Method: "POST", URL: rcv.URL + "/orders", Body: `{"order":1}`, Label: "open order", Consuming: true,
		Compensation: &api.EffectCompensation{Method: "DELETE", URL: rcv.URL + "/orders/1"}})
	s.push(t, agent.Secret, "ws", base0, with(files, map[string]string{"order.txt": "1\n"}))
	s.promote(t, agent.Secret, "ws")
	eventually(t, 60*time.Second, "the POST to be released", func() bool { return effectNow(t, ac, "ws", e.ID).Status == "released" })
	released := effectNow(t, ac, "ws", e.ID)

	rb, err := admin.Rollback(ctx, "base", base0, client.WriteOptions{ExpectOID: s.Head(t, "base")})
	if err != nil {
		t.Fatalf("rollback: %v", err)
	}
	if len(rb.Compensations) != 1 || rb.Compensations[0].Effect != e.ID || rb.Compensations[0].Commit != released.ReleasedCommit ||
		!strings.HasPrefix(rb.Compensations[0].Compensation, "DELETE ") || !rb.Compensations[0].Consuming {
		t.Fatalf("the rollback offers %+v", rb.Compensations)
	}
	if _, err := ac.CompensateCommit(ctx, "base", released.ReleasedCommit); errCode(err) != "permission_denied" {
		t.Fatalf("an agent compensated a commit: %v", err)
	}
	res, err := admin.CompensateCommit(ctx, "base", released.ReleasedCommit)
	if err != nil || len(res.Effects) != 1 || res.Effects[0].CompensationStatus != "pending" {
		t.Fatalf("compensate: %+v %v", res, err)
	}
	eventually(t, 60*time.Second, "the compensation to run", func() bool {
		return effectNow(t, ac, "ws", e.ID).CompensationStatus == "compensated"
	})
	again, err := admin.CompensateCommit(ctx, "base", released.ReleasedCommit)
	if err != nil || len(again.Effects) != 0 {
		t.Fatalf("a second compensate queued %+v %v", again, err)
	}
	if _, err := admin.CompensateEffect(ctx, "base", e.ID); errCode(err) != "invalid_argument" {
		t.Fatalf("compensating twice: %v", err)
	}
	time.Sleep(300 * time.Millisecond)
	seen, processed := rcv.count(e.ID + ".compensation")
	rcv.mu.Lock()
	method := rcv.methods[e.ID+".compensation"]
	rcv.mu.Unlock()
	if seen != 1 || processed != 1 || method != "DELETE" {
		t.Errorf("the compensation was seen %d times (processed %d, method %q), want one DELETE", seen, processed, method)
	}
	if s, _ := rcv.count(e.ID); s != 1 {
		t.Errorf("the POST was sent %d times, want 1 (a compensation is a new request, the first is not resent)", s)
	}
	if ops := s.Oplog(t, map[string][]string{"op": {"effect.compensate"}}); len(ops) != 1 {
		t.Errorf("%d effect.compensate entries, want 1", len(ops))
	}
}

// TestEffectsTwoReplicas: two replicas on one Postgres, each running the
// outbox worker, deliver every released effect exactly once.
func TestEffectsTwoReplicas(t *testing.T) {
	t.Parallel()
	rcv := newEffectReceiver(t)
	a := effectServer(t, serverOpts{Postgres: true})
	b := effectServer(t, serverOpts{Data: a.Data, DatabaseURL: a.Opts.DatabaseURL})
	a.CreateRepo(t, "base")
	files := map[string]string{"README": "hi\n"}
	a.push(t, a.AdminKey, "base", zeroOID, files)
	agent := a.CreateKey(t, "agent", "agent")
	var ids []string
	for i := 0; i < 4; i++ {
		srv := []*server{a, b}[i%2]
		c := client.New(srv.URL, agent.Secret)
		ws := fmt.Sprintf("ws-%d", i)
		srv.forkTip(t, agent.Secret, "base", ws)
		for j := 0; j < 5; j++ {
			ids = append(ids, stage(t, c, ws, api.EffectRequest{Method: "POST", URL: fmt.Sprintf("%s/%s/%d", rcv.URL, ws, j), Body: "x"}).ID)
		}
		tip := srv.Head(t, ws)
		srv.push(t, agent.Secret, ws, tip, with(files, map[string]string{ws + ".txt": ws}))
		srv.promote(t, agent.Secret, ws)
	}
	c := client.New(a.URL, agent.Secret)
	eventually(t, 90*time.Second, "every effect to be released", func() bool {
		for i := 0; i < 4; i++ {
			list, _, err := c.Effects(context.Background(), fmt.Sprintf("ws-%d", i), 0, 100)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range list {
				if e.Status != "released" {
					return false
				}
			}
		}
		return true
	})
	for _, id := range ids {
		if seen, _ := rcv.count(id); seen != 1 {
			t.Errorf("BUG: effect %s was sent %d times by two replicas, want 1", id, seen)
		}
	}
}

// TestEffectsMCP: an agent stages and lists effects through the MCP
// tools; a refused target is a tool error with the code.
func TestEffectsMCP(t *testing.T) {
	t.Parallel()
	s := effectServer(t, serverOpts{})
	s.CreateRepo(t, "shop")
	s.push(t, s.AdminKey, "shop", zeroOID, map[string]string{"README": "shop\n"})
	agent := s.CreateKey(t, "agent-mcp", "agent")
	s.forkTip(t, agent.Secret, "shop", "ws")
	cs := mcpHTTP(t, s.Server, agent.Secret)
	var staged api.Effect
	mustTool(t, cs, "effect_stage", map[string]any{"workspace": "ws", "method": "POST", "url": "http://127.0.0.1:9/orders",
		"body": `{"n":1}`, "headers": map[string]string{"X-Api-Key": "k3y"}, "consuming": true, "compensate_method": "DELETE", "compensate_url": "http://127.0.0.1:9/orders/1"}, &staged)
	if staged.Status != "staged" || staged.Headers["X-Api-Key"] != "[redacted]" || staged.Compensation == nil || !staged.Consuming {
		t.Fatalf("effect_stage answered %+v", staged)
	}
	var list api.EffectList
	mustTool(t, cs, "effect_list", map[string]any{"workspace": "ws"}, &list)
	if len(list.Effects) != 1 || list.Effects[0].ID != staged.ID {
		t.Fatalf("effect_list answered %+v", list)
	}
	mustToolError(t, cs, "effect_stage", map[string]any{"workspace": "ws", "method": "POST", "url": "http://169.254.169.254/"}, "invalid_argument")
}

// TestEffectsCLI: lockstep effects stage, list, approve and reject.
func TestEffectsCLI(t *testing.T) {
	t.Parallel()
	s := effectServer(t, serverOpts{})
	s.CreateRepo(t, "base")
	s.push(t, s.AdminKey, "base", zeroOID, map[string]string{"README": "hi\n"})
	agent := s.CreateKey(t, "agent", "agent")
	s.forkTip(t, agent.Secret, "base", "ws")
	r := s.CLI(t, agent.Secret, "", "effects", "stage", "ws", "--method", "POST", "--target", "http://127.0.0.1:9/orders", "--body", `{"n":1}`,
		"--header", "Authorization: Bearer cli-secret", "--class", "payment", "--consuming", "--compensate-method", "DELETE", "--compensate-target", "http://127.0.0.1:9/orders/1")
	if r.Code != 0 || !strings.Contains(r.Stdout, "staged eff_") || !strings.Contains(r.Stdout, "sent only when ws is promoted") {
		t.Fatalf("effects stage: %s", r)
	}
	r = s.CLI(t, agent.Secret, "", "effects", "list", "ws", "--json")
	var list api.EffectList
	if r.Code != 0 {
		t.Fatalf("effects list: %s", r)
	}
	if err := json.Unmarshal([]byte(r.Stdout), &list); err != nil || len(list.Effects) != 1 || list.Effects[0].Class != "payment" ||
		list.Effects[0].Headers["Authorization"] != "[redacted]" || list.Effects[0].Compensation == nil {
		t.Fatalf("effects list --json: %v %s", err, r.Stdout)
	}
	r = s.CLI(t, agent.Secret, "", "effects", "stage", "ws", "--method", "GET", "--target", "http://127.0.0.1:9/")
	if r.Code != 2 || !strings.Contains(r.Stderr, "reads are not effects") {
		t.Fatalf("a read staged: %s", r)
	}
	r = s.CLI(t, agent.Secret, "", "effects", "approve", "ws", list.Effects[0].ID)
	if r.Code != 1 || !strings.Contains(r.Stderr, "permission") {
		t.Fatalf("an agent approving: %s", r)
	}
}

// isCode reports whether err is the client's error with the given code.
func isCode(err error, code string) bool {
	var ce *client.Error
	return errors.As(err, &ce) && ce.Code == code
}
