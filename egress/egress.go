// Package egress is the local forward proxy `lockstep run` points its
// command at (HTTP_PROXY / HTTPS_PROXY): reads (GET, HEAD, OPTIONS) pass
// through to their destination, every other request is not sent but
// staged as an effect of the run's workspace (released only when the
// workspace is promoted) and answered with a synthetic 202. A host policy
// refuses destinations outside it. HTTPS is mediated by interception: the
// proxy terminates TLS with a certificate signed by a CA generated for the
// run (its key never leaves memory), and the run is told to trust that CA.
//
// Only traffic that honours the proxy environment variables passes
// through here: a program that ignores them, raw TCP, DNS and UDP are not
// mediated.
package egress

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/elazarl/goproxy"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/api"
	"github.com/lockstep-hq/lockstep/internal/procenv"
)

// Modes of the proxy.
const (
	// ModeOff: no proxy, the run's traffic is not mediated.
	ModeOff = "off"
	// ModeStage: every host is reachable unless Allow lists some; reads
	// pass, writes are staged.
	ModeStage = "stage"
	// ModeDeny: default-deny; only the hosts in Allow are reachable
	// (reads pass, writes are staged), everything else is refused.
	ModeDeny = "deny"
)

// DefaultMaxBodyBytes is the default bound of a staged body, the
// server's default --effect-max-body-bytes.
const DefaultMaxBodyBytes = 1 << 20

// Stager stages an effect on the run's workspace (the Go client's
// StageEffect in `lockstep run`).
type Stager interface {
	Stage(ctx context.Context, req api.EffectRequest) (api.Effect, error)
}

// Config configures a proxy.
type Config struct {
	// Mode is ModeStage or ModeDeny.
	Mode string
	// Allow is the host policy: host names or IPs (case-insensitive),
	// ".example.com" or "*.example.com" for a domain and its subdomains.
	// Empty: every host in ModeStage, none in ModeDeny.
	Allow []string
	// Bypass lists host:port addresses forwarded as they are, whatever
	// the method (the Lockstep server itself, so a client that proxies
	// it anyway does not stage its own API calls).
	Bypass []string
	// Intercept terminates HTTPS with the per-run CA so HTTPS writes are
	// staged too; without it a CONNECT to an allowed host is an opaque
	// tunnel (not mediated).
	Intercept bool
	// MaxBodyBytes bounds a staged body (default DefaultMaxBodyBytes);
	// larger requests are refused with 413.
	MaxBodyBytes int64
	// Stager stages the writes; RunID tags them.
	Stager Stager
	RunID  string
	// UpstreamTLS verifies the destinations of reads (nil: system roots).
	UpstreamTLS *tls.Config
	// CAValidity is how long the run's CA is valid (default 7 days).
	CAValidity time.Duration
}

// Proxy is a running egress proxy.
type Proxy struct {
	// URL is the proxy's address with this run's credentials,
	// http://lockstep:TOKEN@127.0.0.1:PORT: the proxy answers 407 to a
	// request without them, so another process on the machine (another
	// run's command) cannot stage effects on this run's workspace.
	URL string
	// CABundle is the file the run trusts (system roots + the run's CA),
	// "" without interception. CACert is the run's CA certificate.
	CABundle string
	CACert   *x509.Certificate

	cfg    Config
	token  string
	allow  []string
	bypass map[string]bool
	dir    string
	ln     net.Listener
	srv    *http.Server
	tr     *http.Transport
	mu     sync.Mutex
	staged []string
}

