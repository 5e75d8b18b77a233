package web_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep/web"
)

// openStream opens /ui/events as c; on 200 it waits for the ready event
// and returns the open response.
func openStream(t *testing.T, w *uiWorld, c *http.Client) (*http.Response, map[string]any) {
	t.Helper()
	resp, err := c.Get(w.srv.URL + "/ui/events")
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("/ui/events: %d, not the JSON envelope: %q", resp.StatusCode, b)
		}
		return resp, m
	}
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("/ui/events: no ready event: %v", err)
		}
		if strings.HasPrefix(line, "event: ready") {
			return resp, nil
		}
	}
}

// The UI's event streams are capped per key and in all; beyond a cap the
// answer is 429 rate_limited with Retry-After (issue 21, item 4).
func TestSSEStreamCaps(t *testing.T) {
	w := mustUIWorld(t, func(s *web.Server) { s.Config.MaxSSEStreams, s.Config.MaxSSEStreamsPerKey = 3, 2 })
	rev, agent, ci := w.login(t, w.reviewer), w.login(t, w.agent), w.login(t, w.ci)
	refused := func(who string, resp *http.Response, m map[string]any, limit string) {
		t.Helper()
		resp.Body.Close() // (a stream wrongly opened must not hold the server's Close)
		if resp.StatusCode != http.StatusTooManyRequests || errCode(m) != "rate_limited" || resp.Header.Get("Retry-After") == "" ||
			!strings.Contains(errMessage(m), limit) {
			t.Fatalf("%s over the cap: %d %v Retry-After %q, want 429 rate_limited naming %s", who, resp.StatusCode, m, resp.Header.Get("Retry-After"), limit)
		}
		d, _ := m["error"].(map[string]any)["details"].(map[string]any)
		if d["retry_after"] == nil {
			t.Fatalf("no retry_after in the envelope: %v", m)
		}
	}
	r1, _ := openStream(t, w, rev)
	defer r1.Body.Close()
	r2, _ := openStream(t, w, rev)
	defer r2.Body.Close()
	resp, m := openStream(t, w, rev)
	refused("a third stream of one key", resp, m, "--max-sse-streams-per-key")
	a1, _ := openStream(t, w, agent)
	defer a1.Body.Close()
	resp, m = openStream(t, w, ci)
	refused("a fourth stream in all", resp, m, "--max-sse-streams")

	// A closed stream gives its place back (once the server saw it go).
	r1.Body.Close()
	for i := 0; ; i++ {
		resp, _ := openStream(t, w, ci)
		if resp.StatusCode == http.StatusOK {
			resp.Body.Close()
			break
		}
		if i == 6000 {
			t.Fatal("a closed stream never gave its place back")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A stream ends after --sse-max-lifetime (the browser reconnects).
func TestSSEStreamLifetime(t *testing.T) {
	w := mustUIWorld(t, func(s *web.Server) { s.Config.SSEMaxLifetime = 500 * time.Millisecond })
	resp, _ := openStream(t, w, w.login(t, w.reviewer))
	defer resp.Body.Close()
	done := make(chan error, 1)
	go func() { _, err := io.Copy(io.Discard, resp.Body); done <- err }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("stream ended with %v, want a clean end", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the stream was still open 2 minutes after its maximum lifetime")
	}
}

// TestUIEventsScopedKey: a scoped key's event stream carries the events
// of its scope only, naming only its repositories (it carried every
// repository's pushes, with their names).
func TestUIEventsScopedKey(t *testing.T) {
	w := mustUIWorld(t)
	w.api(t, "POST", "/api/v1/repos/app/forks", w.agent, `{"name":"task-2"}`, 201)
	w.api(t, "POST", "/api/v1/repos/app/forks", w.agent, `{"name":"task-3"}`, 201)
	sub := w.api(t, "POST", "/api/v1/keys", w.agent, `{"name":"sub","role":"agent","ttl":"1h","scope":{"workspace":"task-2"}}`, 201)["secret"].(string)
	resp, _ := openStream(t, w, w.login(t, sub))
	defer resp.Body.Close()
	// Out of its scope first, then in it.
	w.push(t, "task-3", w.agent, w.baseHead, "out of scope", map[string]string{"other.txt": "x\n"}, 201)
	w.push(t, "task-2", sub, w.baseHead, "in scope", map[string]string{"mine.txt": "x\n"}, 201)
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("no event of task-2: %v", err)
		}
		if !strings.HasPrefix(line, "data: ") {
			continue
		}
		var ev struct {
			Repos []string `json:"repos"`
		}
		if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &ev); err != nil {
			t.Fatal(err)
		}
		if strings.Join(ev.Repos, ",") != "task-2" {
			t.Fatalf("scoped key's stream: an event naming %v, want only task-2's", ev.Repos)
		}
		return
	}
}

// TestSSEStreamEndsWhenKeyRevoked: an open event stream checks its key
// again; once the key is revoked (here by revoking the key that minted
// it) the stream ends, where it went on for --sse-max-lifetime (30
// minutes) hearing every change.
func TestSSEStreamEndsWhenKeyRevoked(t *testing.T) {
	w := mustUIWorld(t)
	w.api(t, "POST", "/api/v1/repos/app/forks", w.agent, `{"name":"ws-1"}`, 201)
	parent := w.api(t, "POST", "/api/v1/keys", w.admin, `{"name":"lead","role":"agent"}`, 201)
	w.api(t, "POST", "/api/v1/repos/app/forks", parent["secret"].(string), `{"name":"ws-2"}`, 201)
	sub := w.api(t, "POST", "/api/v1/keys", parent["secret"].(string), `{"name":"sub","role":"agent","ttl":"1h","scope":{"workspace":"ws-2"}}`, 201)["secret"].(string)
	for n, key := range []string{w.reviewer, sub} {
		resp, _ := openStream(t, w, w.login(t, key))
		defer resp.Body.Close()
		done := make(chan error, 1)
		go func() { _, err := io.Copy(io.Discard, resp.Body); done <- err }()
		if key == sub {
			w.api(t, "DELETE", "/api/v1/keys/"+parent["id"].(string), w.admin, "", 204)
		} else {
			id := w.api(t, "GET", "/api/v1/whoami", key, "", 200)["id"].(string)
			w.api(t, "DELETE", "/api/v1/keys/"+id, w.admin, "", 204)
		}
		ended := false
		for i := 0; i < 1200 && !ended; i++ { // changes keep coming; the stream must end
			w.api(t, "POST", "/api/v1/repos/app/forks", w.admin, fmt.Sprintf(`{"name":"r%d-%d"}`, n, i), 201)
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("stream ended with %v, want a clean end", err)
				}
				ended = true
			case <-time.After(100 * time.Millisecond):
			}
		}
		if !ended {
			t.Fatal("the event stream of a revoked key was still open after 1200 changes (2 minutes)")
		}
	}
}
