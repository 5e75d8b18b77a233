package e2e

import (
	"archive/tar"
	"bytes"
	"database/sql"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep/internal/e2ekit"
	"github.com/lockstep-hq/lockstep/internal/testenv"

	_ "github.com/jackc/pgx/v5/stdlib" // "pgx" driver: tamper with Postgres rows
	_ "modernc.org/sqlite"             // "sqlite" driver: tamper with the SQLite file
)

// backends are the two metadata stores the same binary runs on.
var backends = []struct {
	name     string
	postgres bool
}{{"sqlite", false}, {"postgres", true}}

// TestZeroConfigStart: no configuration at all gives a working server with
// an admin key file that only its owner can read, and the secret is never
// printed.
func TestZeroConfigStart(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOpts{})

	path := filepath.Join(s.Data, "admin.key")
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("admin.key mode %v, want 0600", st.Mode().Perm())
	}
	if !strings.HasPrefix(s.AdminKey, "lsk_") {
		t.Errorf("admin.key holds %q…, want an lsk_ key", s.AdminKey[:min(6, len(s.AdminKey))])
	}
	if out := s.Stdout.String(); !strings.Contains(out, path) {
		t.Errorf("stdout does not name the key file %s:\n%s", path, out)
	}
	if strings.Contains(s.Stdout.String(), s.AdminKey) || strings.Contains(s.Stderr.String(), s.AdminKey) {
		t.Errorf("the admin secret was printed")
	}
	if _, err := os.Stat(filepath.Join(s.Data, "lockstep.db")); err != nil {
		t.Errorf("no embedded SQLite metadata file: %v", err)
	}

	for _, p := range []string{"/healthz", "/readyz"} {
		r := s.Call(t, "GET", p, "", nil, "")
		if r.Status != http.StatusOK {
			t.Errorf("GET %s: %s", p, r)
		}
	}
	var ready struct {
		Ready  bool              `json:"ready"`
		Checks map[string]string `json:"checks"`
	}
	s.MustJSON(t, "GET", "/readyz", "", nil, http.StatusOK, &ready)
	if !ready.Ready || ready.Checks["store"] != "ok" {
		t.Errorf("readyz: %+v", ready)
	}
	// The admin key works.
	var who struct {
		Role string `json:"role"`
	}
	s.MustJSON(t, "GET", "/api/v1/whoami", s.AdminKey, nil, http.StatusOK, &who)
	if who.Role != "admin" {
		t.Errorf("whoami role %q, want admin", who.Role)
	}
	m := s.Call(t, "GET", "/metrics", "", nil, "")
	if m.Status != http.StatusOK || !strings.Contains(string(m.Body), "lockstep_http_requests_total") {
		t.Errorf("/metrics lacks lockstep_http_requests_total: %d\n%.2000s", m.Status, m.Body)
	}
	if !strings.Contains(string(m.Body), `route="/api/v1/whoami"`) {
		t.Errorf("/metrics does not label requests by route")
	}
	if strings.Contains(string(m.Body), s.AdminKey) {
		t.Errorf("/metrics leaks the admin secret")
	}
}

