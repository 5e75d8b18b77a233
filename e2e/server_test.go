package e2e

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
	// Postgres selects Postgres metadata on a throwaway database.
	Postgres bool
	// DatabaseURL reuses a database (restarts); implies Postgres.
	DatabaseURL string
	// Data reuses a data directory (restarts); default t.TempDir().
	Data string
	// Args are extra `lockstep serve` flags (limits).
	Args []string
	// Env are extra environment variables (LOCKSTEP_REDIS_URL=…).
	Env []string
}

// server is one `lockstep serve` process.
type server struct {
	t        testing.TB
	opts     serverOpts
	URL      string // http://127.0.0.1:port
	HostPort string
	Data     string
	DBURL    string // "" for SQLite
	AdminKey string

	cmd    *exec.Cmd
	stdout *syncBuffer
	stderr *syncBuffer
	done   chan struct{}
	err    error // Wait's result, valid after done
}

// syncBuffer is a bytes.Buffer safe for a writer goroutine and readers.
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

// startServer runs `lockstep serve` on a free port, waits for /healthz,
// reads the admin key, and stops the process when the test ends.
func startServer(t testing.TB, opts serverOpts) *server {
	t.Helper()
	if opts.Data == "" {
		opts.Data = t.TempDir()
	}
	if opts.DatabaseURL == "" && opts.Postgres {
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
	port := testenv.FreePort(t)
	hostport := fmt.Sprintf("127.0.0.1:%d", port)
	args := append([]string{"serve", "--data", opts.Data, "--addr", hostport, "--log-level", "warn"}, opts.Args...)
	cmd := exec.Command(binary, args...)
	env := cleanEnv()
	if opts.DatabaseURL != "" {
		env = append(env, "LOCKSTEP_DATABASE_URL="+opts.DatabaseURL)
	}
	cmd.Env = append(env, opts.Env...)
	s := &server{t: t, opts: opts, URL: "http://" + hostport, HostPort: hostport, Data: opts.Data, DBURL: opts.DatabaseURL,
		cmd: cmd, stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = s.stdout, s.stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start lockstep serve: %v", err)
	}
	go func() { s.err = cmd.Wait(); close(s.done) }()
	t.Cleanup(func() { s.cleanup() })

	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-s.done:
			return nil, fmt.Sprintf("exited: %v\nstdout:\n%s\nstderr:\n%s", s.err, s.stdout, s.stderr)
		default:
		}
		resp, err := http.Get(s.URL + "/healthz")
		if err == nil {
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

// cleanEnv is the environment of every child process: no LOCKSTEP_*
// settings or git configuration leak in from the developer's shell.
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

// running reports whether the process is still alive.
func (s *server) running() bool {
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// stop sends sig and waits for the process; it returns the exit code
// (-1 when killed by a signal).
func (s *server) stop(sig syscall.Signal) int {
	s.t.Helper()
	if s.running() {
		_ = s.cmd.Process.Signal(sig)
	}
	select {
	case <-s.done:
	case <-time.After(90 * time.Second):
		s.kill()
		s.t.Fatalf("lockstep serve did not exit within 90s of %v\nstderr:\n%s", sig, s.stderr)
	}
	return s.exitCode()
}

// wait waits for the process to exit on its own and returns the exit code.
func (s *server) wait() int {
	s.t.Helper()
	select {
	case <-s.done:
	case <-time.After(90 * time.Second):
		s.kill()
		s.t.Fatalf("lockstep serve did not exit within 90s\nstderr:\n%s", s.stderr)
	}
	return s.exitCode()
}

func (s *server) kill() {
	if s.running() {
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

func (s *server) exitCode() int {
	var ee *exec.ExitError
	if errors.As(s.err, &ee) {
		return ee.ExitCode()
	}
	if s.err != nil {
		return -2
	}
	return 0
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
	s.checkRaces()
}

// checkRaces fails the test when a -race server reported a data race.
func (s *server) checkRaces() {
	if out := s.stderr.String(); strings.Contains(out, "WARNING: DATA RACE") {
		i := strings.Index(out, "WARNING: DATA RACE")
		end := min(len(out), i+6000)
		s.t.Errorf("BUG: the server reported a data race:\n%s", out[i:end])
	}
}

// restart starts a new process on the same data directory and database
// (the old one must have exited).
func (s *server) restart(t testing.TB) *server {
	t.Helper()
	if s.running() {
		t.Fatalf("restart: the old server is still running")
	}
	o := s.opts
	o.Postgres = false
	return startServer(t, o)
}
