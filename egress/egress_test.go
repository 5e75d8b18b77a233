package egress

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/api"
)

// recorder is a Stager keeping what it was asked to stage (our own
// interface; the e2e tests stage through a real server).
type recorder struct {
	mu   sync.Mutex
	reqs []api.EffectRequest
	err  error
}

func (r *recorder) Stage(_ context.Context, req api.EffectRequest) (api.Effect, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return api.Effect{}, r.err
	}
	r.reqs = append(r.reqs, req)
	return api.Effect{ID: fmt.Sprintf("eff_%d", len(r.reqs)), Status: "staged", Method: req.Method, URL: req.URL}, nil
}

func (r *recorder) got() []api.EffectRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]api.EffectRequest(nil), r.reqs...)
}

// receiver is a real loopback server counting what reaches it.
type receiver struct {
	hits    atomic.Int64
	methods sync.Map
}

func (rc *receiver) handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc.hits.Add(1)
		rc.methods.Store(r.Method, true)
		io.Copy(io.Discard, r.Body)
		w.Header().Set("X-Receiver", "yes")
		io.WriteString(w, "hello from "+r.URL.Path)
	})
}

func start(t testing.TB, cfg Config) *Proxy {
	t.Helper()
	if cfg.Mode == "" {
		cfg.Mode = ModeStage
	}
	if cfg.RunID == "" {
		cfg.RunID = "run_test"
	}
	p, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func proxied(t testing.TB, p *Proxy, tlsCfg *tls.Config) *http.Client {
	t.Helper()
	u, err := url.Parse(p.URL)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(u), TLSClientConfig: tlsCfg}}
}

func do(t *testing.T, c *http.Client, method, u, body string, h map[string]string) (*http.Response, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, u, rd)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

func TestReadsPassWritesAreStaged(t *testing.T) {
	rc := &receiver{}
	ts := httptest.NewServer(rc.handler())
	defer ts.Close()
	st := &recorder{}
	p := start(t, Config{Stager: st, RunID: "run_1"})
	c := proxied(t, p, nil)

	for _, m := range []string{"GET", "HEAD", "OPTIONS"} {
		resp, body := do(t, c, m, ts.URL+"/read", "", nil)
		if resp.StatusCode != 200 || resp.Header.Get("X-Receiver") != "yes" {
			t.Fatalf("%s: %d %q, want the receiver's answer", m, resp.StatusCode, body)
		}
		if m == "GET" && body != "hello from /read" {
			t.Fatalf("GET body %q", body)
		}
	}
	if n := rc.hits.Load(); n != 3 {
		t.Fatalf("receiver saw %d reads, want 3", n)
	}

	for i, m := range []string{"POST", "PUT", "PATCH", "DELETE"} {
		resp, body := do(t, c, m, ts.URL+"/hook?x=1", `{"rows":412}`, map[string]string{"Authorization": "Bearer s3cret", "Content-Type": "application/json"})
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("%s: %d %s, want 202", m, resp.StatusCode, body)
		}
		var out struct {
			Effect  map[string]string `json:"lockstep_effect"`
			Message string            `json:"message"`
		}
		if err := json.Unmarshal([]byte(body), &out); err != nil {
			t.Fatalf("%s: %v in %q", m, err, body)
		}
		id := resp.Header.Get("X-Lockstep-Effect")
		if id == "" || out.Effect["id"] != id || out.Effect["status"] != "staged" || !strings.Contains(out.Message, "delivered only when the workspace is promoted") {
			t.Fatalf("%s: header %q body %q", m, id, body)
		}
		got := st.got()[i]
		if got.Method != m || got.URL != ts.URL+"/hook?x=1" || got.Body != `{"rows":412}` || got.RunID != "run_1" ||
			got.Headers["Authorization"] != "Bearer s3cret" || got.Headers["Content-Type"] != "application/json" {
			t.Fatalf("%s staged %+v", m, got)
		}
		if _, ok := got.Headers["Proxy-Connection"]; ok {
			t.Fatalf("hop-by-hop header staged: %v", got.Headers)
		}
	}
	if n := rc.hits.Load(); n != 3 {
		t.Fatalf("a write reached the receiver (%d hits)", n)
	}
	if ids := p.Staged(); len(ids) != 4 {
		t.Fatalf("Staged() = %v", ids)
	}

	// A binary body is staged as base64.
	resp, body := do(t, c, "POST", ts.URL+"/bin", "\xff\xfe\x00", nil)
	if resp.StatusCode != 202 {
		t.Fatalf("binary POST: %d %s", resp.StatusCode, body)
	}
	if got := st.got()[4]; got.BodyBase64 != "//4A" || got.Body != "" {
		t.Fatalf("binary body staged as %+v", got)
	}
}

