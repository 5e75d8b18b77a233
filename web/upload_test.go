package web_test

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/auth"
	"github.com/lockstep-hq/lockstep/gate"
	"github.com/lockstep-hq/lockstep/gitstore"
	"github.com/lockstep-hq/lockstep/repositories"
	"github.com/lockstep-hq/lockstep/sqlstore"
	"github.com/lockstep-hq/lockstep/telemetry"
	"github.com/lockstep-hq/lockstep/web"
	"github.com/lockstep-hq/lockstep/workspaces"
)

func uploadServer(t *testing.T, maxUploads int) *fixture {
	f, _ := uploadServerDir(t, maxUploads)
	return f
}

// uploadServerDir also returns the data directory.
func uploadServerDir(t *testing.T, maxUploads int) (*fixture, string) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	db, err := sqlstore.Open(ctx, filepath.Join(dir, "m.db"), sqlstore.Options{Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	keys := auth.New(db, nil)
	_, admin, _ := keys.Create(ctx, auth.System, "admin", lockstep.RoleAdmin)
	m := telemetry.NewMetrics()
	repos := repositories.New(repositories.Config{Objects: gitstore.Local{}, DataDir: dir}, db, nil, m, nil)
	t.Cleanup(func() { repos.Close() })
	s := &web.Server{Config: web.Config{MaxConcurrentUploads: maxUploads}, Store: db, Keys: keys, Metrics: m, Repos: repos, Workspaces: workspaces.New(db, repos, nil, nil, m, nil),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Gate: gate.New(gate.Config{}, db, repos, nil, m, nil)}
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return &fixture{srv: srv, admin: admin}, dir
}

func oneFileTar(t *testing.T, name, body string) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body))}); err != nil {
		t.Fatal(err)
	}
	tw.Write([]byte(body))
	tw.Close()
	return buf.Bytes()
}

// Beyond --max-concurrent-uploads an upload is answered 503 unavailable
// with Retry-After at once; the slot is free again when the upload ends.
func TestConcurrentUploadsBounded(t *testing.T) {
	f := uploadServer(t, 1)
	if code, m, _ := f.do(t, "POST", "/api/v1/repos", f.admin, `{"name":"up"}`); code != http.StatusCreated {
		t.Fatalf("create: %d %v", code, m)
	}
	// Upload 1 holds the only slot: its body arrives slowly.
	tarBytes := oneFileTar(t, "a.txt", "hello\n")
	pw, first := slowUpload(t, f, f.admin, "/api/v1/repos/up/worktree?branch=main&expect_oid="+lockstep.ZeroOID, tarBytes[:512])
	// Wait (not a timing assertion) until the first upload holds the slot,
	// seen on /metrics (a probe upload would compete for the slot: one
	// that arrives first makes the first upload the refused one); a probe
	// upload is then refused.
	held := false
	for i := 0; i < 3000 && !held; i++ {
		held = uploadsInProgress(t, f) == 1
		if !held {
			time.Sleep(10 * time.Millisecond)
		}
	}
	if !held {
		t.Fatal("the first upload never held the slot (lockstep_uploads_in_progress never 1)")
	}
	code, m, hdr := f.do(t, "POST", "/api/v1/repos/up/objects", f.admin, "")
	if code != http.StatusServiceUnavailable {
		t.Fatalf("a second upload while the first holds the only slot: %d %v, want 503", code, m)
	}
	if errCode(m) != "unavailable" || hdr.Get("Retry-After") == "" || !strings.Contains(errMessage(m), "max-concurrent-uploads") {
		t.Fatalf("refusal: %v, Retry-After %q", m, hdr.Get("Retry-After"))
	}
	pw.Write(tarBytes[512:])
	pw.Close()
	if code := <-first; code != http.StatusCreated {
		t.Fatalf("first upload: %d", code)
	}
	if n := uploadsInProgress(t, f); n != 0 {
		t.Fatalf("lockstep_uploads_in_progress %d after the upload ended, want 0", n)
	}
	// The slot was returned: an upload goes through (400 for an empty
	// pack, not 503).
	if code, m, _ := f.do(t, "POST", "/api/v1/repos/up/objects", f.admin, ""); code != http.StatusBadRequest {
		t.Fatalf("upload after the slot was freed: %d %v", code, m)
	}
}

func errMessage(m map[string]any) string {
	e, _ := m["error"].(map[string]any)
	s, _ := e["message"].(string)
	return s
}

// uploadsInProgress reads lockstep_uploads_in_progress from /metrics.
func uploadsInProgress(t *testing.T, f *fixture) int {
	t.Helper()
	resp, err := http.Get(f.srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "lockstep_uploads_in_progress "); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				t.Fatalf("lockstep_uploads_in_progress %q", v)
			}
			return n
		}
	}
	t.Fatalf("no lockstep_uploads_in_progress in /metrics:\n%s", b)
	return 0
}

// slowUpload starts a tar upload to path with key whose body is head so
// far (the handler is reading it); the caller writes the rest to pw and
// closes it; the answer's status arrives on status (0: a transport
// error). A failed test does not leave the upload hanging.
func slowUpload(t *testing.T, f *fixture, key, path string, head []byte) (pw *io.PipeWriter, status chan int) {
	t.Helper()
	pr, pw := io.Pipe()
	t.Cleanup(func() { pw.CloseWithError(io.ErrUnexpectedEOF) })
	req, _ := http.NewRequest("PUT", f.srv.URL+path, pr)
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/x-tar")
	status = make(chan int, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			status <- 0
			return
		}
		resp.Body.Close()
		status <- resp.StatusCode
	}()
	pw.Write(head)
	return pw, status
}
