package web_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep/web"
)

// TestRefusalAnswersWithoutTheBody: a request refused before its body is
// read (no key, a key that may not, a declared length over the route's
// limit) is answered at once and its connection closed. net/http would
// otherwise wait to drain up to 256 KiB of the unread body before it
// sends the answer: a client that waits for the answer before it sends
// (or sends slowly) saw nothing until the body timeout.
func TestRefusalAnswersWithoutTheBody(t *testing.T) {
	// The body timeout is far beyond the test's guard: before the fix
	// the answer waited for it.
	f := mustServerTweak(t, web.Config{BodyTimeout: time.Hour}, nil, nil)
	for _, c := range []struct {
		name, head string
		want       int
	}{
		{"no key, chunked", "POST /api/v1/repos HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n", 401},
		{"no key, declared length", "POST /api/v1/repos HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 4000\r\n\r\n", 401},
		{"agent on an admin route, chunked", "POST /api/v1/repos HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + f.agent + "\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n", 403},
		{"over the route's limit", "POST /api/v1/repos HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + f.admin + "\r\nContent-Type: application/json\r\nContent-Length: 200000\r\n\r\n", 413},
		{"a push refused, chunked", "POST /git/nothere.git/git-receive-pack HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-git-receive-pack-request\r\nTransfer-Encoding: chunked\r\n\r\n", 401},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", f.srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			// A guard against hanging, not a timing assertion.
			conn.SetDeadline(time.Now().Add(60 * time.Second))
			if _, err := conn.Write([]byte(c.head)); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(conn)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("no answer while the body was unsent: %v", err)
			}
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != c.want {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, c.want, body)
			}
			if !resp.Close {
				t.Errorf("the connection is kept (%v) though the body is unread", resp.Header)
			}
			if rest, err := br.ReadString('\n'); err == nil || !strings.Contains(err.Error(), "EOF") && rest != "" {
				t.Errorf("after the answer: %q, %v; want the connection closed", rest, err)
			}
		})
	}
}
