package e2egate

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"
)

// httpClient has a timeout so that a hung server fails a test, not the run.
var httpClient = &http.Client{Timeout: 3 * time.Minute}

const zeroOID = "0000000000000000000000000000000000000000"

// response is a finished HTTP exchange.
type response struct {
	Status int
	Body   []byte
}

func (r *response) String() string {
	b := string(r.Body)
	if len(b) > 3000 {
		b = b[:3000] + "…"
	}
	return fmt.Sprintf("%d %s", r.Status, b)
}

func (r *response) decode(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("decode %T from %s: %v", v, r, err)
	}
}

// envelope is DESIGN.md's error body.
type envelope struct {
	Error struct {
		Code    string         `json:"code"`
		Message string         `json:"message"`
		Details map[string]any `json:"details"`
	} `json:"error"`
}

// call sends one request; body is nil, []byte (sent with contentType) or a
// value sent as JSON.
func (s *server) call(t testing.TB, method, path, key string, body any, contentType string) *response {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		rd = bytes.NewReader(j)
		contentType = "application/json"
	}
	req, err := http.NewRequest(method, s.URL+path, rd)
	if err != nil {
		t.Fatalf("request: %v", err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return &response{Status: resp.StatusCode, Body: b}
}

// mustJSON sends a request, requires status want and decodes into out.
func (s *server) mustJSON(t testing.TB, method, path, key string, body any, want int, out any) *response {
	t.Helper()
	r := s.call(t, method, path, key, body, "")
	if r.Status != want {
		t.Fatalf("%s %s: want %d, got %s", method, path, want, r)
	}
	if out != nil {
		r.decode(t, out)
	}
	return r
}

// wantError requires an error envelope with status and code.
func wantError(t testing.TB, what string, r *response, status int, code string) *envelope {
	t.Helper()
	if r.Status != status {
		t.Fatalf("%s: want %d %s, got %s", what, status, code, r)
	}
	var e envelope
	r.decode(t, &e)
	if e.Error.Code != code || e.Error.Message == "" {
		t.Fatalf("%s: want code %q with a message, got %s", what, code, r)
	}
	return &e
}

type key struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Role   string `json:"role"`
	Secret string `json:"secret"`
}

// createKey makes an API key with the admin key and returns its secret.
func (s *server) createKey(t testing.TB, name, role string) key {
	t.Helper()
	var k key
	s.mustJSON(t, "POST", "/api/v1/keys", s.AdminKey, map[string]string{"name": name, "role": role}, http.StatusCreated, &k)
	if k.Secret == "" || k.ID == "" {
		t.Fatalf("created key without id or secret: %+v", k)
	}
	return k
}

func (s *server) createRepo(t testing.TB, name string) {
	t.Helper()
	s.mustJSON(t, "POST", "/api/v1/repos", s.AdminKey, map[string]string{"name": name}, http.StatusCreated, nil)
}

// fork creates workspace name of base with key; returns its base commit.
func (s *server) fork(t testing.TB, key, base, name string) string {
	t.Helper()
	var out struct {
		Name       string `json:"name"`
		ForkOf     string `json:"fork_of"`
		BaseCommit string `json:"base_commit"`
	}
	s.mustJSON(t, "POST", "/api/v1/repos/"+base+"/forks", key, map[string]string{"name": name}, http.StatusCreated, &out)
	if out.Name != name || out.ForkOf != base {
		t.Fatalf("fork %s of %s: %+v", name, base, out)
	}
	return out.BaseCommit
}

type pushResult struct {
	Commit string `json:"commit"`
	Tree   string `json:"tree"`
	Parent string `json:"parent"`
	Branch string `json:"branch"`
}

// pushRaw uploads files (the whole tree) to branch main of repo.
func (s *server) pushRaw(t testing.TB, key, repo, expect string, files map[string]string) *response {
	t.Helper()
	q := url.Values{"expect_oid": {expect}, "message": {"agent push"}}
	return s.call(t, "PUT", "/api/v1/repos/"+repo+"/worktree?"+q.Encode(), key, tarOf(t, files), "application/x-tar")
}

// push uploads files to main of repo with compare-and-swap on expect.
func (s *server) push(t testing.TB, key, repo, expect string, files map[string]string) pushResult {
	t.Helper()
	r := s.pushRaw(t, key, repo, expect, files)
	if r.Status != http.StatusCreated {
		t.Fatalf("push to %s (expect %s): %s", repo, expect, r)
	}
	var p pushResult
	r.decode(t, &p)
	if len(p.Commit) != 40 {
		t.Fatalf("push to %s: no commit: %s", repo, r)
	}
	return p
}