// Start generates the run's CA (when intercepting) and listens on
// 127.0.0.1 on a random port.
func Start(cfg Config) (*Proxy, error) {
	if cfg.Mode != ModeStage && cfg.Mode != ModeDeny {
		return nil, lockstep.Errorf(lockstep.EINVALID, "egress mode %q: want stage, deny or off", cfg.Mode)
	}
	if cfg.Stager == nil {
		return nil, lockstep.Errorf(lockstep.EINVALID, "egress: no stager")
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.CAValidity <= 0 {
		cfg.CAValidity = 7 * 24 * time.Hour
	}
	p := &Proxy{cfg: cfg, bypass: map[string]bool{}}
	for _, h := range cfg.Allow {
		if h = strings.ToLower(strings.TrimSpace(h)); h != "" {
			p.allow = append(p.allow, strings.TrimPrefix(h, "*"))
		}
	}
	for _, b := range cfg.Bypass {
		p.bypass[strings.ToLower(b)] = true
	}
	upTLS := cfg.UpstreamTLS
	if upTLS == nil {
		upTLS = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	dialer := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	p.tr = &http.Transport{Proxy: nil, DialContext: dialer.DialContext, TLSClientConfig: upTLS,
		TLSHandshakeTimeout: 15 * time.Second, IdleConnTimeout: 90 * time.Second, MaxIdleConnsPerHost: 16}

	gp := goproxy.NewProxyHttpServer()
	gp.Logger = nopLogger{}
	gp.Tr = p.tr
	gp.ConnectDial = dialer.Dial
	gp.NonproxyHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "lockstep egress proxy: this address is an HTTP proxy for a `lockstep run`; send proxy requests (absolute URLs or CONNECT)", http.StatusBadRequest)
	})
	var connect *goproxy.ConnectAction
	if cfg.Intercept {
		ca, cert, pemCA, err := newCA(cfg.RunID, cfg.CAValidity)
		if err != nil {
			return nil, err
		}
		p.CACert = cert
		gp.CertStore = &certStore{m: map[string]*tls.Certificate{}}
		connect = &goproxy.ConnectAction{Action: goproxy.ConnectMitm, TLSConfig: goproxy.TLSConfigFromCA(ca)}
		if p.dir, err = os.MkdirTemp("", "lockstep-egress-"); err != nil {
			return nil, err
		}
		p.CABundle = filepath.Join(p.dir, "ca-bundle.pem")
		if err := os.WriteFile(p.CABundle, append(systemRoots(), pemCA...), 0o600); err != nil {
			os.RemoveAll(p.dir)
			return nil, err
		}
	}
	gp.OnRequest().HandleConnectFunc(func(host string, ctx *goproxy.ProxyCtx) (*goproxy.ConnectAction, string) {
		if !p.allowed(hostOnly(host)) {
			ctx.Resp = p.refusal(ctx.Req, hostOnly(host))
			return goproxy.RejectConnect, host
		}
		if connect == nil || p.bypass[strings.ToLower(host)] {
			return goproxy.OkConnect, host
		}
		return connect, host
	})
	gp.OnRequest().DoFunc(p.handle)

	tok := make([]byte, 24)
	if _, err := rand.Read(tok); err != nil {
		p.removeDir()
		return nil, err
	}
	p.token = hex.EncodeToString(tok)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		p.removeDir()
		return nil, err
	}
	p.ln = ln
	p.URL = "http://" + proxyUser + ":" + p.token + "@" + ln.Addr().String()
	p.srv = &http.Server{Handler: p.authorize(gp), ReadHeaderTimeout: 30 * time.Second}
	go p.srv.Serve(ln)
	return p, nil
}

// Env is what the run's environment gets: the proxy variables, NO_PROXY
// (the hosts given, e.g. the Lockstep server's), and with interception
// the CA bundle variables of OpenSSL/Go, curl, Python requests, Node and
// git.
func (p *Proxy) Env(noProxy []string) []string {
	env := []string{"HTTP_PROXY=" + p.URL, "HTTPS_PROXY=" + p.URL, "http_proxy=" + p.URL, "https_proxy=" + p.URL,
		"NO_PROXY=" + strings.Join(noProxy, ","), "no_proxy=" + strings.Join(noProxy, ",")}
	if p.CABundle != "" {
		for _, k := range []string{"SSL_CERT_FILE", "CURL_CA_BUNDLE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "GIT_SSL_CAINFO"} {
			env = append(env, k+"="+p.CABundle)
		}
	}
	return env
}

// MergeEnv returns base with every variable of add set to add's value
// (earlier definitions removed): procenv.Merge.
func MergeEnv(base, add []string) []string { return procenv.Merge(base, add) }

// Staged returns the ids of the effects the proxy staged.
func (p *Proxy) Staged() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.staged...)
}

