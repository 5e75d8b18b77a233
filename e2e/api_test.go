package e2e

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
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

// httpClient has a timeout so a hung server fails a test instead of the run.
var httpClient = &http.Client{Timeout: 3 * time.Minute}

// response is a finished HTTP exchange.
type response struct {
	Status int
	Header http.Header
	Body   []byte
}

// envelope is DESIGN.md's error body.
type envelope struct {
	Error struct {
		Code    string         `json:"code"`
		Message string         `json:"message"`
		Details map[string]any `json:"details"`
	} `json:"error"`
}

func (r *response) String() string {
	b := string(r.Body)
	if len(b) > 2000 {
		b = b[:2000] + "…"
	}
	return fmt.Sprintf("%d %s", r.Status, b)
}

// decode unmarshals the body into v or fails the test.
func (r *response) decode(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("decode %T from %s: %v", v, r, err)
	}
}

// call sends one request and fails the test on a transport error. body
// is nil, []byte, io.Reader, or any value sent as JSON.
func (s *server) call(t testing.TB, method, path, key string, body any, contentType string) *response {
	t.Helper()
	r, err := s.try(method, path, key, body, contentType)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

// try sends one request; safe from any goroutine. headers are extra
// name, value pairs.
func (s *server) try(method, path, key string, body any, contentType string, headers ...string) (*response, error) {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	case io.Reader:
		rd = b
	default:
		j, err := json.Marshal(b)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(j)
		if contentType == "" {
			contentType = "application/json"
		}
	}
	req, err := http.NewRequest(method, s.URL+path, rd)
	if err != nil {
		return nil, err
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("read body: %w", err)
	}
	return &response{Status: resp.StatusCode, Header: resp.Header, Body: out}, nil
}

// mustJSON sends a request, requires status want and decodes into out
// (when non-nil).
func (s *server) mustJSON(t testing.TB, method, path, key string, body any, want int, out any) *response {
	t.Helper()
	r := s.call(t, method, path, key, body, "")
	if r.Status != want {
		t.Fatalf("%s %s: got %s, want %d", method, path, r, want)
	}
	if out != nil {
		r.decode(t, out)
	}
	return r
}

// wantError asserts a JSON error envelope with status and code, and
// returns it.
func wantError(t testing.TB, r *response, status int, code string) *envelope {
	t.Helper()
	if r.Status != status {
		t.Errorf("status %d, want %d (body %s)", r.Status, status, r)
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("error Content-Type %q, want application/json (body %q)", ct, r.Body)
	}
	var e envelope
	if err := json.Unmarshal(r.Body, &e); err != nil {
		t.Errorf("error body is not the JSON envelope: %q", r.Body)
		return &e
	}
	if e.Error.Code != code {
		t.Errorf("error code %q, want %q (message %q)", e.Error.Code, code, e.Error.Message)
	}
	if e.Error.Message == "" {
		t.Errorf("error envelope without a message: %s", r.Body)
	}
	return &e
}

// key is a created API key.
type key struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Role   string `json:"role"`
	Secret string `json:"secret"`
}

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

// pushResult is the answer of PUT worktree and rollback.
type pushResult struct {
	Commit         string `json:"commit"`
	Tree           string `json:"tree"`
	Parent         string `json:"parent"`
	Branch         string `json:"branch"`
	Changed        bool   `json:"changed"`
	ObjectsWritten int    `json:"objects_written"`
	BytesWritten   int64  `json:"bytes_written"`
}

// pushQuery builds the worktree query string.
func pushQuery(branch, expect string, extra ...string) string {
	q := url.Values{}
	if branch != "" {
		q.Set("branch", branch)
	}
	if expect != "" {
		q.Set("expect_oid", expect)
	}
	for i := 0; i+1 < len(extra); i += 2 {
		q.Set(extra[i], extra[i+1])
	}
	if len(q) == 0 {
		return ""
	}
	return "?" + q.Encode()
}

// pushRaw uploads a tar to a repository's worktree.
func (s *server) pushRaw(t testing.TB, key, repo, query string, tarball []byte) *response {
	t.Helper()
	return s.call(t, "PUT", "/api/v1/repos/"+repo+"/worktree"+query, key, tarball, "application/x-tar")
}

// push uploads files to branch main of repo with expect_oid and requires
// a new commit.
func (s *server) push(t testing.TB, key, repo, expect string, files map[string]string) pushResult {
	t.Helper()
	r := s.pushRaw(t, key, repo, pushQuery("", expect), tarOf(t, files))
	if r.Status != http.StatusCreated {
		t.Fatalf("push to %s (expect %q): %s", repo, expect, r)
	}
	var p pushResult
	r.decode(t, &p)
	if p.Commit == "" || !p.Changed {
		t.Fatalf("push to %s: no new commit: %s", repo, r)
	}
	return p
}

type ref struct {
	Name string `json:"name"`
	OID  string `json:"oid"`
}

// refs returns a repository's refs as name → oid.
func (s *server) refs(t testing.TB, key, repo string) map[string]string {
	t.Helper()
	var out struct {
		Refs []ref `json:"refs"`
	}
	s.mustJSON(t, "GET", "/api/v1/repos/"+repo+"/refs", key, nil, http.StatusOK, &out)
	m := map[string]string{}
	for _, r := range out.Refs {
		m[r.Name] = r.OID
	}
	return m
}