func TestBodyLimit(t *testing.T) {
	rc := &receiver{}
	ts := httptest.NewServer(rc.handler())
	defer ts.Close()
	st := &recorder{}
	p := start(t, Config{Stager: st, MaxBodyBytes: 10})
	c := proxied(t, p, nil)
	resp, body := do(t, c, "POST", ts.URL, "0123456789", nil)
	if resp.StatusCode != 202 {
		t.Fatalf("10 bytes: %d %s", resp.StatusCode, body)
	}
	resp, body = do(t, c, "POST", ts.URL, "0123456789X", nil)
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(body, "over 10 bytes") || !strings.Contains(body, "not sent and not staged") {
		t.Fatalf("11 bytes: %d %s, want 413", resp.StatusCode, body)
	}
	if len(st.got()) != 1 || rc.hits.Load() != 0 {
		t.Fatalf("staged %d, receiver %d", len(st.got()), rc.hits.Load())
	}
}

func TestPolicy(t *testing.T) {
	rc := &receiver{}
	ts := httptest.NewServer(rc.handler())
	defer ts.Close()
	st := &recorder{}

	// Default-deny: nothing leaves, writes are not even staged.
	deny := proxied(t, start(t, Config{Mode: ModeDeny, Stager: st}), nil)
	for _, m := range []string{"GET", "POST"} {
		resp, body := do(t, deny, m, ts.URL, "x", nil)
		if resp.StatusCode != 403 || !strings.Contains(body, "host 127.0.0.1") || !strings.Contains(body, "--egress-allow") {
			t.Fatalf("deny %s: %d %s", m, resp.StatusCode, body)
		}
	}
	// Stage mode with an allow list that does not name the host.
	other := proxied(t, start(t, Config{Mode: ModeStage, Stager: st, Allow: []string{"api.example.com", "*.example.org"}}), nil)
	resp, body := do(t, other, "GET", ts.URL, "", nil)
	if resp.StatusCode != 403 || !strings.Contains(body, "not in the run's egress allow list") {
		t.Fatalf("stage + allow list: %d %s", resp.StatusCode, body)
	}
	if rc.hits.Load() != 0 || len(st.got()) != 0 {
		t.Fatalf("a refused request got through: receiver %d, staged %d", rc.hits.Load(), len(st.got()))
	}
	// Deny mode, host allowed: reads pass, writes are staged.
	allowed := proxied(t, start(t, Config{Mode: ModeDeny, Stager: st, Allow: []string{"127.0.0.1"}}), nil)
	if resp, body := do(t, allowed, "GET", ts.URL, "", nil); resp.StatusCode != 200 {
		t.Fatalf("allowed GET: %d %s", resp.StatusCode, body)
	}
	if resp, body := do(t, allowed, "POST", ts.URL, "x", nil); resp.StatusCode != 202 {
		t.Fatalf("allowed POST: %d %s", resp.StatusCode, body)
	}
	if rc.hits.Load() != 1 || len(st.got()) != 1 {
		t.Fatalf("receiver %d (want 1), staged %d (want 1)", rc.hits.Load(), len(st.got()))
	}

	p := &Proxy{cfg: Config{Mode: ModeStage}, allow: []string{".example.org", "api.example.com"}}
	for host, want := range map[string]bool{"example.org": true, "a.b.example.org": true, "API.example.com": true, "example.com": false, "evilexample.org": false} {
		if p.allowed(host) != want {
			t.Errorf("allowed(%q) = %v", host, !want)
		}
	}
}