// Close stops the proxy and deletes the CA bundle; the CA's key only
// ever lived in memory.
func (p *Proxy) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := p.srv.Shutdown(ctx)
	if err != nil {
		err = p.srv.Close()
	}
	p.tr.CloseIdleConnections()
	p.removeDir()
	return err
}

// proxyUser is the user name of the proxy's credentials.
const proxyUser = "lockstep"

// authorize lets through only the requests to the proxy (absolute URLs
// and CONNECTs) that carry this run's credentials (Proxy-Authorization:
// Basic, which clients send from the userinfo of HTTP_PROXY), and strips
// them; any other is answered 407 and neither staged nor forwarded. The
// requests inside an intercepted CONNECT were admitted with the CONNECT.
func (p *Proxy) authorize(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, pass, ok := parseBasic(r.Header.Get("Proxy-Authorization"))
		if !ok || user != proxyUser || subtle.ConstantTimeCompare([]byte(pass), []byte(p.token)) != 1 {
			w.Header().Set("Proxy-Authenticate", `Basic realm="lockstep egress"`)
			http.Error(w, "lockstep egress: proxy authorization required: use this run's HTTP_PROXY / HTTPS_PROXY as given (they carry its credentials)", http.StatusProxyAuthRequired)
			return
		}
		r.Header.Del("Proxy-Authorization")
		next.ServeHTTP(w, r)
	})
}

// parseBasic decodes a Basic Proxy-Authorization value.
func parseBasic(v string) (user, pass string, ok bool) {
	scheme, enc, found := strings.Cut(v, " ")
	if !found || !strings.EqualFold(scheme, "Basic") {
		return "", "", false
	}
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(enc))
	if err != nil {
		return "", "", false
	}
	return strings.Cut(string(b), ":")
}

func (p *Proxy) removeDir() {
	if p.dir != "" {
		os.RemoveAll(p.dir)
	}
}

func (p *Proxy) allowed(host string) bool {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if len(p.allow) == 0 {
		return p.cfg.Mode == ModeStage
	}
	for _, a := range p.allow {
		if a == host || (strings.HasPrefix(a, ".") && (strings.HasSuffix(host, a) || host == a[1:])) {
			return true
		}
	}
	return false
}

