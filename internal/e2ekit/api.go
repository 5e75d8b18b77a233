package e2ekit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// HTTPClient has a timeout so a hung server fails a test instead of the run.
var HTTPClient = &http.Client{Timeout: 3 * time.Minute}

// ZeroOID is git's all-zero object id (an absent ref).
const ZeroOID = "0000000000000000000000000000000000000000"

// Response is a finished HTTP exchange.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

func (r *Response) String() string {
	b := string(r.Body)
	if len(b) > 3000 {
		b = b[:3000] + "…"
	}
	return fmt.Sprintf("%d %s", r.Status, b)
}

// Decode unmarshals the body into v or fails the test.
func (r *Response) Decode(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("decode %T from %s: %v", v, r, err)
	}
}

// Envelope is the API's error body (Error in api/openapi.yaml).
type Envelope struct {
	Error struct {
		Code    string         `json:"code"`
		Message string         `json:"message"`
		Details map[string]any `json:"details"`
	} `json:"error"`
}

// Call sends one request and fails the test on a transport error. body
// is nil, []byte, io.Reader, or any value sent as JSON (with
// Content-Type application/json unless contentType says otherwise).
func (s *Server) Call(t testing.TB, method, path, key string, body any, contentType string) *Response {
	t.Helper()
	r, err := s.Try(method, path, key, body, contentType)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

// Try sends one request; safe from any goroutine. headers are extra
// name, value pairs.
func (s *Server) Try(method, path, key string, body any, contentType string, headers ...string) (*Response, error) {
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
	resp, err := HTTPClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("read body: %w", err)
	}
	if p := ValidateResponse(req, resp.StatusCode, resp.Header, out); p != "" && s.t != nil {
		s.t.Errorf("%s", p) // see openapi.go
	}
	return &Response{Status: resp.StatusCode, Header: resp.Header, Body: out}, nil
}

// MustJSON sends a request, requires status want and decodes into out
// (when non-nil).
func (s *Server) MustJSON(t testing.TB, method, path, key string, body any, want int, out any) *Response {
	t.Helper()
	r := s.Call(t, method, path, key, body, "")
	if r.Status != want {
		t.Fatalf("%s %s: got %s, want %d", method, path, r, want)
	}
	if out != nil {
		r.Decode(t, out)
	}
	return r
}

// errorProblems lists how r differs from a JSON error envelope with
// status and code; e is the decoded envelope (zero when undecodable).
func errorProblems(r *Response, status int, code string) (e *Envelope, problems []string) {
	e = &Envelope{}
	if r.Status != status {
		problems = append(problems, fmt.Sprintf("status %d, want %d (body %s)", r.Status, status, r))
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		problems = append(problems, fmt.Sprintf("error Content-Type %q, want application/json (body %q)", ct, r.Body))
	}
	if err := json.Unmarshal(r.Body, e); err != nil {
		return e, append(problems, fmt.Sprintf("error body is not the JSON envelope: %q", r.Body))
	}
	if e.Error.Code != code {
		problems = append(problems, fmt.Sprintf("error code %q, want %q (message %q)", e.Error.Code, code, e.Error.Message))
	}
	if e.Error.Message == "" {
		problems = append(problems, fmt.Sprintf("error envelope without a message: %s", r.Body))
	}
	return e, problems
}

// WantError asserts (t.Errorf, the test goes on) a JSON error envelope
// with status and code, and returns it.
func WantError(t testing.TB, r *Response, status int, code string) *Envelope {
	t.Helper()
	e, problems := errorProblems(r, status, code)
	for _, p := range problems {
		t.Errorf("%s", p)
	}
	return e
}

// RequireError is WantError that stops the test (t.Fatalf) on the first
// difference; what names the request in the message.
func RequireError(t testing.TB, what string, r *Response, status int, code string) *Envelope {
	t.Helper()
	e, problems := errorProblems(r, status, code)
	if len(problems) > 0 {
		t.Fatalf("%s: want %d %s: %s", what, status, code, strings.Join(problems, "; "))
	}
	return e
}

// Key is a created API key.
type Key struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Role   string `json:"role"`
	Secret string `json:"secret"`
}

// CreateKey makes an API key with the admin key.
func (s *Server) CreateKey(t testing.TB, name, role string) Key {
	t.Helper()
	var k Key
	s.MustJSON(t, "POST", "/api/v1/keys", s.AdminKey, map[string]string{"name": name, "role": role}, http.StatusCreated, &k)
	if k.Secret == "" || k.ID == "" {
		t.Fatalf("created key without id or secret: %+v", k)
	}
	return k
}

// CreateRepo creates a repository with the admin key.
func (s *Server) CreateRepo(t testing.TB, name string) {
	t.Helper()
	s.MustJSON(t, "POST", "/api/v1/repos", s.AdminKey, map[string]string{"name": name}, http.StatusCreated, nil)
}

// PushResult is the answer of PUT worktree and rollback.
type PushResult struct {
	Commit         string `json:"commit"`
	Tree           string `json:"tree"`
	Parent         string `json:"parent"`
	Branch         string `json:"branch"`
	Changed        bool   `json:"changed"`
	ObjectsWritten int    `json:"objects_written"`
	BytesWritten   int64  `json:"bytes_written"`
}

