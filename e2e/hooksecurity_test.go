package e2e

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep/client"
	"github.com/lockstep-hq/lockstep/internal/e2ekit"
)

// TestHookTargetRules (issue 9, item 5), on the real server with the
// production default (no allow list): internal and credential-bearing
// targets are refused at registration; a hook registered while its host
// was allowed is refused at delivery once it no longer is (the check runs
// on the dialed address, so DNS rebinding gains nothing); a redirect is
// recorded as a failed attempt and not followed; agents see neither hooks
// nor deliveries.
func TestHookTargetRules(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	s := startGateServer(t, serverOpts{Data: data})
	s.CreateRepo(t, "base")
	base0 := s.push(t, s.AdminKey, "base", zeroOID, map[string]string{"README": "hi\n"}).Commit
	agent := s.CreateKey(t, "agent", "agent")
	reviewer := s.CreateKey(t, "reviewer", "reviewer")
	ci := s.CreateKey(t, "ci", "ci")

	var mu sync.Mutex
	targetHits := 0
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		targetHits++
		mu.Unlock()
	}))
	defer target.Close()
	redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL+"/moved", http.StatusTemporaryRedirect)
	}))
	defer redirector.Close()
	// Both receivers are on 127.0.0.1, which the suite allows: the
	// redirect hook and the one that will be refused later.
	redirectHook := s.createHook(t, "base", redirector.URL+"/hook", []string{"push"})
	laterBlocked := s.createHook(t, "base", target.URL+"/hook", []string{"push"})

	// Agents: 403 on hooks and deliveries; reviewers and ci read them.
	for _, path := range []string{"/api/v1/repos/base/hooks", "/api/v1/repos/base/hooks/" + redirectHook + "/deliveries"} {
		e2ekit.WantError(t, s.Call(t, "GET", path, agent.Secret, nil, ""), 403, "permission_denied")
		s.MustJSON(t, "GET", path, reviewer.Secret, nil, http.StatusOK, nil)
		s.MustJSON(t, "GET", path, ci.Secret, nil, http.StatusOK, nil)
	}

	s.forkTip(t, agent.Secret, "base", "ws")
	tip := s.push(t, agent.Secret, "ws", base0, map[string]string{"README": "hi\n", "a": "a\n"}).Commit
	eventually(t, 60*time.Second, "a recorded attempt of the redirect hook", func() bool {
		ds := s.deliveries(t, "base", redirectHook)
		return len(ds) == 1 && len(ds[0].History) >= 1
	})
	eventually(t, 60*time.Second, "the direct hook's delivery", func() bool {
		ds := s.deliveries(t, "base", laterBlocked)
		return len(ds) == 1 && ds[0].Status == "succeeded"
	})
	a := s.deliveries(t, "base", redirectHook)[0].History[0]
	if a.StatusCode != http.StatusTemporaryRedirect || !strings.Contains(a.Error, "redirect") {
		t.Errorf("redirect attempt: %+v, want status 307 and an error naming the redirect", a)
	}
	mu.Lock()
	hits := targetHits
	mu.Unlock()
	if hits != 1 { // the direct hook, not the redirect
		t.Errorf("target hits after the first push: %d, want 1 (redirects are not followed)", hits)
	}

	// Restart without the allow list: registration refuses internal
	// targets, and the hook registered before is refused at delivery.
	s.Stop(syscall.SIGTERM)
	s2 := &server{e2ekit.StartServer(t, serverOpts{Data: data, Args: []string{"--hook-backoff", "100ms", "--hook-max-backoff", "1s"},
		Env: []string{"LOCKSTEP_HOOK_ALLOW_HOSTS="}})}
	for _, u := range []string{
		target.URL + "/hook",
		"http://localhost:9/hook",
		"http://169.254.169.254/latest/meta-data/",
		"http://[::ffff:169.254.169.254]/",
		"http://10.0.0.1/", "http://172.16.0.1/", "http://192.168.0.1/", "http://100.64.0.1/",
		"http://[fd00::1]/", "http://[fe80::1]/", "http://[::1]/", "http://[::]/", "http://0.0.0.0/", "http://224.0.0.1/",
		"https://user:pass@ci.example.com/hook",
	} {
		r := s2.Call(t, "POST", "/api/v1/repos/base/hooks", s2.AdminKey, map[string]any{"url": u, "secret": hookSecret}, "")
		e2ekit.WantError(t, r, 400, "invalid_argument")
		if strings.Contains(r.String(), "pass@") {
			t.Errorf("the refusal repeats the URL's password: %s", r)
		}
	}
	s2.push(t, agent.Secret, "ws", tip, map[string]string{"README": "hi\n", "b": "b\n"})
	eventually(t, 60*time.Second, "a refused attempt of the no-longer-allowed hook", func() bool {
		for _, d := range s2.deliveries(t, "base", laterBlocked) {
			for _, h := range d.History {
				if strings.Contains(h.Error, "refused to connect to 127.0.0.1") {
					return true
				}
			}
		}
		return false
	})
	mu.Lock()
	hits = targetHits
	mu.Unlock()
	if hits != 1 {
		t.Errorf("BUG: the internal receiver was reached after the allow list was removed (%d hits)", hits)
	}
}

