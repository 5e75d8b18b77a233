package e2e

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep/api"
	"github.com/lockstep-hq/lockstep/client"
)

// TestRunEgressProxy: a `lockstep run` whose command POSTs through the
// egress proxy (curl, honouring HTTP(S)_PROXY) and then exits 1 leaves
// the receiver untouched and its effect discarded, for HTTP and for
// intercepted HTTPS (curl trusting the run's CA through CURL_CA_BUNDLE);
// the same command exiting 0, then a promote, delivers it exactly once.
func TestRunEgressProxy(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl is not installed")
	}
	ctx := context.Background()
	rcv := newEffectReceiver(t)
	var tlsHits atomic.Int64
	tlsRcv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { tlsHits.Add(1) }))
	defer tlsRcv.Close()

	s := effectServer(t, serverOpts{})
	s.CreateRepo(t, "base")
	s.push(t, s.AdminKey, "base", zeroOID, map[string]string{"README": "hi\n"})
	agent := s.CreateKey(t, "agent", "agent")
	ac := client.New(s.URL, agent.Secret)
	s.forkTip(t, agent.Secret, "base", "ws1")
	work := t.TempDir()
	if out, err := s.cli(t, agent.Secret, "checkout", "ws1", work); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	run := func(script string, extra ...string) (code int, out string) {
		t.Helper()
		args := append([]string{"run", "--workspace", "ws1", "--dir", work, "--driver", "copy", "--state-root", t.TempDir()}, extra...)
		r := s.CLIEnv(t, agent.Secret, "", []string{"XDG_CACHE_HOME=" + t.TempDir()}, append(args, "--", "sh", "-c", script)...)
		return r.Code, r.Stdout + r.Stderr
	}
	effects := func() []api.Effect {
		t.Helper()
		list, _, err := ac.Effects(ctx, "ws1", 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		return list
	}

	// A failing run: the POST is answered 202 by the proxy, never sent,
	// and discarded when the run fails.
	code, out := run(`curl -sf -X POST -d x ` + rcv.URL + `/failed && echo; exit 1`)
	if code != 1 || !strings.Contains(out, `"lockstep_effect"`) || !strings.Contains(out, "delivered only when the workspace is promoted") {
		t.Fatalf("failing run: exit %d\n%s", code, out)
	}
	// The same over HTTPS, intercepted with the run's CA.
	code, out = run(`curl -sf -X POST -d y ` + tlsRcv.URL + `/tls && echo; exit 1`)
	if code != 1 || !strings.Contains(out, `"lockstep_effect"`) {
		t.Fatalf("failing HTTPS run: exit %d\n%s", code, out)
	}
	list := effects()
	if len(list) != 2 {
		t.Fatalf("%d effects after the failed runs, want 2: %+v", len(list), list)
	}
	for i, want := range []string{rcv.URL + "/failed", tlsRcv.URL + "/tls"} {
		e := list[i]
		if e.URL != want || e.Method != "POST" || e.Status != "discarded" || !strings.HasPrefix(e.RunID, "run_") {
			t.Fatalf("effect %d: %+v, want a discarded POST to %s", i, e, want)
		}
	}
	if list[0].RunID == list[1].RunID {
		t.Fatal("two runs shared a run id")
	}

	// Under --egress deny a host outside --egress-allow is refused.
	code, out = run(`curl -s -o /dev/null -w '%{http_code}' -X POST -d z `+rcv.URL+`/denied; exit 0`, "--egress", "deny", "--egress-allow", "api.example.com")
	if code != 0 || !strings.Contains(out, "403") {
		t.Fatalf("deny run: exit %d\n%s", code, out)
	}
	if n := len(effects()); n != 2 {
		t.Fatalf("a refused request was staged: %d effects", n)
	}

	// A successful run keeps its effect staged; the promote delivers it.
	code, out = run(`echo ok > ok.txt && curl -sf -D - -X POST -H 'Content-Type: application/json' -d '{"n":1}' `+rcv.URL+`/kept`, "--commit-on-success")
	if code != 0 || !strings.Contains(out, "X-Lockstep-Effect: eff_") {
		t.Fatalf("successful run: exit %d\n%s", code, out)
	}
	list = effects()
	if len(list) != 3 || list[2].Status != "staged" || list[2].URL != rcv.URL+"/kept" || list[2].BodyPreview != `{"n":1}` {
		t.Fatalf("after the successful run: %+v", list)
	}
	kept := list[2]

	time.Sleep(300 * time.Millisecond)
	if k := rcv.keys(); len(k) != 0 || tlsHits.Load() != 0 {
		t.Fatalf("BUG: a receiver was called before the promote: %v, TLS %d", k, tlsHits.Load())
	}
	s.promote(t, agent.Secret, "ws1")
	eventually(t, 60*time.Second, "the run's effect to be released", func() bool {
		return effectNow(t, ac, "ws1", kept.ID).Status == "released"
	})
	if seen, processed := rcv.count(kept.ID); seen != 1 || processed != 1 {
		t.Fatalf("the receiver saw the effect %d times (processed %d), want once", seen, processed)
	}
	if k := rcv.keys(); len(k) != 1 || tlsHits.Load() != 0 {
		t.Fatalf("BUG: the receiver got %v (TLS %d); only the promoted run's effect may arrive", k, tlsHits.Load())
	}
}
