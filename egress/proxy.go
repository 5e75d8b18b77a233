package egress

// The proxy itself: absolute-URL HTTP requests and CONNECT, the latter
// either as an opaque tunnel or, with interception, terminated with a
// certificate for the host signed by the run's CA and served request by
// request. It is our own rather than a proxy library's so that `lockstep`
// (the client build, where `run` starts it) links no initialiser that
// parses a bundled CA key at every start of every command.

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"math/big"
	"net"
	"net/http"
	"strings"
	"time"
)

// ServeHTTP is the proxy's handler.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect {
		p.connect(w, r)
		return
	}
	if !r.URL.IsAbs() || r.URL.Host == "" {
		http.Error(w, "lockstep egress proxy: this address is an HTTP proxy for a `lockstep run`; send proxy requests (absolute URLs or CONNECT)", http.StatusBadRequest)
		return
	}
	resp := p.handle(r)
	if resp == nil {
		resp = p.forward(r)
	}
	defer resp.Body.Close()
	removeHopHeaders(resp.Header)
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, resp.Body)
}

// forward sends req to its destination and returns the answer (a 502 of
// the proxy's own when the destination cannot be reached or verified).
func (p *Proxy) forward(req *http.Request) *http.Response {
	out := req.Clone(req.Context())
	out.RequestURI = ""
	if req.ContentLength == 0 {
		out.Body = nil
	}
	removeHopHeaders(out.Header)
	resp, err := p.tr.RoundTrip(out)
	if err != nil {
		return jsonResponse(req, http.StatusBadGateway, nil, map[string]any{"message": "lockstep egress: " + req.Method + " " + req.URL.Host + ": " + err.Error()})
	}
	return resp
}

// connect answers a CONNECT: refused outside the policy, a tunnel
// without interception (or to a bypassed address), else intercepted.
func (p *Proxy) connect(w http.ResponseWriter, r *http.Request) {
	host := r.Host
	if !p.allowed(hostOnly(host)) {
		resp := p.refusal(r, hostOnly(host))
		defer resp.Body.Close()
		for k, vs := range resp.Header {
			w.Header()[k] = vs
		}
		w.WriteHeader(resp.StatusCode)
		io.Copy(w, resp.Body)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		http.Error(w, "lockstep egress: cannot take over the connection", http.StatusInternalServerError)
		return
	}
	var upstream net.Conn
	if p.ca == nil || p.bypass[strings.ToLower(host)] {
		ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
		c, err := p.dial(ctx, "tcp", host)
		cancel()
		if err != nil {
			http.Error(w, "lockstep egress: "+host+": "+err.Error(), http.StatusBadGateway)
			return
		}
		upstream = c
	}
	conn, brw, err := hj.Hijack()
	if err != nil {
		if upstream != nil {
			upstream.Close()
		}
		return
	}
	if brw.Reader.Buffered() > 0 {
		conn = &bufConn{Conn: conn, r: brw.Reader}
	}
	if !p.track(conn) {
		conn.Close()
		if upstream != nil {
			upstream.Close()
		}
		return
	}
	defer p.untrack(conn)
	defer conn.Close()
	if _, err := io.WriteString(conn, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		if upstream != nil {
			upstream.Close()
		}
		return
	}
	if upstream != nil {
		defer upstream.Close()
		done := make(chan struct{})
		go func() {
			io.Copy(upstream, conn)
			if tc, ok := upstream.(*net.TCPConn); ok {
				tc.CloseWrite()
			}
			close(done)
		}()
		io.Copy(conn, upstream)
		conn.Close()
		<-done
		return
	}
	p.intercept(conn, host)
}

// intercept terminates TLS on conn with a certificate for host signed by
// the run's CA and handles its requests one after the other.
func (p *Proxy) intercept(conn net.Conn, host string) {
	name := hostOnly(host)
	tconn := tls.Server(conn, &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return p.certs.Fetch(name, func() (*tls.Certificate, error) { return signHost(p.ca, name) })
		},
	})
	defer tconn.Close()
	tconn.SetDeadline(time.Now().Add(30 * time.Second))
	if err := tconn.Handshake(); err != nil {
		return
	}
	tconn.SetDeadline(time.Time{})
	authority := strings.TrimSuffix(host, ":443")
	br := bufio.NewReader(tconn)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		req.URL.Scheme, req.URL.Host = "https", authority
		req.RemoteAddr = conn.RemoteAddr().String()
		resp := p.handle(req)
		if resp == nil {
			resp = p.forward(req)
		}
		removeHopHeaders(resp.Header)
		resp.Proto, resp.ProtoMajor, resp.ProtoMinor = "HTTP/1.1", 1, 1
		if resp.ContentLength < 0 && len(resp.TransferEncoding) == 0 {
			resp.TransferEncoding = []string{"chunked"}
		}
		closeAfter := req.Close || resp.Close
		err = resp.Write(tconn)
		resp.Body.Close()
		io.Copy(io.Discard, req.Body)
		req.Body.Close()
		if err != nil || closeAfter {
			return
		}
	}
}

// track registers a taken-over connection so Close ends it; false once
// the proxy is closed.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	if p.live == nil {
		p.live = map[net.Conn]bool{}
	}
	p.live[c] = true
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.live, c)
	p.mu.Unlock()
}

// closeLive ends every taken-over connection (tunnels, intercepted TLS).
func (p *Proxy) closeLive() {
	p.mu.Lock()
	p.closed = true
	live := p.live
	p.live = nil
	p.mu.Unlock()
	for c := range live {
		c.Close()
	}
}

// hopByHop are the headers of one connection, not forwarded.
var hopByHop = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func removeHopHeaders(h http.Header) {
	for _, f := range h.Values("Connection") {
		for _, k := range strings.Split(f, ",") {
			if k = strings.TrimSpace(k); k != "" {
				h.Del(k)
			}
		}
	}
	for _, k := range hopByHop {
		h.Del(k)
	}
}

// signHost makes the certificate the proxy shows for host: ECDSA P-256,
// signed by the run's CA, valid as long as the CA.
func signHost(ca *tls.Certificate, host string) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{Organization: []string{"Lockstep"}, CommonName: clip(host, 64)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     ca.Leaf.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if ip := net.ParseIP(host); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Leaf, &key.PublicKey, ca.PrivateKey)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{der, ca.Certificate[0]}, PrivateKey: key}, nil
}

// bufConn reads first what the server buffered before the take-over.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufConn) Read(b []byte) (int, error) { return c.r.Read(b) }