// isRead: the methods passed through. Every other method is staged.
func isRead(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

func (p *Proxy) handle(req *http.Request, ctx *goproxy.ProxyCtx) (*http.Request, *http.Response) {
	host := req.URL.Hostname()
	if p.bypass[strings.ToLower(req.URL.Host)] {
		return req, nil
	}
	if !p.allowed(host) {
		return req, p.refusal(req, host)
	}
	if isRead(req.Method) {
		return req, nil
	}
	return req, p.stage(req)
}

// hopHeaders are not part of a staged request.
var hopHeaders = map[string]bool{"Connection": true, "Proxy-Connection": true, "Proxy-Authorization": true, "Proxy-Authenticate": true,
	"Keep-Alive": true, "Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true, "Content-Length": true, "Host": true, "Expect": true}

func (p *Proxy) stage(req *http.Request) *http.Response {
	var body []byte
	if req.Body != nil {
		var err error
		body, err = io.ReadAll(io.LimitReader(req.Body, p.cfg.MaxBodyBytes+1))
		req.Body.Close()
		if err != nil {
			return jsonResponse(req, http.StatusBadRequest, nil, map[string]any{"message": "lockstep egress: could not read the request body: " + err.Error()})
		}
	}
	if int64(len(body)) > p.cfg.MaxBodyBytes {
		return jsonResponse(req, http.StatusRequestEntityTooLarge, nil, map[string]any{
			"message": fmt.Sprintf("lockstep egress: request body over %d bytes (the effect body limit); the request was not sent and not staged", p.cfg.MaxBodyBytes)})
	}
	er := api.EffectRequest{Method: req.Method, URL: req.URL.String(), RunID: p.cfg.RunID, Label: clip("egress proxy: "+req.Method+" "+req.URL.Host, 100)}
	for k, vs := range req.Header {
		if hopHeaders[http.CanonicalHeaderKey(k)] || len(vs) == 0 {
			continue
		}
		if er.Headers == nil {
			er.Headers = map[string]string{}
		}
		er.Headers[k] = strings.Join(vs, ", ")
	}
	if len(body) > 0 {
		if utf8.Valid(body) {
			er.Body = string(body)
		} else {
			er.BodyBase64 = base64.StdEncoding.EncodeToString(body)
		}
	}
	sctx, cancel := context.WithTimeout(req.Context(), 60*time.Second)
	defer cancel()
	eff, err := p.cfg.Stager.Stage(sctx, er)
	if err != nil {
		code := http.StatusBadGateway
		switch lockstep.ErrorCode(err) {
		case lockstep.ETOOLARGE:
			code = http.StatusRequestEntityTooLarge
		case lockstep.EINVALID, lockstep.EFORBIDDEN:
			code = http.StatusForbidden
		}
		return jsonResponse(req, code, nil, map[string]any{
			"lockstep_error": map[string]string{"code": lockstep.ErrorCode(err), "message": lockstep.ErrorMessage(err)},
			"message":        "lockstep could not stage this " + req.Method + "; it was not sent"})
	}
	p.mu.Lock()
	p.staged = append(p.staged, eff.ID)
	p.mu.Unlock()
	return jsonResponse(req, http.StatusAccepted, http.Header{"X-Lockstep-Effect": {eff.ID}}, map[string]any{
		"lockstep_effect": map[string]string{"id": eff.ID, "status": eff.Status},
		"message":         "staged by lockstep: delivered only when the workspace is promoted"})
}

func (p *Proxy) refusal(req *http.Request, host string) *http.Response {
	why := "is not in the run's egress allow list (--egress-allow)"
	if len(p.allow) == 0 {
		why = "is refused: `--egress deny` lets nothing out except the hosts given with --egress-allow"
	}
	return jsonResponse(req, http.StatusForbidden, nil, map[string]any{"message": "lockstep egress: host " + host + " " + why})
}

func jsonResponse(req *http.Request, code int, h http.Header, v any) *http.Response {
	b, _ := json.Marshal(v)
	b = append(b, '\n')
	if h == nil {
		h = http.Header{}
	}
	h.Set("Content-Type", "application/json")
	h.Set("X-Lockstep-Egress", "1")
	return &http.Response{StatusCode: code, Status: fmt.Sprintf("%d %s", code, http.StatusText(code)), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, Body: io.NopCloser(bytes.NewReader(b)), ContentLength: int64(len(b)), Request: req}
}

func hostOnly(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return hostport
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// newCA makes the run's CA: ECDSA P-256, self-signed, may only sign
// leaf certificates, valid from an hour ago for validity.
func newCA(runID string, validity time.Duration) (*tls.Certificate, *x509.Certificate, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{Organization: []string{"Lockstep"}, CommonName: clip("Lockstep egress CA for run "+runID, 64)},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: cert}, cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// rootFiles are where Linux distributions keep the system CA bundle.
var rootFiles = []string{
	"/etc/ssl/certs/ca-certificates.crt",
	"/etc/pki/tls/certs/ca-bundle.crt",
	"/etc/ssl/ca-bundle.pem",
	"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
	"/etc/ssl/cert.pem",
}

// systemRoots is the PEM the run trusted before: the caller's
// SSL_CERT_FILE if set, else the system bundle.
func systemRoots() []byte {
	files := rootFiles
	if f := os.Getenv("SSL_CERT_FILE"); f != "" {
		files = append([]string{f}, files...)
	}
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil && len(b) > 0 {
			if b[len(b)-1] != '\n' {
				b = append(b, '\n')
			}
			return b
		}
	}
	return nil
}

type certStore struct {
	mu sync.Mutex
	m  map[string]*tls.Certificate
}

func (s *certStore) Fetch(host string, gen func() (*tls.Certificate, error)) (*tls.Certificate, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.m[host]; ok {
		return c, nil
	}
	c, err := gen()
	if err != nil {
		return nil, err
	}
	s.m[host] = c
	return c, nil
}

type nopLogger struct{}

func (nopLogger) Printf(string, ...any) {}