func TestStageRefusedByServer(t *testing.T) {
	rc := &receiver{}
	ts := httptest.NewServer(rc.handler())
	defer ts.Close()
	st := &recorder{err: lockstep.Errorf(lockstep.EINVALID, "effect target 127.0.0.1 is internal")}
	c := proxied(t, start(t, Config{Stager: st}), nil)
	resp, body := do(t, c, "POST", ts.URL, "x", nil)
	if resp.StatusCode != 403 || !strings.Contains(body, "is internal") || !strings.Contains(body, "it was not sent") {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if rc.hits.Load() != 0 {
		t.Fatal("a refused write reached the receiver")
	}
}

func TestBypassForwardsWrites(t *testing.T) {
	rc := &receiver{}
	ts := httptest.NewServer(rc.handler())
	defer ts.Close()
	st := &recorder{}
	c := proxied(t, start(t, Config{Stager: st, Bypass: []string{strings.TrimPrefix(ts.URL, "http://")}}), nil)
	if resp, body := do(t, c, "POST", ts.URL, "x", nil); resp.StatusCode != 200 || body != "hello from /" {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if rc.hits.Load() != 1 || len(st.got()) != 0 {
		t.Fatalf("receiver %d, staged %d", rc.hits.Load(), len(st.got()))
	}
}

func TestHTTPSInterception(t *testing.T) {
	rc := &receiver{}
	ts := httptest.NewTLSServer(rc.handler())
	defer ts.Close()
	st := &recorder{}
	// The proxy verifies the destination (here: the test server's cert).
	upstream := ts.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	p := start(t, Config{Stager: st, Intercept: true, UpstreamTLS: upstream, RunID: "run_tls"})
	if p.CABundle == "" || p.CACert == nil || !p.CACert.IsCA {
		t.Fatalf("no CA: %+v", p)
	}
	fi, err := os.Stat(p.CABundle)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("bundle %v %v", fi, err)
	}
	pemBytes, err := os.ReadFile(p.CABundle)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(pemBytes), "PRIVATE KEY") {
		t.Fatal("the CA bundle holds a private key")
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemBytes) {
		t.Fatal("bundle has no certificates")
	}
	c := proxied(t, p, &tls.Config{RootCAs: pool})

	resp, body := do(t, c, "GET", ts.URL+"/r", "", nil)
	if resp.StatusCode != 200 || body != "hello from /r" {
		t.Fatalf("HTTPS GET: %d %s", resp.StatusCode, body)
	}
	if resp.TLS == nil || resp.TLS.PeerCertificates[0].Issuer.CommonName != p.CACert.Subject.CommonName {
		t.Fatalf("GET not intercepted with the run's CA: %+v", resp.TLS)
	}
	resp, body = do(t, c, "POST", ts.URL+"/w", "secret rows", nil)
	if resp.StatusCode != 202 || resp.Header.Get("X-Lockstep-Effect") == "" {
		t.Fatalf("HTTPS POST: %d %s", resp.StatusCode, body)
	}
	got := st.got()
	if len(got) != 1 || got[0].URL != ts.URL+"/w" || got[0].Body != "secret rows" || got[0].RunID != "run_tls" {
		t.Fatalf("staged %+v", got)
	}
	if rc.hits.Load() != 1 {
		t.Fatalf("receiver saw %d requests, want only the GET", rc.hits.Load())
	}
	if _, ok := rc.methods.Load("POST"); ok {
		t.Fatal("the POST reached the receiver")
	}
	// A client that does not trust the run's CA cannot talk through it.
	if _, err := proxied(t, p, &tls.Config{}).Get(ts.URL); err == nil {
		t.Fatal("untrusting client accepted the intercepted connection")
	}

	// The proxy verifies the destination it reads from: without the test
	// server's certificate among its roots, the read fails instead of
	// being passed on unverified.
	strict := start(t, Config{Stager: st, Intercept: true})
	spem, err := os.ReadFile(strict.CABundle)
	if err != nil {
		t.Fatal(err)
	}
	spool := x509.NewCertPool()
	spool.AppendCertsFromPEM(spem)
	if resp, err := proxied(t, strict, &tls.Config{RootCAs: spool}).Get(ts.URL + "/unverified"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Fatal("the proxy read from a destination whose certificate it cannot verify")
		}
	}
	if rc.hits.Load() != 1 {
		t.Fatalf("receiver saw %d requests, want 1", rc.hits.Load())
	}

	// CONNECT to a host outside the policy is refused.
	deny := start(t, Config{Mode: ModeDeny, Stager: st, Intercept: true, UpstreamTLS: upstream})
	if _, err := proxied(t, deny, &tls.Config{RootCAs: pool}).Get(ts.URL); err == nil || !strings.Contains(err.Error(), "Forbidden") {
		t.Fatalf("CONNECT under deny: %v", err)
	}

	bundle := p.CABundle
	p.Close()
	if _, err := os.Stat(bundle); !os.IsNotExist(err) {
		t.Fatalf("bundle left after Close: %v", err)
	}
}

func TestEnv(t *testing.T) {
	p := start(t, Config{Stager: &recorder{}, Intercept: true})
	env := p.Env([]string{"lockstep.internal"})
	want := map[string]string{"HTTP_PROXY": p.URL, "https_proxy": p.URL, "NO_PROXY": "lockstep.internal", "SSL_CERT_FILE": p.CABundle,
		"CURL_CA_BUNDLE": p.CABundle, "REQUESTS_CA_BUNDLE": p.CABundle, "NODE_EXTRA_CA_CERTS": p.CABundle, "GIT_SSL_CAINFO": p.CABundle}
	merged := MergeEnv([]string{"HTTP_PROXY=http://corp:3128", "PATH=/bin", "SSL_CERT_FILE=/x"}, env)
	seen := map[string]int{}
	for _, kv := range merged {
		k, v, _ := strings.Cut(kv, "=")
		seen[k]++
		if w, ok := want[k]; ok && v != w {
			t.Errorf("%s=%s, want %s", k, v, w)
		}
	}
	for k := range want {
		if seen[k] != 1 {
			t.Errorf("%s set %d times", k, seen[k])
		}
	}
	if seen["PATH"] != 1 {
		t.Error("PATH lost")
	}
}