// head returns refs/heads/main of repo ("" when absent).
func (s *server) head(t testing.TB, repo string) string {
	t.Helper()
	var out struct {
		Refs []struct {
			Name string `json:"name"`
			OID  string `json:"oid"`
		} `json:"refs"`
	}
	s.mustJSON(t, "GET", "/api/v1/repos/"+repo+"/refs", s.AdminKey, nil, http.StatusOK, &out)
	for _, r := range out.Refs {
		if r.Name == "refs/heads/main" {
			return r.OID
		}
	}
	return ""
}

type commit struct {
	Commit  string   `json:"commit"`
	Tree    string   `json:"tree"`
	Parents []string `json:"parents"`
	Message string   `json:"message"`
}

func (s *server) commit(t testing.TB, repo, rev string) commit {
	t.Helper()
	var c commit
	s.mustJSON(t, "GET", "/api/v1/repos/"+repo+"/commits/"+rev, s.AdminKey, nil, http.StatusOK, &c)
	return c
}

// blob returns a file at rev, or fails.
func (s *server) blob(t testing.TB, repo, rev, path string) string {
	t.Helper()
	r := s.call(t, "GET", "/api/v1/repos/"+repo+"/blob/"+rev+"/"+path, s.AdminKey, nil, "")
	if r.Status != http.StatusOK {
		t.Fatalf("blob %s@%s:%s: %s", repo, rev, path, r)
	}
	return string(r.Body)
}

// setGate puts a policy on base's default branch with the admin key.
func (s *server) setGate(t testing.TB, repo string, policy map[string]any) {
	t.Helper()
	s.mustJSON(t, "PUT", "/api/v1/repos/"+repo+"/gate", s.AdminKey, policy, http.StatusOK, nil)
}

type check struct {
	Commit  string `json:"commit"`
	Name    string `json:"name"`
	Status  string `json:"status"`
	Summary string `json:"summary"`
	Key     string `json:"key"`
}

type checkSet struct {
	Commit  string  `json:"commit"`
	Checks  []check `json:"checks"`
	History []check `json:"history"`
}

func (s *server) checks(t testing.TB, repo, oid string) checkSet {
	t.Helper()
	var cs checkSet
	s.mustJSON(t, "GET", "/api/v1/repos/"+repo+"/commits/"+oid+"/checks", s.AdminKey, nil, http.StatusOK, &cs)
	return cs
}

func (s *server) postCheck(t testing.TB, key, repo, oid, name, status string) {
	t.Helper()
	s.mustJSON(t, "POST", "/api/v1/repos/"+repo+"/commits/"+oid+"/checks", key,
		map[string]string{"name": name, "status": status, "summary": "posted by the test"}, http.StatusCreated, nil)
}

// waitCheck polls until check name of oid has a final status (not
// pending) and returns it.
func (s *server) waitCheck(t testing.TB, repo, oid, name string, timeout time.Duration) check {
	t.Helper()
	var last checkSet
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		last = s.checks(t, repo, oid)
		for _, c := range last.Checks {
			if c.Name == name && c.Status != "pending" {
				return c
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("check %q of %s@%s has no final result after %s: %+v", name, repo, oid, timeout, last)
	return check{}
}

type reason struct {
	Rule    string `json:"rule"`
	Message string `json:"message"`
	Path    string `json:"path"`
}

// promoteRefused requires a 412 gate_failed and returns its reasons.
func (s *server) promoteRefused(t testing.TB, key, ws string, body any) []reason {
	t.Helper()
	r := s.call(t, "POST", "/api/v1/repos/"+ws+"/promote", key, body, "")
	wantError(t, "promote "+ws, r, http.StatusPreconditionFailed, "gate_failed")
	var e struct {
		Error struct {
			Details struct {
				Reasons []reason `json:"reasons"`
				Commit  string   `json:"commit"`
			} `json:"details"`
		} `json:"error"`
	}
	r.decode(t, &e)
	if len(e.Error.Details.Reasons) == 0 {
		t.Fatalf("promote %s: gate_failed without details.reasons: %s", ws, r)
	}
	return e.Error.Details.Reasons
}

type promoteResult struct {
	Commit      string `json:"commit"`
	FastForward bool   `json:"fast_forward"`
	Clean       bool   `json:"clean"`
	Into        string `json:"into"`
	Workspace   string `json:"workspace"`
}

func (s *server) promote(t testing.TB, key, ws string) promoteResult {
	t.Helper()
	var res promoteResult
	s.mustJSON(t, "POST", "/api/v1/repos/"+ws+"/promote", key, map[string]any{}, http.StatusOK, &res)
	if len(res.Commit) != 40 {
		t.Fatalf("promote %s: no landed commit: %+v", ws, res)
	}
	return res
}

// rules returns the sorted rule names of reasons.
func rules(rs []reason) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Rule)
	}
	sort.Strings(out)
	return out
}

