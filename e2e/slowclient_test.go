package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// goroutines reads go_goroutines from the server's /metrics.
func (s *server) goroutines(t *testing.T) int {
	t.Helper()
	resp, err := http.Get(s.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "go_goroutines "); ok {
			n, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("go_goroutines %q", v)
			}
			return int(n)
		}
	}
	t.Fatal("no go_goroutines in /metrics")
	return 0
}

// TestSlowBodyIsCutOff is issue 9 item 7: an authenticated client that
// sends its body at 1 byte/s is disconnected once it falls below the
// configured minimum rate, and its goroutines go away. The settings come
// from the environment (LOCKSTEP_BODY_*), small for the test.
func TestSlowBodyIsCutOff(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOpts{Env: []string{"LOCKSTEP_BODY_TIMEOUT=1s", "LOCKSTEP_BODY_MIN_RATE=100"}})
	s.CreateRepo(t, "shop")
	baseline := s.goroutines(t)

	const conns = 20
	type result struct {
		status string
		err    error
	}
	results := make(chan result, conns)
	var wg sync.WaitGroup
	for i := 0; i < conns; i++ {
		c, err := net.Dial("tcp", s.HostPort)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "PUT /api/v1/repos/shop/worktree?force=true HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/x-tar\r\nContent-Length: 100000\r\n\r\n", s.AdminKey)
		stop := make(chan struct{})
		wg.Add(1)
		go func() { // the slow sender: one byte a second until the server hangs up
			defer wg.Done()
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			for {
				if _, err := c.Write([]byte{0}); err != nil {
					return
				}
				select {
				case <-stop:
					return
				case <-tick.C:
				}
			}
		}()
		go func() {
			defer close(stop)
			// Generous bound: the configured cut-off is ~1s.
			c.SetReadDeadline(time.Now().Add(60 * time.Second))
			br := bufio.NewReader(c)
			status, err := br.ReadString('\n')
			if err == nil {
				_, err = io.Copy(io.Discard, br) // then the connection must close
			}
			results <- result{strings.TrimSpace(status), err}
		}()
	}
	for i := 0; i < conns; i++ {
		r := <-results
		if r.err != nil {
			t.Fatalf("connection %d not closed by the server: %v (status %q)", i, r.err, r.status)
		}
		if r.status != "" && !strings.HasPrefix(r.status, "HTTP/1.1 400") {
			t.Errorf("connection %d answered %q, want 400 or a plain close", i, r.status)
		}
	}
	wg.Wait()
	// The server's goroutines for those connections are gone.
	deadline := time.Now().Add(30 * time.Second)
	for {
		n := s.goroutines(t)
		if n <= baseline+3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines after the slow clients were cut off, %d before", n, baseline)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// A normal push still works with these settings.
	s.Push(t, s.AdminKey, "shop", "", map[string]string{"README": strings.Repeat("x", 1<<20)})
}

// TestDeclaredLengthOverTheLimit: a Content-Length of 10^12 is refused
// with 413 too_large before any of the body is sent.
func TestDeclaredLengthOverTheLimit(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOpts{})
	s.CreateRepo(t, "shop")
	for _, target := range []string{"PUT /api/v1/repos/shop/worktree?force=true", "POST /api/v1/repos/shop/objects", "POST /api/v1/repos", "POST /git/shop.git/git-receive-pack"} {
		c, err := net.Dial("tcp", s.HostPort)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "%s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 1000000000000\r\n\r\n", target, s.AdminKey)
		c.SetReadDeadline(time.Now().Add(60 * time.Second)) // generous: the answer comes at once
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			c.Close()
			t.Fatalf("%s: no answer without a body: %v", target, err)
		}
		b, _ := io.ReadAll(resp.Body)
		c.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(b), `"too_large"`) {
			t.Errorf("%s: %d %s, want 413 too_large", target, resp.StatusCode, b)
		}
	}
}