// TestRestartKeepsKeysAndOplog runs the same binary on SQLite and on
// Postgres: keys, revocations and the operations log survive a restart.
func TestRestartKeepsKeysAndOplog(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			s := startServer(t, serverOpts{Postgres: b.postgres})
			if b.postgres {
				if _, err := os.Stat(filepath.Join(s.Data, "lockstep.db")); err == nil {
					t.Errorf("with LOCKSTEP_DATABASE_URL the server still created an SQLite file")
				}
			}
			keep := s.CreateKey(t, "agent-keep", "agent")
			gone := s.CreateKey(t, "agent-gone", "agent")
			r := s.Call(t, "DELETE", "/api/v1/keys/"+gone.ID, s.AdminKey, nil, "")
			if r.Status != http.StatusNoContent {
				t.Fatalf("revoke: %s", r)
			}
			s.CreateRepo(t, "persist")
			p := s.Push(t, s.AdminKey, "persist", "", map[string]string{"a.txt": "a\n"})
			if code := s.Stop(syscall.SIGTERM); code != 0 {
				t.Fatalf("SIGTERM exit status %d\n%s", code, s.Stderr)
			}

			// `lockstep migrate` on the stopped data finds the schema current.
			mig := exec.Command(e2ekit.Binary, "migrate", "--data", s.Data)
			mig.Env = e2ekit.CleanEnv()
			if s.DBURL != "" {
				mig.Env = append(mig.Env, "LOCKSTEP_DATABASE_URL="+s.DBURL)
			}
			if out, err := mig.CombinedOutput(); err != nil || !strings.Contains(string(out), "metadata schema ("+b.name+") at version") {
				t.Errorf("lockstep migrate: %v\n%s", err, out)
			}

			s2 := s.restart(t)
			if s2.AdminKey != s.AdminKey {
				t.Errorf("admin.key was rewritten on restart")
			}
			if strings.Contains(s2.Stdout.String(), "created the first admin key") {
				t.Errorf("restart bootstrapped a second admin key:\n%s", s2.Stdout)
			}
			s2.MustJSON(t, "GET", "/api/v1/whoami", keep.Secret, nil, http.StatusOK, nil)
			e2ekit.WantError(t, s2.Call(t, "GET", "/api/v1/whoami", gone.Secret, nil, ""), http.StatusUnauthorized, "unauthenticated")

			var keys struct {
				Keys []struct {
					ID        string  `json:"id"`
					Name      string  `json:"name"`
					RevokedAt *string `json:"revoked_at"`
				} `json:"keys"`
			}
			s2.MustJSON(t, "GET", "/api/v1/keys", s2.AdminKey, nil, http.StatusOK, &keys)
			seen := map[string]bool{}
			for _, k := range keys.Keys {
				seen[k.Name] = true
				if k.Name == "agent-gone" && k.RevokedAt == nil {
					t.Errorf("revoked key lost its revocation across the restart")
				}
				if k.Name == "agent-keep" && k.RevokedAt != nil {
					t.Errorf("agent-keep shows as revoked")
				}
			}
			for _, n := range []string{"admin", "agent-keep", "agent-gone"} {
				if !seen[n] {
					t.Errorf("key %s missing after restart (have %v)", n, seen)
				}
			}
			if got := s2.Head(t, "persist"); got != p.Commit {
				t.Errorf("persist main after restart = %s, want %s", got, p.Commit)
			}

			v := s2.Verify(t)
			if !v.OK || v.FirstBad != nil {
				t.Errorf("oplog verify after restart: %+v", v)
			}
			ops := s2.Oplog(t, nil)
			if int64(len(ops)) != v.Entries {
				t.Errorf("oplog lists %d entries, verify counted %d", len(ops), v.Entries)
			}
			want := []string{"key.create", "key.create", "key.create", "key.revoke", "repo.create", "push"}
			if len(ops) < len(want) {
				t.Fatalf("oplog has %d entries, want at least %d: %+v", len(ops), len(want), ops)
			}
			for i, op := range want {
				if ops[i].Op != op || ops[i].Seq != int64(i+1) {
					t.Errorf("oplog entry %d = seq %d %s, want seq %d %s", i, ops[i].Seq, ops[i].Op, i+1, op)
				}
			}
			if ops[3].Details["key_id"] != gone.ID {
				t.Errorf("key.revoke entry names %v, want %s", ops[3].Details["key_id"], gone.ID)
			}
			// Ctrl-C stops it as cleanly as SIGTERM.
			if code := s2.Stop(syscall.SIGINT); code != 0 {
				t.Errorf("SIGINT exit status %d\n%s", code, s2.Stderr)
			}
		})
	}
}

