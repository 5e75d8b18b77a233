package client_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/api"
	"github.com/lockstep-hq/lockstep/client"
	"github.com/lockstep-hq/lockstep/worktree"
)

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		// An mtime in the past: the stat cache saved by the next push
		// vouches for the file at once. A file written within the
		// cache's own timestamp tick is racy (re-hashed by the push
		// after, rightly): on a fast machine the counts below depended on
		// timing (CI: a third push hashed 1 file, not 0).
		past := time.Now().Add(-2 * time.Second)
		if err := os.Chtimes(p, past, past); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPushDir pushes a directory, then again after changing one file:
// the second push sends only that file's blob and the trees above it.
func TestPushDir(t *testing.T) {
	ctx := context.Background()
	s := mustServer(t)
	c := mustClient(t, s, s.Admin)
	if _, err := c.CreateRepo(ctx, "r", "main"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"a.txt": "a\n", "src/b.go": "package b\n", "src/deep/c.go": "package c\n", "docs/d.md": "# d\n"})
	cache := filepath.Join(t.TempDir(), "statcache")
	var progressCalls, toSend int
	opts := client.PushDirOptions{WriteOptions: client.WriteOptions{Message: "one"}, ExpectCurrent: true, StatCache: cache,
		Progress: func(int, int64) { progressCalls++ }, ToSend: func(n int) { toSend = n }}

	one, err := c.PushDir(ctx, "r", dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	// 4 blobs + 4 trees (root, src, src/deep, docs).
	if !one.Changed || one.Files != 4 || one.Hashed != 4 || one.ObjectsSent != 8 || one.Uploaded.ObjectsWritten != 8 {
		t.Fatalf("first push %+v", one)
	}
	if progressCalls == 0 {
		t.Fatal("the progress callback was never called")
	}
	if toSend != 8 {
		t.Fatalf("ToSend said %d objects, want the 8 sent (progress shows them as a total)", toSend)
	}
	if head, _ := c.Ref(ctx, "r", "main"); head != one.Commit {
		t.Fatalf("main at %s, want %s", head, one.Commit)
	}

	writeFiles(t, dir, map[string]string{"src/deep/c.go": "package c // changed\n"})
	opts.Message = "two"
	two, err := c.PushDir(ctx, "r", dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	// The blob of c.go and the trees src/deep, src and the root.
	if !two.Changed || two.Parent != one.Commit || two.Hashed < 1 || two.Hashed >= 4 || two.ObjectsSent != 4 || two.Uploaded.ObjectsWritten != 4 {
		t.Fatalf("second push %+v", two)
	}

	// Unchanged: nothing to send, no commit.
	three, err := c.PushDir(ctx, "r", dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	if three.Changed || three.ObjectsSent != 0 || three.Hashed != 0 || three.Commit != two.Commit {
		t.Fatalf("third push %+v", three)
	}

	// Compare-and-swap: a stale expected oid is refused, nothing moves.
	writeFiles(t, dir, map[string]string{"a.txt": "a2\n"})
	_, err = c.PushDir(ctx, "r", dir, client.PushDirOptions{WriteOptions: client.WriteOptions{ExpectOID: one.Commit}, StatCache: cache})
	wantCode(t, "PushDir with a stale expect_oid", err, lockstep.EREFCONFLICT)
	_, err = c.PushDir(ctx, "r", dir, client.PushDirOptions{StatCache: cache})
	wantCode(t, "PushDir without expect", err, lockstep.EPRECONDITION)
	forced, err := c.PushDir(ctx, "r", dir, client.PushDirOptions{WriteOptions: client.WriteOptions{Force: true}, StatCache: cache})
	if err != nil || forced.Parent != two.Commit {
		t.Fatalf("forced push %+v: %v", forced, err)
	}
	_, err = c.PushDir(ctx, "r", filepath.Join(dir, "a.txt"), client.PushDirOptions{WriteOptions: client.WriteOptions{Force: true}, StatCache: cache})
	if lockstep.ErrorCode(err) != lockstep.EINVALID { // refused before any request
		t.Fatalf("PushDir of a file: %v, want invalid_argument", err)
	}
	_, err = c.PushDir(ctx, "nope", dir, client.PushDirOptions{ExpectCurrent: true, StatCache: cache})
	wantCode(t, "PushDir to an unknown repo", err, lockstep.ENOTFOUND)
}

// dropFirst is a proxy in front of the server that closes the
// connection, without an answer, on the first request to path; it
// records the Idempotency-Key of every request to path.
type dropFirst struct {
	path  string
	next  http.Handler
	mu    sync.Mutex
	keys  []string
	drops int
}

func (d *dropFirst) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == d.path {
		d.mu.Lock()
		d.keys = append(d.keys, r.Header.Get("Idempotency-Key"))
		drop := d.drops == 0
		if drop {
			d.drops++
		}
		d.mu.Unlock()
		if drop {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
	}
	d.next.ServeHTTP(w, r)
}

// TestRetryAfterDroppedConnection: a write whose connection is closed
// before the answer is sent again with the same Idempotency-Key and
// succeeds once; PushDir's pack upload is rebuilt for the retry.
func TestRetryAfterDroppedConnection(t *testing.T) {
	ctx := context.Background()
	s := mustServer(t)
	u, _ := url.Parse(s.URL)
	for _, tc := range []struct{ name, path string }{
		{"fork", "/api/v1/repos/base/forks"},
		{"pack upload", "/api/v1/repos/base/objects"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &dropFirst{path: tc.path, next: httputil.NewSingleHostReverseProxy(u)}
			proxy := httptest.NewServer(d)
			defer proxy.Close()
			c := client.New(proxy.URL, s.Admin)
			c.Retry = client.RetryPolicy{MaxAttempts: 3, BaseDelay: 1}
			// A fresh connection per request: net/http itself resends a
			// request with an Idempotency-Key once when a reused
			// connection drops, which would hide the client's retry.
			c.HTTP = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
			var retries int
			c.OnRetry = func(string, string, int, time.Duration, error) { retries++ }
			if tc.name == "fork" {
				if _, err := c.CreateRepo(ctx, "base", "main"); err != nil {
					t.Fatal(err)
				}
				if _, err := c.PushTar(ctx, "base", bytesReader(tarOf(t, map[string]string{"f": "x"})), client.WriteOptions{ExpectOID: api.ZeroOID}); err != nil {
					t.Fatal(err)
				}
				f, err := c.Fork(ctx, "base", "ws")
				if err != nil || f.Name != "ws" {
					t.Fatalf("fork after a dropped connection: %+v %v", f, err)
				}
			} else {
				dir := t.TempDir()
				writeFiles(t, dir, map[string]string{"g.txt": "g\n", "h/i.txt": "i\n"})
				res, err := c.PushDir(ctx, "base", dir, client.PushDirOptions{ExpectCurrent: true, StatCache: filepath.Join(t.TempDir(), "sc")})
				if err != nil || !res.Changed || res.ObjectsSent != 4 {
					t.Fatalf("push after a dropped upload: %+v %v", res, err)
				}
				var body []byte
				if _, err := c.Blob(ctx, "base", "main", "h/i.txt", writerTo(&body)); err != nil || string(body) != "i\n" {
					t.Fatalf("pushed blob %q: %v", body, err)
				}
			}
			if retries != 1 || len(d.keys) != 2 || d.keys[0] == "" || d.keys[0] != d.keys[1] {
				t.Fatalf("retries %d, keys %q: want one retry with the same Idempotency-Key", retries, d.keys)
			}
		})
	}
}

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }

