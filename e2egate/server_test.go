package e2egate

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep/internal/testenv"
)

// serverOpts configure startServer.
type serverOpts struct {
	// Postgres puts the metadata on a throwaway Postgres database.
	Postgres bool
	// DatabaseURL reuses a Postgres database (restarts).
	DatabaseURL string
	// Data reuses a data directory (restarts); default t.TempDir().
	Data string
	// Args are extra `lockstep serve` flags; they come after the suite's
	// defaults (--hook-backoff 100ms --hook-max-backoff 1s), so they win.
	Args []string
}

// server is one `lockstep serve` process.
type server struct {
	t        testing.TB
	opts     serverOpts
	URL      string
	Data     string
	AdminKey string

	cmd    *exec.Cmd
	stdout *syncBuffer
	stderr *syncBuffer
	done   chan struct{}
	err    error
}

// syncBuffer is a bytes.Buffer safe for one writer and many readers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startServer runs `lockstep serve` on a free port, waits for /healthz and
// reads <data>/admin.key. The process is stopped when the test ends.
func startServer(t testing.TB, opts serverOpts) *server {
	t.Helper()
	if opts.Data == "" {
		opts.Data = t.TempDir()
	}
	if opts.Postgres && opts.DatabaseURL == "" {
		opts.DatabaseURL = testenv.MustPostgresDB(t)
	}
	var last string
	for try := 0; try < 3; try++ {
		s, out := launch(t, opts)
		if s != nil {
			return s
		}
		last = out
		if !strings.Contains(out, "address already in use") {
			break
		}
	}
	t.Fatalf("lockstep serve did not come up:\n%s", last)
	return nil
}

func launch(t testing.TB, opts serverOpts) (*server, string) {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	args := []string{"serve", "--data", opts.Data, "--addr", addr, "--log-level", "warn",
		"--hook-backoff", "100ms", "--hook-max-backoff", "1s"}
	args = append(args, opts.Args...)
	cmd := exec.Command(binary, args...)
	cmd.Env = cleanEnv()
	if opts.DatabaseURL != "" {
		cmd.Env = append(cmd.Env, "LOCKSTEP_DATABASE_URL="+opts.DatabaseURL)
	}
	s := &server{t: t, opts: opts, URL: "http://" + addr, Data: opts.Data, cmd: cmd,
		stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = s.stdout, s.stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start lockstep serve: %v", err)
	}
	go func() { s.err = cmd.Wait(); close(s.done) }()
	t.Cleanup(s.cleanup)

	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-s.done:
			return nil, fmt.Sprintf("exited: %v\nstdout:\n%s\nstderr:\n%s", s.err, s.stdout, s.stderr)
		default:
		}
		if resp, err := http.Get(s.URL + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			s.kill()
			return nil, fmt.Sprintf("no /healthz within 60s\nstdout:\n%s\nstderr:\n%s", s.stdout, s.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	b, err := os.ReadFile(filepath.Join(opts.Data, "admin.key"))
	if err != nil {
		t.Fatalf("read admin.key: %v", err)
	}
	s.AdminKey = strings.TrimSpace(string(b))
	return s, ""
}

// cleanEnv is the environment of every child: no LOCKSTEP_*, GIT_* or
// OTEL_* settings leak in from the developer's shell.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "LOCKSTEP_") || strings.HasPrefix(kv, "GIT_") || strings.HasPrefix(kv, "OTEL_") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

func (s *server) running() bool {
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// kill sends SIGKILL (no graceful shutdown at all) and waits.
func (s *server) kill() {
	if s.running() {
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

func (s *server) cleanup() {
	if s.running() {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(60 * time.Second):
			s.kill()
		}
	}
	if out := s.stderr.String(); strings.Contains(out, "WARNING: DATA RACE") {
		i := strings.Index(out, "WARNING: DATA RACE")
		s.t.Errorf("BUG: the server reported a data race:\n%s", out[i:min(len(out), i+6000)])
	}
}

// restart starts a new process on the same data directory and database;
// the old one must have exited.
func (s *server) restart(t testing.TB) *server {
	t.Helper()
	if s.running() {
		t.Fatalf("restart: the old server is still running")
	}
	o := s.opts
	o.Postgres = false
	return startServer(t, o)
}

// exitCode of an exec error (0 when nil).
func exitCode(t testing.TB, err error) int {
	t.Helper()
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("run: %v", err)
	}
	return ee.ExitCode()
}