// TestDataAtRest (issue 9, item 6): the data directory is 0700 and its
// files 0600 (an existing directory is fixed at start, with a log line);
// the hook secret is in neither the SQLite database nor its WAL, and
// deliveries are still signed with it.
func TestDataAtRest(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	os.Chmod(data, 0o755)
	os.WriteFile(filepath.Join(data, "stray.txt"), []byte("x"), 0o644)
	s := startGateServer(t, serverOpts{Data: data, Args: []string{"--log-level", "info"}})
	rcv := newReceiver(t, false, 0)
	s.CreateRepo(t, "base")
	base0 := s.push(t, s.AdminKey, "base", zeroOID, map[string]string{"README": "hi\n"}).Commit
	hookID := s.createHook(t, "base", rcv.srv.URL, []string{"push"})
	agent := s.CreateKey(t, "agent", "agent")
	s.forkTip(t, agent.Secret, "base", "ws")
	s.push(t, agent.Secret, "ws", base0, map[string]string{"README": "hi\n", "x": "x\n"})
	eventually(t, 60*time.Second, "a delivery", func() bool {
		ds := s.deliveries(t, "base", hookID)
		return len(ds) == 1 && ds[0].Status == "succeeded"
	})
	if _, bad := rcv.snapshot(); bad != 0 {
		t.Errorf("%d deliveries with a bad signature", bad)
	}
	files := []string{"lockstep.db", "lockstep.db-wal", "lockstep.db-shm", "admin.key", "secret.key", "stray.txt"}
	for _, f := range files[:2] {
		b, err := os.ReadFile(filepath.Join(data, f))
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(hookSecret)) {
			t.Errorf("BUG: the hook secret is in plaintext in %s", f)
		}
	}
	st, err := os.Stat(data)
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("data directory mode %v, want 0700", st.Mode().Perm())
	}
	for _, f := range files {
		st, err := os.Stat(filepath.Join(data, f))
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %04o, want 0600", f, st.Mode().Perm())
		}
	}
	for _, want := range []string{"data directory was readable by others", "data file was readable by others"} {
		if !strings.Contains(s.Stderr.String(), want) {
			t.Errorf("no log line %q at start:\n%s", want, s.Stderr)
		}
	}
}

// sigReceiver records the raw headers and body of every delivery.
type sigReceiver struct {
	mu    sync.Mutex
	calls []signedCall
	srv   *httptest.Server
}

type signedCall struct {
	h    http.Header
	body []byte
	at   time.Time
}

func newSigReceiver(t *testing.T) *sigReceiver {
	r := &sigReceiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.calls = append(r.calls, signedCall{req.Header.Clone(), b, time.Now()})
		r.mu.Unlock()
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *sigReceiver) all() []signedCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]signedCall(nil), r.calls...)
}

