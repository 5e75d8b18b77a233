package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep/internal/e2ekit"
)

// pinnedConn is one keep-alive connection to the server, accepted (it
// answered a /healthz) before the server ran out of descriptors: requests
// sent on it reach the handlers although the server accepts nothing more.
type pinnedConn struct {
	s    *server
	conn net.Conn
	br   *bufio.Reader
}

func pin(t *testing.T, s *server) *pinnedConn {
	t.Helper()
	conn, err := net.Dial("tcp", s.HostPort)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	p := &pinnedConn{s: s, conn: conn, br: bufio.NewReader(conn)}
	if r := p.do(t, "GET", "/healthz", "", nil, nil); r.Status != http.StatusOK {
		t.Fatalf("healthz on a pinned connection: %s", r)
	}
	return p
}

// do sends one request on the pinned connection and reads the answer.
func (p *pinnedConn) do(t *testing.T, method, path, key string, body []byte, hdr map[string]string) *e2ekit.Response {
	t.Helper()
	req, err := http.NewRequest(method, p.s.URL+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	p.conn.SetDeadline(time.Now().Add(2 * time.Minute)) // a hang detector
	if err := req.Write(p.conn); err != nil {
		t.Fatalf("%s %s: write: %v", method, path, err)
	}
	resp, err := http.ReadResponse(p.br, req)
	if err != nil {
		t.Fatalf("%s %s: read: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return &e2ekit.Response{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// exhaust opens connections to the server and keeps them until it stops
// accepting: then every descriptor the server may open is taken. A few
// more wait in the listen backlog, to take any descriptor the server
// frees meanwhile. It returns a function that closes them all.
func exhaust(t *testing.T, s *server) (release func()) {
	t.Helper()
	var conns []net.Conn
	release = func() {
		for _, c := range conns {
			c.Close()
		}
		conns = nil
	}
	t.Cleanup(release)
	pending := 0
	for i := 0; pending < 8; i++ {
		if i > 4000 {
			t.Fatal("the server still accepts connections after 4000: is its descriptor limit set?")
		}
		c, err := net.Dial("tcp", s.HostPort)
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		conns = append(conns, c)
		if pending > 0 {
			pending++ // past the first unanswered one, only fill the backlog
			continue
		}
		if !answered(t, s, c, i) {
			pending = 1 // not accepted: the server is out of descriptors
		}
	}
	return release
}

// answered sends a /healthz on c and reports whether it was answered, or
// false once the server logged that it cannot accept (out of
// descriptors). A slow answer on a loaded machine is waited for.
func answered(t *testing.T, s *server, c net.Conn, i int) bool {
	t.Helper()
	fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", s.HostPort)
	br := bufio.NewReader(c)
	for deadline := time.Now().Add(2 * time.Minute); ; {
		c.SetReadDeadline(time.Now().Add(time.Second))
		resp, err := http.ReadResponse(br, nil)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			c.SetReadDeadline(time.Time{})
			return true
		}
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("healthz on connection %d: %v", i, err)
		}
		if strings.Contains(s.Stderr.String(), "too many open files") {
			return false
		}
		if time.Now().After(deadline) {
			t.Fatalf("healthz on connection %d: no answer in 2 minutes, and the server logged no accept error", i)
		}
	}
}

// TestFileDescriptorExhaustion: issue 21 item 5. With the server out of
// file descriptors, a push, a git ref listing and an edit answer 503
// unavailable with Retry-After — not 500, and not a 404 for a commit that
// exists — and /readyz answers 503; once descriptors are free again, all
// is as before.
func TestFileDescriptorExhaustion(t *testing.T) {
	t.Parallel()
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		t.Skipf("prlimit not installed (util-linux): %v", err)
	}
	s := startServer(t, serverOpts{Wrap: []string{prlimit, "--nofile=256:256", "--"}, Args: []string{"--log-level", "info"}})
	s.CreateRepo(t, "fds")
	p := s.Push(t, s.AdminKey, "fds", "", map[string]string{"a.txt": "a\n"})
	if !strings.Contains(s.Stderr.String(), `"file descriptor limit raised to the hard limit","soft":256,"hard":256`) {
		t.Errorf("no start-up log line about the descriptor limit:\n%s", s.Stderr)
	}

	// A git push's request, built before: a commit on main and its pack.
	d := s.clone(t, "fds", s.AdminKey)
	writeFile(t, filepath.Join(d, "g.txt"), "git push out of descriptors\n")
	e2ekit.Git(t, d, "add", ".")
	e2ekit.Git(t, d, "commit", "-q", "-m", "git push")
	newOID := e2ekit.Git(t, d, "rev-parse", "HEAD")
	pack, err := e2ekit.GitRunBytes(d, newOID+"\n^"+p.Commit+"\n", "pack-objects", "--revs", "--stdout", "-q")
	if err != nil {
		t.Fatal(err)
	}
	receive := append([]byte(pktLines(p.Commit+" "+newOID+" refs/heads/main\x00report-status\n")+"0000"), pack...)

	push, gitPush, refs, gitRefs, edit, editFrom, ready := pin(t, s), pin(t, s), pin(t, s), pin(t, s), pin(t, s), pin(t, s), pin(t, s)
	release := exhaust(t, s)

	check := func(what string, r *e2ekit.Response) {
		t.Helper()
		if r.Status != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" {
			t.Errorf("%s out of descriptors: %d (Retry-After %q) %s, want 503 with Retry-After", what, r.Status, r.Header.Get("Retry-After"), r.Body)
			return
		}
		if strings.Contains(r.Header.Get("Content-Type"), "json") {
			var env struct {
				Error struct{ Code, Message string }
			}
			if json.Unmarshal(r.Body, &env) != nil || env.Error.Code != "unavailable" {
				t.Errorf("%s out of descriptors: body %s, want code unavailable", what, r.Body)
			}
			if strings.Contains(env.Error.Message, "/") {
				t.Errorf("%s out of descriptors: the message names a path: %q", what, env.Error.Message)
			}
		}
	}
	tarball := e2ekit.TarOf(t, map[string]string{"a.txt": "b\n", "big.bin": randomText(7, 64<<10)})
	check("push", push.do(t, "PUT", "/api/v1/repos/fds/worktree"+e2ekit.PushQuery("main", p.Commit), s.AdminKey, tarball,
		map[string]string{"Content-Type": "application/x-tar"}))
	check("git push", gitPush.do(t, "POST", "/git/fds.git/git-receive-pack", s.AdminKey, receive,
		map[string]string{"Content-Type": "application/x-git-receive-pack-request", "User-Agent": "git/2.39.5"}))
	check("ref listing (v2)", refs.do(t, "GET", "/git/fds.git/info/refs?service=git-upload-pack", s.AdminKey, nil,
		map[string]string{"Git-Protocol": "version=2"}))
	check("ref listing (git client)", gitRefs.do(t, "GET", "/git/fds.git/info/refs?service=git-upload-pack", s.AdminKey, nil,
		map[string]string{"Git-Protocol": "version=2", "User-Agent": "git/2.39.5"}))
	body, _ := json.Marshal(map[string]any{"branch": "main", "expect_oid": p.Commit,
		"edits": []map[string]any{{"op": "write", "path": "b.txt", "content": "b\n"}}})
	check("edit", edit.do(t, "POST", "/api/v1/repos/fds/edits", s.AdminKey, body, map[string]string{"Content-Type": "application/json"}))
	// A new branch from a commit that exists: its read fails, which is
	// not a missing commit (this answered 404).
	body, _ = json.Marshal(map[string]any{"branch": "side", "from": p.Commit,
		"edits": []map[string]any{{"op": "write", "path": "b.txt", "content": "b\n"}}})
	check("edit from a commit", editFrom.do(t, "POST", "/api/v1/repos/fds/edits", s.AdminKey, body, map[string]string{"Content-Type": "application/json"}))
	if r := ready.do(t, "GET", "/readyz", "", nil, nil); r.Status != http.StatusServiceUnavailable {
		t.Errorf("readyz out of descriptors: %s, want 503", r)
	}

	release()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for {
		r, err := s.Try("GET", "/readyz", "", nil, "")
		if err == nil && r.Status == http.StatusOK {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("readyz after the descriptors were freed: %v %v", r, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got := s.Refs(t, s.AdminKey, "fds")["refs/heads/main"]; got != p.Commit {
		t.Errorf("main after the refused writes: %s, want %s", got, p.Commit)
	}
	s.Push(t, s.AdminKey, "fds", p.Commit, map[string]string{"a.txt": "c\n"})
}