// PushQuery builds the worktree query string ("" or "?…"); extra are
// more name, value pairs.
func PushQuery(branch, expect string, extra ...string) string {
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

// PushRaw uploads a tar to a repository's worktree.
func (s *Server) PushRaw(t testing.TB, key, repo, query string, tarball []byte) *Response {
	t.Helper()
	return s.Call(t, "PUT", "/api/v1/repos/"+repo+"/worktree"+query, key, tarball, "application/x-tar")
}

// PushWith uploads files (the whole tree) with a worktree query and
// requires 201 with a new commit.
func (s *Server) PushWith(t testing.TB, key, repo, query string, files map[string]string) PushResult {
	t.Helper()
	r := s.PushRaw(t, key, repo, query, TarOf(t, files))
	if r.Status != http.StatusCreated {
		t.Fatalf("push to %s (%s): %s", repo, query, r)
	}
	var p PushResult
	r.Decode(t, &p)
	if len(p.Commit) != 40 || !p.Changed {
		t.Fatalf("push to %s: no new commit: %s", repo, r)
	}
	return p
}

// Push uploads files to branch main of repo with expect_oid and requires
// a new commit.
func (s *Server) Push(t testing.TB, key, repo, expect string, files map[string]string) PushResult {
	t.Helper()
	return s.PushWith(t, key, repo, PushQuery("", expect), files)
}

// Ref is one entry of GET refs.
type Ref struct {
	Name string `json:"name"`
	OID  string `json:"oid"`
}

// Refs returns a repository's refs as name → oid.
func (s *Server) Refs(t testing.TB, key, repo string) map[string]string {
	t.Helper()
	var out struct {
		Refs []Ref `json:"refs"`
	}
	s.MustJSON(t, "GET", "/api/v1/repos/"+repo+"/refs", key, nil, http.StatusOK, &out)
	m := map[string]string{}
	for _, r := range out.Refs {
		m[r.Name] = r.OID
	}
	return m
}

// Head returns refs/heads/main of repo ("" when absent).
func (s *Server) Head(t testing.TB, repo string) string {
	t.Helper()
	return s.Refs(t, s.AdminKey, repo)["refs/heads/main"]
}

// Commit is one commit of the commits API.
type Commit struct {
	Commit  string   `json:"commit"`
	Tree    string   `json:"tree"`
	Parents []string `json:"parents"`
	Message string   `json:"message"`
}

// Commits lists up to limit commits of repo from ref ("" for the default).
func (s *Server) Commits(t testing.TB, repo, ref string, limit int) []Commit {
	t.Helper()
	var out struct {
		Commits []Commit `json:"commits"`
	}
	q := url.Values{"limit": {fmt.Sprint(limit)}}
	if ref != "" {
		q.Set("ref", ref)
	}
	s.MustJSON(t, "GET", "/api/v1/repos/"+repo+"/commits?"+q.Encode(), s.AdminKey, nil, http.StatusOK, &out)
	return out.Commits
}

// Commit returns one commit of repo.
func (s *Server) Commit(t testing.TB, repo, rev string) Commit {
	t.Helper()
	var c Commit
	s.MustJSON(t, "GET", "/api/v1/repos/"+repo+"/commits/"+rev, s.AdminKey, nil, http.StatusOK, &c)
	return c
}

// Blob returns a file's content at rev, or fails.
func (s *Server) Blob(t testing.TB, repo, rev, path string) string {
	t.Helper()
	r := s.Call(t, "GET", "/api/v1/repos/"+repo+"/blob/"+rev+"/"+path, s.AdminKey, nil, "")
	if r.Status != http.StatusOK {
		t.Fatalf("blob %s@%s:%s: %s", repo, rev, path, r)
	}
	return string(r.Body)
}

// OpEntry is one operations-log entry.
type OpEntry struct {
	Seq     int64          `json:"seq"`
	Op      string         `json:"op"`
	Result  string         `json:"result"`
	Repo    string         `json:"repo"`
	KeyName string         `json:"key_name"`
	TraceID string         `json:"trace_id"`
	Refs    []RefMove      `json:"refs"`
	Objects int            `json:"objects"`
	Bytes   int64          `json:"bytes"`
	Details map[string]any `json:"details"`
}

// RefMove is one ref update of an OpEntry.
type RefMove struct {
	Repo string `json:"repo"`
	Ref  string `json:"ref"`
	Old  string `json:"old"`
	New  string `json:"new"`
}

// Oplog returns every entry matching the query, oldest first (paging
// through).
func (s *Server) Oplog(t testing.TB, query url.Values) []OpEntry {
	t.Helper()
	var all []OpEntry
	after := int64(0)
	for {
		q := url.Values{}
		for k, v := range query {
			q[k] = v
		}
		q.Set("limit", "1000")
		q.Set("after", fmt.Sprint(after))
		var page struct {
			Entries   []OpEntry `json:"entries"`
			NextAfter int64     `json:"next_after"`
		}
		s.MustJSON(t, "GET", "/api/v1/oplog?"+q.Encode(), s.AdminKey, nil, http.StatusOK, &page)
		all = append(all, page.Entries...)
		if page.NextAfter == 0 || len(page.Entries) == 0 {
			return all
		}
		after = page.NextAfter
	}
}

// VerifyResult is the answer of GET oplog/verify.
type VerifyResult struct {
	OK       bool   `json:"ok"`
	Entries  int64  `json:"entries"`
	FirstBad *int64 `json:"first_bad"`
	Reason   string `json:"reason"`
}

// Verify checks the operations log's hash chain.
func (s *Server) Verify(t testing.TB) VerifyResult {
	t.Helper()
	var v VerifyResult
	s.MustJSON(t, "GET", "/api/v1/oplog/verify", s.AdminKey, nil, http.StatusOK, &v)
	return v
}