// TestHookSecretRotation (issue 15): after a rotation with an overlap
// every delivery carries two v1 signatures, one verifying with the old
// secret and one with the new, so a receiver may switch at any moment;
// after the overlap only the new secret signs. The CLI rotates too.
func TestHookSecretRotation(t *testing.T) {
	t.Parallel()
	onBothBackends(t, func(t *testing.T, postgres bool) {
		s := startGateServer(t, serverOpts{Postgres: postgres})
		rcv := newSigReceiver(t)
		s.CreateRepo(t, "base")
		base0 := s.push(t, s.AdminKey, "base", zeroOID, map[string]string{"README": "hi\n"}).Commit
		ci := s.CreateKey(t, "ci", "ci")
		agent := s.CreateKey(t, "agent", "agent")
		c := client.New(s.URL, ci.Secret)
		ctx := t.Context()
		h, err := c.CreateHook(ctx, "base", rcv.srv.URL+"/hook", hookSecret, []string{"push"})
		if err != nil {
			t.Fatal(err)
		}
		s.forkTip(t, agent.Secret, "base", "ws")
		tip := base0
		n := 0
		pushAndWait := func() signedCall {
			t.Helper()
			n++
			tip = s.push(t, agent.Secret, "ws", tip, map[string]string{"README": "hi\n", "n": strings.Repeat("x", n)}).Commit
			eventually(t, 60*time.Second, "a delivery", func() bool { return len(rcv.all()) >= n })
			return rcv.all()[n-1]
		}
		sigCount := func(c signedCall) int { return len(strings.Fields(c.h.Get("webhook-signature"))) }
		verifies := func(c signedCall, secret string) bool {
			_, err := client.VerifyWebhook([]string{secret}, c.h, c.body, time.Now(), 0)
			return err == nil
		}

		first := pushAndWait()
		if sigCount(first) != 1 || !verifies(first, hookSecret) {
			t.Fatalf("before rotation: signature %q", first.h.Get("webhook-signature"))
		}

		// Agents may not rotate; ci may.
		e2ekit.WantError(t, s.Call(t, "POST", "/api/v1/repos/base/hooks/"+h.ID+"/rotate", agent.Secret, map[string]any{}, ""), 403, "permission_denied")
		e2ekit.WantError(t, s.Call(t, "POST", "/api/v1/repos/base/hooks/"+h.ID+"/rotate", ci.Secret, map[string]any{"overlap_seconds": -1}, ""), 400, "invalid_argument")
		rot, err := c.RotateHook(ctx, "base", h.ID, "", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(rot.Secret, "whsec_") || rot.PreviousSecretUntil == nil {
			t.Fatalf("rotation answer: %+v", rot)
		}
		during := pushAndWait()
		if sigCount(during) != 2 || !verifies(during, hookSecret) || !verifies(during, rot.Secret) {
			t.Errorf("during the overlap: %q, want two signatures, one per secret", during.h.Get("webhook-signature"))
		}
		if verifies(during, "whsec_"+strings.Repeat("A", 44)) {
			t.Errorf("a random secret verifies: the check is void")
		}

		// Rotate again through the CLI, with a 1 s overlap: deliveries
		// signed before it ends carry two signatures, after it only the
		// newest secret's.
		var out struct {
			Secret              string    `json:"secret"`
			PreviousSecretUntil time.Time `json:"previous_secret_until"`
		}
		s.cliJSON(t, ci.Secret, &out, "hooks", "rotate", "base", h.ID, "--secret", "third-secret-0123456789", "--overlap", "1s", "--json")
		if out.Secret != "third-secret-0123456789" {
			t.Fatalf("cli rotate: %+v", out)
		}
		for {
			c := pushAndWait()
			w, err := client.VerifyWebhook([]string{out.Secret}, c.h, c.body, time.Now(), 0)
			if err != nil {
				t.Fatalf("a delivery after the CLI rotation does not verify with the new secret: %v", err)
			}
			// webhook-timestamp is whole seconds: at or after the end is
			// certainly past the overlap, a second before it certainly
			// inside; the second in between is not judged.
			ts := w.Timestamp
			if !ts.Before(out.PreviousSecretUntil) {
				if sigCount(c) != 1 || verifies(c, rot.Secret) {
					t.Errorf("after the overlap: %q, want only the newest secret's signature", c.h.Get("webhook-signature"))
				}
				break
			}
			if ts.Add(time.Second).Before(out.PreviousSecretUntil) && (sigCount(c) != 2 || !verifies(c, rot.Secret)) {
				t.Errorf("inside the overlap: %q, want both", c.h.Get("webhook-signature"))
			}
			if n > 200 {
				t.Fatal("the overlap never ended")
			}
		}
		// The legacy header is kept and signs with the current secret.
		last := rcv.all()[n-1]
		if !strings.HasPrefix(last.h.Get("X-Lockstep-Signature"), "sha256=") {
			t.Errorf("X-Lockstep-Signature missing: %v", last.h)
		}
	})
}