// head returns refs/heads/main of repo ("" when absent).
func (s *server) head(t testing.TB, repo string) string {
	t.Helper()
	return s.refs(t, s.AdminKey, repo)["refs/heads/main"]
}

type commit struct {
	Commit  string   `json:"commit"`
	Tree    string   `json:"tree"`
	Parents []string `json:"parents"`
	Message string   `json:"message"`
}

func (s *server) commits(t testing.TB, repo, ref string, limit int) []commit {
	t.Helper()
	var out struct {
		Commits []commit `json:"commits"`
	}
	q := url.Values{"limit": {fmt.Sprint(limit)}}
	if ref != "" {
		q.Set("ref", ref)
	}
	s.mustJSON(t, "GET", "/api/v1/repos/"+repo+"/commits?"+q.Encode(), s.AdminKey, nil, http.StatusOK, &out)
	return out.Commits
}

func (s *server) commit(t testing.TB, repo, rev string) commit {
	t.Helper()
	var c commit
	s.mustJSON(t, "GET", "/api/v1/repos/"+repo+"/commits/"+rev, s.AdminKey, nil, http.StatusOK, &c)
	return c
}

// blob returns a file's content at rev.
func (s *server) blob(t testing.TB, repo, rev, path string) string {
	t.Helper()
	r := s.call(t, "GET", "/api/v1/repos/"+repo+"/blob/"+rev+"/"+path, s.AdminKey, nil, "")
	if r.Status != http.StatusOK {
		t.Fatalf("blob %s@%s:%s: %s", repo, rev, path, r)
	}
	return string(r.Body)
}

type opEntry struct {
	Seq     int64          `json:"seq"`
	Op      string         `json:"op"`
	Result  string         `json:"result"`
	Repo    string         `json:"repo"`
	KeyName string         `json:"key_name"`
	TraceID string         `json:"trace_id"`
	Refs    []refMove      `json:"refs"`
	Details map[string]any `json:"details"`
}

type refMove struct {
	Repo string `json:"repo"`
	Ref  string `json:"ref"`
	Old  string `json:"old"`
	New  string `json:"new"`
}

// oplog returns every entry matching the query (paging through).
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
		if page.NextAfter == 0 || len(page.Entries) == 0 {
			return all
		}
		after = page.NextAfter
	}
}

type verifyResult struct {
	OK       bool   `json:"ok"`
	Entries  int64  `json:"entries"`
	FirstBad *int64 `json:"first_bad"`
	Reason   string `json:"reason"`
}

func (s *server) verify(t testing.TB) verifyResult {
	t.Helper()
	var v verifyResult
	s.mustJSON(t, "GET", "/api/v1/oplog/verify", s.AdminKey, nil, http.StatusOK, &v)
	return v
}

// entry is one tar member for tarEntries.
type entry struct {
	Name     string
	Body     string
	Mode     int64
	Type     byte // tar.TypeReg by default
	Linkname string
}

// tarOf builds an uncompressed tar of regular files (0644), sorted by name.
func tarOf(t testing.TB, files map[string]string) []byte {
	t.Helper()
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	es := make([]entry, len(names))
	for i, n := range names {
		es[i] = entry{Name: n, Body: files[n]}
	}
	return tarEntries(t, es...)
}

// tarEntries builds a tar from explicit members.
func tarEntries(t testing.TB, es ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range es {
		h := &tar.Header{Name: e.Name, Mode: e.Mode, Typeflag: e.Type, Linkname: e.Linkname, Format: tar.FormatPAX}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Mode == 0 {
			h.Mode = 0o644
			if h.Typeflag == tar.TypeDir {
				h.Mode = 0o755
			}
		}
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.Body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatalf("tar header %q: %v", e.Name, err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := io.WriteString(tw, e.Body); err != nil {
				t.Fatalf("tar body: %v", err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatalf("tar close: %v", err)
	}
	return buf.Bytes()
}

// untar reads a tar into path → entry (regular files, symlinks).
func untar(t testing.TB, b []byte) map[string]entry {
	t.Helper()
	out := map[string]entry{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("read tar: %v", err)
		}
		if h.Typeflag == tar.TypeDir {
			continue
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatalf("read tar %s: %v", h.Name, err)
		}
		out[strings.TrimPrefix(h.Name, "./")] = entry{Name: h.Name, Body: string(body), Mode: h.Mode, Type: h.Typeflag, Linkname: h.Linkname}
	}
}

// cliResult is one run of the lockstep CLI.
type cliResult struct {
	Stdout, Stderr string
	Code           int
}

func (r cliResult) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.Code, r.Stdout, r.Stderr)
}

// cli runs the lockstep binary as a client of s (LOCKSTEP_URL,
// LOCKSTEP_KEY) in dir.
func (s *server) cli(t testing.TB, key, dir string, args ...string) cliResult {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Dir = dir
	cmd.Env = append(cleanEnv(), "LOCKSTEP_URL="+s.URL, "LOCKSTEP_KEY="+key)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("run lockstep %v: %v", args, err)
		}
		code = ee.ExitCode()
	}
	return cliResult{Stdout: out.String(), Stderr: errb.String(), Code: code}
}
