package web_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/checkpoints"
	"github.com/lockstep-hq/lockstep/effects"
	"github.com/lockstep-hq/lockstep/sqlstore"
	"github.com/lockstep-hq/lockstep/web"
)

// gatedBody sends head, then waits for open before sending the rest: a
// client whose body is still on its way.
type gatedBody struct {
	head, rest []byte
	open       chan struct{}
	once       sync.Once
	sent       int
}

func newGatedBody(head, rest []byte) *gatedBody {
	return &gatedBody{head: head, rest: rest, open: make(chan struct{})}
}

func (g *gatedBody) release() { g.once.Do(func() { close(g.open) }) }

func (g *gatedBody) Read(p []byte) (int, error) {
	if g.sent < len(g.head) {
		n := copy(p, g.head[g.sent:])
		g.sent += n
		return n, nil
	}
	<-g.open
	off := g.sent - len(g.head)
	if off >= len(g.rest) {
		return 0, io.EOF
	}
	n := copy(p, g.rest[off:])
	g.sent += n
	return n, nil
}

type answer struct {
	code int
	m    map[string]any
	err  error
}

// sendGated sends a request whose body stops after its head; the answer
// arrives on the channel.
func sendGated(f *fixture, method, path, key, idemKey, ctype string, body *gatedBody) chan answer {
	req, _ := http.NewRequest(method, f.srv.URL+path, body)
	req.ContentLength = int64(len(body.head) + len(body.rest))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Idempotency-Key", idemKey)
	req.Header.Set("Content-Type", ctype)
	out := make(chan answer, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			out <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var m map[string]any
		json.Unmarshal(b, &m)
		out <- answer{code: resp.StatusCode, m: m}
	}()
	return out
}

// Authorization and admission come before any body is read, with or
// without an Idempotency-Key (issue 21, item 2): a reviewer's keyed write
// is refused while its body is still on its way, and keyed uploads beyond
// --max-concurrent-uploads are refused at once.
func TestAdmissionBeforeBody(t *testing.T) {
	f := uploadServer(t, 1)
	if code, m, _ := f.do(t, "POST", "/api/v1/repos", f.admin, `{"name":"up"}`); code != http.StatusCreated {
		t.Fatalf("create: %d %v", code, m)
	}
	_, m, _ := f.do(t, "POST", "/api/v1/keys", f.admin, `{"name":"rev","role":"reviewer"}`)
	reviewer, _ := m["secret"].(string)
	if reviewer == "" {
		t.Fatalf("reviewer key: %v", m)
	}

	for i, target := range []struct{ method, path, ctype string }{
		{"PUT", "/api/v1/repos/up/worktree?branch=main&expect_oid=" + lockstep.ZeroOID, "application/x-tar"},
		{"POST", "/api/v1/repos/up/objects", "application/x-git-packfile"},
		{"POST", "/api/v1/repos/up/edits", "application/json"},
	} {
		body := newGatedBody(bytes.Repeat([]byte{' '}, 1024), bytes.Repeat([]byte{' '}, 1<<20))
		got := sendGated(f, target.method, target.path, reviewer, "rev-"+string(rune('a'+i)), target.ctype, body)
		// The answer must come while the body is held back: a server
		// that reads the body first waits for it (then, after
		// --body-timeout, answers something else).
		var a answer
		select {
		case a = <-got:
		case <-time.After(2 * time.Minute):
			body.release()
			t.Fatalf("%s %s: no answer while the body was held back (the server waits for the body)", target.method, target.path)
		}
		body.release()
		if a.err != nil || a.code != http.StatusForbidden || errCode(a.m) != "permission_denied" {
			t.Fatalf("%s %s by a reviewer with an Idempotency-Key: %d %v (%v), want 403 permission_denied before the body", target.method, target.path, a.code, a.m, a.err)
		}
		if n := uploadsInProgress(t, f); n != 0 {
			t.Fatalf("a refused request held an upload slot: lockstep_uploads_in_progress %d", n)
		}
	}

	// A keyed upload holds the only slot while its body is held back.
	tarBytes := oneFileTar(t, "a.txt", "hello\n")
	first := newGatedBody(tarBytes[:512], tarBytes[512:])
	defer first.release()
	firstAnswer := sendGated(f, "PUT", "/api/v1/repos/up/worktree?branch=main&expect_oid="+lockstep.ZeroOID, f.admin, "first", "application/x-tar", first)
	held := false
	for i := 0; i < 3000 && !held; i++ {
		held = uploadsInProgress(t, f) == 1
		if !held {
			time.Sleep(10 * time.Millisecond)
		}
	}
	if !held {
		t.Fatal("a keyed upload whose body is on its way never held an upload slot (lockstep_uploads_in_progress never 1)")
	}
	// A second keyed upload, its body held back too, is refused at once.
	second := newGatedBody(bytes.Repeat([]byte{0}, 1024), bytes.Repeat([]byte{0}, 1<<20))
	defer second.release()
	var a answer
	select {
	case a = <-sendGated(f, "POST", "/api/v1/repos/up/objects", f.admin, "second", "application/x-git-packfile", second):
	case <-time.After(2 * time.Minute):
		t.Fatal("a keyed upload beyond the slot count got no answer while its body was held back")
	}
	if a.err != nil || a.code != http.StatusServiceUnavailable || errCode(a.m) != "unavailable" {
		t.Fatalf("a keyed upload beyond the slot count: %d %v (%v), want 503 unavailable", a.code, a.m, a.err)
	}
	first.release()
	if a := <-firstAnswer; a.code != http.StatusCreated {
		t.Fatalf("first upload: %d %v (%v)", a.code, a.m, a.err)
	}
	if n := uploadsInProgress(t, f); n != 0 {
		t.Fatalf("lockstep_uploads_in_progress %d after the upload ended, want 0", n)
	}
}

