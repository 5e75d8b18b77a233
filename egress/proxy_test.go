package egress

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"
)

// TestTunnelWithoutInterception: without interception a CONNECT is an
// opaque tunnel to the destination (its own certificate reaches the
// client; writes pass unstaged, as documented for
// --egress-intercept=false), and Close ends a tunnel still open.
func TestTunnelWithoutInterception(t *testing.T) {
	rc := &receiver{}
	ts := httptest.NewTLSServer(rc.handler())
	defer ts.Close()
	st := &recorder{}
	p := start(t, Config{Stager: st})
	if p.CABundle != "" || p.CACert != nil {
		t.Fatalf("a CA without interception: %q", p.CABundle)
	}
	c := proxied(t, p, ts.Client().Transport.(*http.Transport).TLSClientConfig)
	resp, body := do(t, c, "POST", ts.URL+"/t", "x", nil)
	if resp.StatusCode != 200 || body != "hello from /t" || resp.TLS == nil || !resp.TLS.PeerCertificates[0].Equal(ts.Certificate()) {
		t.Fatalf("tunnelled POST: %d %s %+v", resp.StatusCode, body, resp.TLS)
	}
	if rc.hits.Load() != 1 || len(st.got()) != 0 {
		t.Fatalf("receiver %d, staged %d", rc.hits.Load(), len(st.got()))
	}

	// A tunnel to a destination that never speaks stays open until Close.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			accepted <- c
		}
	}()
	conn, err := net.Dial("tcp", strings.TrimPrefix(p.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "CONNECT "+ln.Addr().String()+" HTTP/1.1\r\nHost: "+ln.Addr().String()+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	cr, err := http.ReadResponse(br, nil)
	if err != nil || cr.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", cr, err)
	}
	up := <-accepted
	defer up.Close()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	// The deadline only keeps a regression from hanging the test.
	conn.SetReadDeadline(time.Now().Add(time.Minute))
	if _, err := br.ReadByte(); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("tunnel after Close: %v, want it closed", err)
	}
}

// TestNotAProxyRequest: a plain request to the proxy's address (not an
// absolute URL, not CONNECT) is a 400 that says what the address is.
func TestNotAProxyRequest(t *testing.T) {
	p := start(t, Config{Stager: &recorder{}})
	resp, body := do(t, http.DefaultClient, "GET", p.URL+"/", "", nil)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "HTTP proxy for a `lockstep run`") {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
}
