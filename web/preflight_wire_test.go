package web_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/lockstep-hq/lockstep/repositories"
)

// writeCounter counts the writes the server makes on its connections.
type writeCounter struct {
	net.Listener
	writes atomic.Int32
}

func (l *writeCounter) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countedConn{Conn: c, n: &l.writes}, nil
}

type countedConn struct {
	net.Conn
	n *atomic.Int32
}

func (c *countedConn) Write(p []byte) (int, error) {
	c.n.Add(1)
	return c.Conn.Write(p)
}

// TestKeyedAnswerOneWrite: the answer of a keyed request (sent by the
// idempotency middleware, flushed before anything is stored after it)
// carries its Content-Length and leaves in one write on the connection:
// a keyed preflight, its replay and a keyed refusal alike. Flushed
// without a length, it went out chunked, its end in a second write.
func TestKeyedAnswerOneWrite(t *testing.T) {
	ctx := context.Background()
	w := newSQLiteServer(t, nil)
	repos, wss, admin, secret, s := w.repos, w.wss, w.admin, w.secret, w.s
	srv := httptest.NewUnstartedServer(s.Handler())
	lc := &writeCounter{Listener: srv.Listener}
	srv.Listener = lc
	srv.Start()
	t.Cleanup(srv.Close)

	if _, err := repos.CreateRepo(ctx, admin, "app", "main"); err != nil {
		t.Fatal(err)
	}
	if _, err := repos.EditFiles(ctx, admin, "app", []repositories.Edit{{Path: "a.txt", Content: []byte("1\n")}}, repositories.WriteOptions{Branch: "main", Force: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := wss.Fork(ctx, admin, "app", "ws1", "t1"); err != nil {
		t.Fatal(err)
	}
	if _, err := repos.EditFiles(ctx, admin, "ws1", []repositories.Edit{{Path: "b.txt", Content: []byte("x\n")}}, repositories.WriteOptions{Branch: "main", Force: true}); err != nil {
		t.Fatal(err)
	}

	c := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(c.CloseIdleConnections)
	post := func(key, body string) (status int, b []byte, writes int32) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/api/v1/repos/app/merges", bytes.NewBufferString(body))
		req.Header.Set("Authorization", "Bearer "+secret)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		before := lc.writes.Load()
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.ContentLength != int64(len(b)) || len(resp.TransferEncoding) != 0 {
			t.Fatalf("%s: Content-Length %d (header %q), transfer encoding %v, body %d bytes: want the length, not chunked",
				key, resp.ContentLength, resp.Header.Get("Content-Length"), resp.TransferEncoding, len(b))
		}
		if resp.Header.Get("Content-Length") != strconv.Itoa(len(b)) {
			t.Fatalf("%s: Content-Length header %q, body %d bytes", key, resp.Header.Get("Content-Length"), len(b))
		}
		return resp.StatusCode, b, lc.writes.Load() - before
	}
	const pre = `{"theirs":"ws1:main","preflight":true,"deep":true}`
	for _, c := range []struct {
		key, body string
		status    int
	}{
		{"w-1", pre, http.StatusOK},                                        // first: answered from its commit
		{"w-1", pre, http.StatusOK},                                        // replay
		{"w-1", `{"theirs":"ws1:main","preflight":true}`, 422},             // another body
		{"w-2", `{"theirs":"ws1:nope","preflight":true}`, 404},             // refused, nothing committed
		{"w-3", `{"theirs":"ws1:main","materialize":true}`, http.StatusOK}, // a held claim's answer
	} {
		st, b, n := post(c.key, c.body)
		if st != c.status {
			t.Fatalf("%s %s: %d %s, want %d", c.key, c.body, st, b, c.status)
		}
		if n != 1 {
			t.Fatalf("%s %s: the answer took %d writes on the connection, want 1", c.key, c.body, n)
		}
	}
}