func TestStartRefusesBadMode(t *testing.T) {
	if _, err := Start(Config{Mode: "sometimes", Stager: &recorder{}}); lockstep.ErrorCode(err) != lockstep.EINVALID {
		t.Fatalf("err = %v", err)
	}
}

// BenchmarkProxyOverhead: a read straight to the receiver and the same
// read through the proxy (keep-alive on both legs); the difference is the
// proxy's overhead per request.
func BenchmarkProxyOverhead(b *testing.B) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer ts.Close()
	get := func(b *testing.B, c *http.Client) {
		for i := 0; i < b.N; i++ {
			resp, err := c.Get(ts.URL)
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Fatal(resp.Status)
			}
		}
	}
	b.Run("direct", func(b *testing.B) {
		get(b, &http.Client{Transport: &http.Transport{}})
	})
	b.Run("proxied", func(b *testing.B) {
		p := start(b, Config{Stager: &recorder{}})
		get(b, proxied(b, p, nil))
	})
	b.Run("staged", func(b *testing.B) {
		p := start(b, Config{Stager: &recorder{}})
		c := proxied(b, p, nil)
		for i := 0; i < b.N; i++ {
			resp, err := c.Post(ts.URL, "text/plain", strings.NewReader("x"))
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 202 {
				b.Fatal(resp.Status)
			}
		}
	})
}

// TestProxyNeedsItsRunsCredentials: the proxy listens on loopback, where
// any process of the machine reaches it (another run's command on a
// shared runner host). Without this run's credentials a write is answered
// 407 and neither staged nor sent, a read is not forwarded and a CONNECT
// is refused; with them (the userinfo of the URL the run's HTTP_PROXY
// carries) the write is staged and the receiver never sees the
// credentials.
func TestProxyNeedsItsRunsCredentials(t *testing.T) {
	rc := &receiver{}
	var sawAuth atomic.Bool
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Proxy-Authorization") != "" {
			sawAuth.Store(true)
		}
		rc.handler().ServeHTTP(w, r)
	}))
	defer ts.Close()
	st := &recorder{}
	p := start(t, Config{Stager: st, Intercept: true})
	u, err := url.Parse(p.URL)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []*url.URL{{Scheme: "http", Host: u.Host}, {Scheme: "http", Host: u.Host, User: url.UserPassword("lockstep", "guess")}} {
		c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(bad)}}
		for _, m := range []string{"POST", "GET"} {
			resp, _ := do(t, c, m, "http://receiver.test/orders", "x", nil)
			if resp.StatusCode != http.StatusProxyAuthRequired {
				t.Errorf("%s without the run's credentials (%s): %d, want 407", m, bad.Redacted(), resp.StatusCode)
			}
		}
		if _, err := c.Get("https://receiver.test/"); err == nil || !strings.Contains(err.Error(), "Proxy Authentication Required") {
			t.Errorf("CONNECT without the run's credentials: %v, want 407", err)
		}
	}
	if n := len(st.got()); n != 0 || rc.hits.Load() != 0 {
		t.Fatalf("without credentials: %d staged, %d reached the receiver; want none", n, rc.hits.Load())
	}
	c := proxied(t, p, nil)
	if resp, _ := do(t, c, "POST", ts.URL+"/orders", "x", nil); resp.StatusCode != http.StatusAccepted || len(st.got()) != 1 {
		t.Fatalf("POST with the run's proxy URL: %d, %d staged", resp.StatusCode, len(st.got()))
	}
	if resp, _ := do(t, c, "GET", ts.URL+"/read", "", nil); resp.StatusCode != http.StatusOK || sawAuth.Load() {
		t.Fatalf("GET with the run's proxy URL: %d, receiver saw Proxy-Authorization %v", resp.StatusCode, sawAuth.Load())
	}
	pw, _ := u.User.Password()
	for k, v := range st.got()[0].Headers {
		if strings.EqualFold(k, "Proxy-Authorization") || pw != "" && strings.Contains(v, pw) {
			t.Fatalf("the staged effect carries the proxy's credentials: %s: %s", k, v)
		}
	}
}