// countingBody is an endless request body that counts what was read.
type countingBody struct{ n, max int64 }

func (c *countingBody) Read(p []byte) (int, error) {
	if c.n >= c.max {
		return 0, io.EOF
	}
	k := min(int64(len(p)), c.max-c.n)
	for i := range p[:k] {
		p[i] = '{'
	}
	c.n += k
	return int(k), nil
}

func (c *countingBody) Close() error { return nil }

// TestEveryRefusalBeforeBody: every write route of the route table, by a
// caller it refuses (no key, another agent's key, a scoped key, a runner
// key, a reviewer key), with and without an Idempotency-Key, refuses
// (401/403) without reading a byte of the body. A route whose rule
// depends on the body (a status change, a merge, a key's role) answers
// this body (not JSON) 400 after reading it, which is not a refusal.
func TestEveryRefusalBeforeBody(t *testing.T) {
	f := mustServerTweak(t, web.Config{}, nil, func(s *web.Server, db *sqlstore.DB) {
		s.Jobs = db
		s.Effects = effects.New(effects.Config{}, s.Store, s.Repos, s.Logger, s.Metrics, nil)
		s.Checkpoints = checkpoints.New(db, s.Repos, nil, s.Logger, s.Metrics, nil)
	})
	f.want(t, "POST", "/api/v1/repos", f.admin, `{"name":"app"}`, 201)
	f.want(t, "POST", "/api/v1/repos/app/forks", f.agent, `{"name":"ws1"}`, 201)
	f.want(t, "POST", "/api/v1/repos/app/forks", f.admin, `{"name":"theirs"}`, 201)
	other := f.want(t, "POST", "/api/v1/keys", f.admin, `{"name":"other","role":"agent"}`, 201)["id"].(string)
	scoped := f.want(t, "POST", "/api/v1/keys", f.agent, `{"name":"sub","role":"agent","ttl":"1h","scope":{"workspace":"ws1"}}`, 201)["secret"].(string)
	runner := f.want(t, "POST", "/api/v1/keys", f.admin, `{"name":"run","role":"runner"}`, 201)["secret"].(string)
	reviewer := f.want(t, "POST", "/api/v1/keys", f.admin, `{"name":"rev","role":"reviewer"}`, 201)["secret"].(string)
	callers := []struct{ name, key string }{{"no key", ""}, {"agent", f.agent}, {"scoped", scoped}, {"runner", runner}, {"reviewer", reviewer}}
	facts, _ := web.RouteFacts()
	refusals := 0
	for _, fa := range facts {
		method, pattern, _ := strings.Cut(fa.Key, " ")
		if !fa.Write {
			continue
		}
		for _, repo := range []string{"theirs", "app"} {
			path := strings.NewReplacer(":repo", repo, ":id", other, ":job", "job_1", ":rev", "main", "*path", "a.txt").Replace(pattern)
			for _, cl := range callers {
				for _, idem := range []string{"", "idem-" + cl.name} {
					body := &countingBody{max: 8 << 20}
					req := httptest.NewRequest(method, path, nil)
					req.Body, req.ContentLength = body, -1
					req.Header.Set("Content-Type", "application/json")
					if cl.key != "" {
						req.Header.Set("Authorization", "Bearer "+cl.key)
					}
					if idem != "" {
						req.Header.Set("Idempotency-Key", idem+"-"+method+path)
					}
					w := httptest.NewRecorder()
					f.handler.ServeHTTP(w, req)
					if w.Code != http.StatusUnauthorized && w.Code != http.StatusForbidden {
						continue
					}
					refusals++
					if body.n > 0 {
						t.Errorf("%s %s by %s (Idempotency-Key %v): refused %d after reading %d bytes of the body: %.200s", method, path, cl.name, idem != "", w.Code, body.n, w.Body.String())
					}
				}
			}
		}
	}
	if refusals < 100 {
		t.Fatalf("only %d refusals: the probe did not reach the routes", refusals)
	}
}