type opEntry struct {
	Seq     int64          `json:"seq"`
	Op      string         `json:"op"`
	Result  string         `json:"result"`
	Repo    string         `json:"repo"`
	KeyName string         `json:"key_name"`
	Refs    []refMove      `json:"refs"`
	Details map[string]any `json:"details"`
}

type refMove struct {
	Repo string `json:"repo"`
	Ref  string `json:"ref"`
	Old  string `json:"old"`
	New  string `json:"new"`
}

// oplog returns every entry matching query, oldest first (paging).
func (s *server) oplog(t testing.TB, query url.Values) []opEntry {
	t.Helper()
	var all []opEntry
	after := int64(0)
	for {
		q := url.Values{}
		for k, v := range query {
			q[k] = v
		}
		q.Set("limit", "1000")
		q.Set("after", fmt.Sprint(after))
		var page struct {
			Entries   []opEntry `json:"entries"`
			NextAfter int64     `json:"next_after"`
		}
		s.mustJSON(t, "GET", "/api/v1/oplog?"+q.Encode(), s.AdminKey, nil, http.StatusOK, &page)
		all = append(all, page.Entries...)
		if page.NextAfter == 0 {
			return all
		}
		after = page.NextAfter
	}
}

// tarOf builds an uncompressed tar of files (path → content).
func tarOf(t testing.TB, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := tw.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Size: int64(len(files[n])), Typeflag: tar.TypeReg}); err != nil {
			t.Fatalf("tar: %v", err)
		}
		tw.Write([]byte(files[n]))
	}
	if err := tw.Close(); err != nil {
		t.Fatalf("tar: %v", err)
	}
	return buf.Bytes()
}

// with returns a copy of files with changes applied ("" deletes a path).
func with(files map[string]string, changes map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range files {
		out[k] = v
	}
	for k, v := range changes {
		if v == "" {
			delete(out, k)
		} else {
			out[k] = v
		}
	}
	return out
}

// cliResult is one run of the lockstep CLI.
type cliResult struct {
	Stdout, Stderr string
	Code           int
}

func (r cliResult) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.Code, r.Stdout, r.Stderr)
}

// cli runs the lockstep binary as a client of s (LOCKSTEP_URL, LOCKSTEP_KEY).
func (s *server) cli(t testing.TB, key string, args ...string) cliResult {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(cleanEnv(), "LOCKSTEP_URL="+s.URL, "LOCKSTEP_KEY="+key)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return cliResult{Stdout: out.String(), Stderr: errb.String(), Code: exitCode(t, err)}
}

// cliJSON runs a CLI command that must succeed and decodes its stdout.
func (s *server) cliJSON(t testing.TB, key string, out any, args ...string) {
	t.Helper()
	r := s.cli(t, key, args...)
	if r.Code != 0 {
		t.Fatalf("lockstep %s: %s", strings.Join(args, " "), r)
	}
	if err := json.Unmarshal([]byte(r.Stdout), out); err != nil {
		t.Fatalf("lockstep %s: stdout is not JSON %T: %v\n%s", strings.Join(args, " "), out, err, r)
	}
}

// git runs the git CLI in dir with a clean environment.
func git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(cleanEnv(), "GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0",
		"GIT_AUTHOR_NAME=test", "GIT_AUTHOR_EMAIL=test@example.com", "GIT_COMMITTER_NAME=test", "GIT_COMMITTER_EMAIL=test@example.com")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// gitTry runs git and returns its output and error (for expected failures).
func gitTry(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(cleanEnv(), "GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// gitURL is the smart-HTTP URL of repo with key as the basic-auth password.
func (s *server) gitURL(repo, key string) string {
	u, _ := url.Parse(s.URL + "/git/" + repo + ".git")
	u.User = url.UserPassword("x", key)
	return u.String()
}

// eventually polls f until it returns true or the deadline passes.
func eventually(t testing.TB, timeout time.Duration, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