// TestAuthAndErrorEnvelopes: every refusal is the JSON envelope with the
// contract's status and code, never gin's plain text.
func TestAuthAndErrorEnvelopes(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOpts{Args: []string{"--max-json-bytes", "256"}})
	agent := s.CreateKey(t, "agent-1", "agent")
	revoked := s.CreateKey(t, "agent-2", "agent")
	if r := s.Call(t, "DELETE", "/api/v1/keys/"+revoked.ID, s.AdminKey, nil, ""); r.Status != http.StatusNoContent {
		t.Fatalf("revoke: %s", r)
	}
	// A forged secret has a real key's prefix and a wrong last character.
	last := s.AdminKey[len(s.AdminKey)-1]
	flip := "A"
	if last == 'A' {
		flip = "B"
	}
	forged := s.AdminKey[:len(s.AdminKey)-1] + flip

	big := `{"name":"` + strings.Repeat("x", 400) + `","role":"agent"}`
	cases := []struct {
		name        string
		method      string
		path        string
		key         string
		body        string
		contentType string
		status      int
		code        string
	}{
		{"no key", "GET", "/api/v1/repos", "", "", "", 401, "unauthenticated"},
		{"unknown key", "GET", "/api/v1/repos", "lsk_deadbeef_notarealsecretatall", "", "", 401, "unauthenticated"},
		{"garbage key", "GET", "/api/v1/repos", "hello", "", "", 401, "unauthenticated"},
		{"forged secret", "GET", "/api/v1/repos", forged, "", "", 401, "unauthenticated"},
		{"revoked key", "GET", "/api/v1/repos", revoked.Secret, "", "", 401, "unauthenticated"},
		{"revoked key on git", "GET", "/git/x.git/info/refs?service=git-upload-pack", revoked.Secret, "", "", 401, "unauthenticated"},
		{"agent creates key", "POST", "/api/v1/keys", agent.Secret, `{"name":"x","role":"admin"}`, "application/json", 403, "permission_denied"},
		{"agent lists keys", "GET", "/api/v1/keys", agent.Secret, "", "", 403, "permission_denied"},
		{"agent creates base repo", "POST", "/api/v1/repos", agent.Secret, `{"name":"r"}`, "application/json", 403, "permission_denied"},
		{"malformed JSON", "POST", "/api/v1/keys", s.AdminKey, `{"name":`, "application/json", 400, "invalid_argument"},
		{"not an object", "POST", "/api/v1/keys", s.AdminKey, `[1,2]`, "application/json", 400, "invalid_argument"},
		{"wrong field type", "POST", "/api/v1/keys", s.AdminKey, `{"name":5,"role":"agent"}`, "application/json", 400, "invalid_argument"},
		{"unknown field", "POST", "/api/v1/keys", s.AdminKey, `{"name":"x","role":"agent","bogus":1}`, "application/json", 400, "invalid_argument"},
		{"trailing data", "POST", "/api/v1/keys", s.AdminKey, `{"name":"x","role":"agent"}{}`, "application/json", 400, "invalid_argument"},
		{"empty body", "POST", "/api/v1/keys", s.AdminKey, "", "application/json", 400, "invalid_argument"},
		{"wrong content type", "POST", "/api/v1/keys", s.AdminKey, `{"name":"x","role":"agent"}`, "text/plain", 400, "invalid_argument"},
		{"oversized JSON", "POST", "/api/v1/keys", s.AdminKey, big, "application/json", 413, "too_large"},
		{"bad role", "POST", "/api/v1/keys", s.AdminKey, `{"name":"x","role":"root"}`, "application/json", 400, "invalid_argument"},
		{"bad name", "POST", "/api/v1/repos", s.AdminKey, `{"name":"Bad Name"}`, "application/json", 400, "invalid_argument"},
		{"unknown route", "GET", "/api/v1/nope", s.AdminKey, "", "", 404, "not_found"},
		{"unknown top-level route", "GET", "/nope", "", "", "", 404, "not_found"},
		{"unknown repo", "GET", "/api/v1/repos/ghost", s.AdminKey, "", "", 404, "not_found"},
		{"wrong method", "PATCH", "/api/v1/keys", s.AdminKey, "", "", 405, "invalid_argument"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var body any
			if c.body != "" {
				body = []byte(c.body)
			}
			r := s.Call(t, c.method, c.path, c.key, body, c.contentType)
			e2ekit.WantError(t, r, c.status, c.code)
			if c.status == 401 && strings.HasPrefix(c.path, "/git/") && r.Header.Get("WWW-Authenticate") == "" {
				t.Errorf("401 on /git without WWW-Authenticate: git would not send credentials")
			}
		})
	}
	// None of the refused key creations created a key.
	var keys struct {
		Keys []e2ekit.Key `json:"keys"`
	}
	s.MustJSON(t, "GET", "/api/v1/keys", s.AdminKey, nil, http.StatusOK, &keys)
	if len(keys.Keys) != 3 {
		t.Errorf("%d keys after refused creations, want 3 (admin, agent-1, agent-2): %+v", len(keys.Keys), keys.Keys)
	}
}