type sliceWriter struct{ p *[]byte }

func (w sliceWriter) Write(b []byte) (int, error) { *w.p = append(*w.p, b...); return len(b), nil }

func writerTo(p *[]byte) sliceWriter { return sliceWriter{p} }

// TestPushDirWithWatcher: with `lockstep watch` running on the directory,
// a push stats only the changed paths, and commits the same tree a push
// that scans everything does.
func TestPushDirWithWatcher(t *testing.T) {
	ctx := context.Background()
	s := mustServer(t)
	c := mustClient(t, s, s.Admin)
	if _, err := c.CreateRepo(ctx, "r", "main"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"a.txt": "a\n", "src/b.go": "package b\n", "docs/d.md": "# d\n"})
	wctx, stop := context.WithCancel(ctx)
	ready, done := make(chan struct{}), make(chan error, 1)
	go func() { done <- worktree.Watch(wctx, dir, worktree.WatchOptions{}, func() { close(ready) }) }()
	select {
	case <-ready:
	case err := <-done:
		t.Fatal(err)
	}
	defer func() { stop(); <-done }()
	cache := filepath.Join(t.TempDir(), "statcache")
	opts := client.PushDirOptions{ExpectCurrent: true, StatCache: cache}
	one, err := c.PushDir(ctx, "r", dir, opts)
	if err != nil || one.Watched {
		t.Fatalf("first push (no token yet): %+v, %v", one, err)
	}
	writeFiles(t, dir, map[string]string{"src/new/e.go": "package e\n"})
	if err := os.Remove(filepath.Join(dir, "docs", "d.md")); err != nil {
		t.Fatal(err)
	}
	two, err := c.PushDir(ctx, "r", dir, opts)
	if err != nil || !two.Watched || !two.Changed {
		t.Fatalf("watched push: %+v, %v", two, err)
	}
	// A push that scans everything (a fresh cache has no token) finds
	// nothing to commit: the watched push's tree was the directory's.
	three, err := c.PushDir(ctx, "r", dir, client.PushDirOptions{ExpectCurrent: true, StatCache: filepath.Join(t.TempDir(), "fresh")})
	if err != nil || three.Watched || three.Changed || three.Tree != two.Tree {
		t.Fatalf("full-scan push after the watched one: %+v, %v (watched tree %s)", three, err, two.Tree)
	}
}
