package e2e

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockstep-hq/lockstep/internal/e2ekit"
	"github.com/lockstep-hq/lockstep/internal/testenv"
)

// want503 requires a 503 unavailable envelope with Retry-After.
func want503(t *testing.T, what string, r *e2ekit.Response) {
	t.Helper()
	if e := e2ekit.RequireError(t, what, r, http.StatusServiceUnavailable, "unavailable"); e == nil {
		return
	}
	if r.Header.Get("Retry-After") == "" {
		t.Errorf("%s: 503 without Retry-After", what)
	}
}

// TestDatabaseOutageIs503: issue 9 item 8. With the metadata database gone
// (connections terminated, database dropped) requests answer 503
// unavailable with Retry-After, not 500 internal.
func TestDatabaseOutageIs503(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOpts{Postgres: true})
	s.CreateRepo(t, "db")
	p := s.Push(t, s.AdminKey, "db", "", map[string]string{"a.txt": "a\n"})

	u, err := url.Parse(s.DBURL)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "DROP DATABASE "+pgx.Identifier{strings.TrimPrefix(u.Path, "/")}.Sanitize()+" WITH (FORCE)"); err != nil {
		t.Fatal(err)
	}
	want503(t, "GET /repos", s.Call(t, "GET", "/api/v1/repos", s.AdminKey, nil, ""))
	want503(t, "push", s.PushRaw(t, s.AdminKey, "db", e2ekit.PushQuery("main", p.Commit), e2ekit.TarOf(t, map[string]string{"a.txt": "b\n"})))
	if r := s.Call(t, "GET", "/readyz", "", nil, ""); r.Status != http.StatusServiceUnavailable {
		t.Errorf("readyz with the database gone: %d %s", r.Status, r.Body)
	}
	if !s.Running() {
		t.Fatal("the server exited during the outage")
	}
}

// mountTmpfs mounts a small tmpfs, or skips when this process may not.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs to fill (needs root or CAP_SYS_ADMIN): %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
	return dir
}

// fill writes path until the file system is full.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("fill: %v", err)
			}
			return
		}
	}
}

// TestFullDisk: issue 9 item 8. On a full disk a push is 503 unavailable
// with Retry-After and reads keep working; the server restarts on the full
// disk (start-up writes nothing that did not change); temp files a killed
// server left are removed at start-up once older than --temp-grace.
func TestFullDisk(t *testing.T) {
	t.Parallel()
	data := mountTmpfs(t, "16m")
	s := startServer(t, serverOpts{Data: data, Args: []string{"--temp-grace", "10m"}})
	s.CreateRepo(t, "full")
	p := s.Push(t, s.AdminKey, "full", "", map[string]string{"a.txt": "a\n"})
	filler := filepath.Join(data, "filler")
	fill(t, filler)

	push := func(s *server, what string) *e2ekit.Response {
		return s.PushRaw(t, s.AdminKey, "full", e2ekit.PushQuery("main", p.Commit), e2ekit.TarOf(t, map[string]string{"big.txt": randomText(int(time.Now().UnixNano()%1000), 1<<20)}))
	}
	want503(t, "push on a full disk", push(s, "push"))
	if got := s.Blob(t, "full", "main", "a.txt"); got != "a\n" {
		t.Errorf("read on a full disk: %q", got)
	}

	if code := s.Stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("stop: exit %d\n%s", code, s.Stderr)
	}
	fill(t, filler) // whatever the shutdown freed
	s2 := s.restart(t)
	if got := s2.Blob(t, "full", "main", "a.txt"); got != "a\n" {
		t.Errorf("read after a restart on a full disk: %q", got)
	}
	want503(t, "push after a restart on a full disk", push(s2, "push"))

	// A killed server's temp file, old enough, is what fills the disk.
	s2.Kill()
	<-s2.Done()
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(data, "networks", "full.git", "objects", "pack", "tmp_pack_crashed")
	fill(t, stale)
	old := time.Now().Add(-time.Hour)
	os.Chtimes(stale, old, old)
	s3 := s2.restart(t)
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Fatalf("stale temp file not removed at start-up: %v", err)
	}
	if r := push(s3, "push"); r.Status != http.StatusCreated {
		t.Fatalf("push after the sweep freed space: %d %s", r.Status, r.Body)
	}
}