// TestOplogTamperDetected edits one stored entry behind the server's back;
// verify must name exactly that entry.
func TestOplogTamperDetected(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			s := startServer(t, serverOpts{Postgres: b.postgres})
			s.CreateKey(t, "agent-1", "agent")
			s.CreateRepo(t, "tamper")
			p1 := s.Push(t, s.AdminKey, "tamper", "", map[string]string{"a": "1"})
			s.Push(t, s.AdminKey, "tamper", p1.Commit, map[string]string{"a": "2"})
			v := s.Verify(t)
			if !v.OK || v.Entries < 5 {
				t.Fatalf("verify before tampering: %+v", v)
			}
			ops := s.Oplog(t, nil)
			var target int64
			for _, e := range ops {
				if e.Op == "push" {
					target = e.Seq // the first push: not the last entry
					break
				}
			}
			if target == 0 || target == v.Entries {
				t.Fatalf("no push entry in the middle of the log: %+v", ops)
			}

			var db *sql.DB
			var err error
			if b.postgres {
				db, err = sql.Open("pgx", s.DBURL)
			} else {
				db, err = sql.Open("sqlite", "file:"+filepath.Join(s.Data, "lockstep.db")+"?_pragma=busy_timeout(10000)")
			}
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			res, err := db.Exec(`UPDATE oplog SET key_name = 'mallory' WHERE seq = $1`, target)
			if err != nil {
				t.Fatalf("tamper: %v", err)
			}
			if n, _ := res.RowsAffected(); n != 1 {
				t.Fatalf("tamper touched %d rows", n)
			}

			v = s.Verify(t)
			if v.OK {
				t.Fatalf("verify after editing entry %d says ok: %+v", target, v)
			}
			if v.FirstBad == nil || *v.FirstBad != target {
				t.Errorf("verify first_bad = %v, want %d (%s)", v.FirstBad, target, v.Reason)
			}
			// The CLI agrees and exits non-zero.
			cr := s.CLI(t, s.AdminKey, "", "oplog", "verify")
			if cr.Code == 0 || !strings.Contains(cr.Stdout, "BROKEN") {
				t.Errorf("lockstep oplog verify: %s", cr)
			}
		})
	}
}

// TestGracefulShutdown: SIGTERM while an upload is in flight lets it finish,
// then the process exits 0 and the commit is durable.
func TestGracefulShutdown(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOpts{Args: []string{"--log-level", "info"}})
	s.CreateRepo(t, "slow")

	// A tar with one 1 MiB file, sent in two halves.
	content := bytes.Repeat([]byte("0123456789abcdef"), 1<<16)
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	tw.WriteHeader(&tar.Header{Name: "big.bin", Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg})
	tw.Write(content)
	tw.Close()
	whole := tb.Bytes()
	half := len(whole) / 2

	pr, pw := io.Pipe()
	req, err := http.NewRequest("PUT", s.URL+"/api/v1/repos/slow/worktree?expect_oid="+strings.Repeat("0", 40), pr)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+s.AdminKey)
	req.Header.Set("Content-Type", "application/x-tar")
	req.ContentLength = int64(len(whole))
	// With 100-continue the client sends no body byte before the handler
	// asks for it: once the first write returns, the request is in the
	// handler, so the SIGTERM below cannot race the accept.
	req.Header.Set("Expect", "100-continue")
	slowClient := &http.Client{Transport: &http.Transport{ExpectContinueTimeout: 2 * time.Minute}}
	type result struct {
		status int
		body   []byte
		err    error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := slowClient.Do(req)
		if err != nil {
			done <- result{err: err}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		done <- result{status: resp.StatusCode, body: b}
	}()
	if _, err := pw.Write(whole[:half]); err != nil {
		t.Fatal(err)
	}
	if err := s.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(s.Stderr.String(), "shutting down") {
		if !s.Running() || time.Now().After(deadline) {
			t.Fatalf("server did not start its graceful shutdown (running=%v):\n%s", s.Running(), s.Stderr)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !s.Running() {
		t.Fatalf("server exited with an upload in flight:\n%s", s.Stderr)
	}
	// New connections are refused while the upload finishes.
	if resp, err := http.Get(s.URL + "/healthz"); err == nil {
		resp.Body.Close()
		t.Logf("note: a new connection was still accepted during shutdown (status %d)", resp.StatusCode)
	}
	if _, err := pw.Write(whole[half:]); err != nil {
		t.Fatalf("rest of the upload: %v", err)
	}
	pw.Close()
	res := <-done
	if res.err != nil {
		t.Fatalf("in-flight upload failed during shutdown: %v", res.err)
	}
	if res.status != http.StatusCreated {
		t.Fatalf("in-flight upload: %d %s", res.status, res.body)
	}
	var p e2ekit.PushResult
	(&e2ekit.Response{Status: res.status, Body: res.body}).Decode(t, &p)
	// The first SIGTERM is still in effect: the process exits by itself.
	if code := s.Wait(); code != 0 {
		t.Fatalf("exit status %d after graceful shutdown\n%s", code, s.Stderr)
	}
	s2 := s.restart(t)
	if got := s2.Head(t, "slow"); got != p.Commit {
		t.Errorf("after restart main = %s, want the upload's commit %s", got, p.Commit)
	}
	if got := s2.Blob(t, "slow", "main", "big.bin"); got != string(content) {
		t.Errorf("big.bin after restart: %d bytes, want %d", len(got), len(content))
	}
}

// TestReadinessProductionShape runs on Postgres and Redis: /readyz checks
// both; when the metadata database disappears the server is alive but not
// ready; an unreachable Redis at start-up is a clear start-up error.
func TestReadinessProductionShape(t *testing.T) {
	t.Parallel()
	redisURL := testenv.RedisURL(t)
	testenv.MustRedis(t) // fails with instructions when Redis is not running
	s := startServer(t, serverOpts{Postgres: true, Env: []string{"LOCKSTEP_REDIS_URL=" + redisURL}})
	var ready struct {
		Ready  bool              `json:"ready"`
		Checks map[string]string `json:"checks"`
	}
	s.MustJSON(t, "GET", "/readyz", "", nil, http.StatusOK, &ready)
	if !ready.Ready || ready.Checks["store"] != "ok" || ready.Checks["redis"] != "ok" {
		t.Errorf("readyz on Postgres and Redis: %+v", ready)
	}

	u, err := url.Parse(s.DBURL)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := sql.Open("pgx", testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.Exec(`DROP DATABASE "` + strings.TrimPrefix(u.Path, "/") + `" WITH (FORCE)`); err != nil {
		t.Fatalf("drop the metadata database: %v", err)
	}
	r := s.Call(t, "GET", "/readyz", "", nil, "")
	if r.Status != http.StatusServiceUnavailable {
		t.Errorf("readyz without its database: %s", r)
	}
	r.Decode(t, &ready)
	if ready.Ready || ready.Checks["store"] == "ok" || ready.Checks["redis"] != "ok" {
		t.Errorf("readyz without its database: %+v", ready)
	}
	if r := s.Call(t, "GET", "/healthz", "", nil, ""); r.Status != http.StatusOK {
		t.Errorf("healthz (liveness) without the database: %s", r)
	}
	// API calls fail as internal errors, without leaking driver details.
	r = s.Call(t, "GET", "/api/v1/repos", s.AdminKey, nil, "")
	if r.Status < 500 {
		t.Errorf("API call without a database: %s", r)
	}
	if strings.Contains(string(r.Body), "postgres") || strings.Contains(string(r.Body), "SQLSTATE") {
		t.Errorf("internal error leaks driver details: %s", r.Body)
	}

	// Redis configured but unreachable: the server refuses to start.
	cmd := exec.Command(e2ekit.Binary, "serve", "--data", t.TempDir(), "--addr", "127.0.0.1:0")
	cmd.Env = append(e2ekit.CleanEnv(), "LOCKSTEP_REDIS_URL=redis://127.0.0.1:1/0")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "redis") {
		t.Errorf("start with an unreachable Redis: err=%v\n%s", err, out)
	}
}
