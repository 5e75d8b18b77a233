package e2ekit

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep/internal/testenv"
)

// ServerOpts configure StartServer.
type ServerOpts struct {
	// Postgres selects Postgres metadata on a throwaway database.
	Postgres bool
	// DatabaseURL reuses a database (restarts); implies Postgres.
	DatabaseURL string
	// Data reuses a data directory (restarts); default t.TempDir().
	Data string
	// Args are extra `lockstep serve` flags; they come after the
	// defaults (--data, --addr, --log-level warn), so they win.
	Args []string
	// Env are extra environment variables (LOCKSTEP_REDIS_URL=…). They
	// come after the defaults, so they win: the default
	// LOCKSTEP_HOOK_ALLOW_HOSTS=127.0.0.1 lets hooks reach the tests'
	// receivers (httptest servers, runners) on loopback;
	// "LOCKSTEP_HOOK_ALLOW_HOSTS=" restores the production default.
	Env []string
	// Wrap prefixes the command line: {"prlimit", "--nofile=128:128", "--"}
	// starts the server under a low file-descriptor limit (prlimit execs
	// it, so Cmd's process is the server's).
	Wrap []string
}

// Server is one `lockstep serve` process.
type Server struct {
	t        testing.TB
	Opts     ServerOpts // as started (Data and DatabaseURL filled in)
	URL      string     // http://127.0.0.1:port
	HostPort string
	Data     string
	DBURL    string // "" for SQLite
	AdminKey string

	Cmd    *exec.Cmd
	Stdout *SyncBuffer
	Stderr *SyncBuffer
	done   chan struct{}
	err    error // Wait's result, valid after done
}

// SyncBuffer is a bytes.Buffer safe for a writer goroutine and readers.
type SyncBuffer = testenv.SyncBuffer

// StartServer runs `lockstep serve` on a free port, waits for /healthz,
// reads <data>/admin.key, and stops the process when the test ends (and
// fails the test if the process reported a data race). A port taken
// between choosing and binding it is retried.
func StartServer(t testing.TB, opts ServerOpts) *Server {
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

func launch(t testing.TB, opts ServerOpts) (*Server, string) {
	t.Helper()
	hostport := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	args := append([]string{"serve", "--data", opts.Data, "--addr", hostport, "--log-level", "warn"}, opts.Args...)
	cmd := exec.Command(Binary, args...)
	if len(opts.Wrap) > 0 {
		cmd = exec.Command(opts.Wrap[0], append(append(opts.Wrap[1:len(opts.Wrap):len(opts.Wrap)], Binary), args...)...)
	}
	// Functional tests race more writers than the production bound on
	// concurrent uploads (8); the bound itself is tested where it is
	// the subject (web's TestConcurrentUploadsBounded).
	env := append(CleanEnv(), "LOCKSTEP_HOOK_ALLOW_HOSTS=127.0.0.1", "LOCKSTEP_MAX_CONCURRENT_UPLOADS=256")
	if opts.DatabaseURL != "" {
		env = append(env, "LOCKSTEP_DATABASE_URL="+opts.DatabaseURL)
	}
	cmd.Env = append(env, opts.Env...)
	s := &Server{t: t, Opts: opts, URL: "http://" + hostport, HostPort: hostport, Data: opts.Data, DBURL: opts.DatabaseURL,
		Cmd: cmd, Stdout: &SyncBuffer{}, Stderr: &SyncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = s.Stdout, s.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start lockstep serve: %v", err)
	}
	go func() { s.err = cmd.Wait(); close(s.done) }()
	t.Cleanup(s.cleanup)

	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-s.done:
			return nil, fmt.Sprintf("exited: %v\nstdout:\n%s\nstderr:\n%s", s.err, s.Stdout, s.Stderr)
		default:
		}
		if resp, err := http.Get(s.URL + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			s.Kill()
			return nil, fmt.Sprintf("no /healthz within 60s\nstdout:\n%s\nstderr:\n%s", s.Stdout, s.Stderr)
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

// CleanEnv is the environment of every child process: no LOCKSTEP_*,
// GIT_* or OTEL_* settings leak in from the developer's shell, and
// filesystem snapshots stay in the suite's temp dir (SnapshotEnv).
func CleanEnv() []string {
	return append(cleanEnv(), SnapshotEnv()...)
}

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

// Running reports whether the process is still alive.
func (s *Server) Running() bool {
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// Done is closed when the process has exited.
func (s *Server) Done() <-chan struct{} { return s.done }

// Stop sends sig and waits for the process; it returns the exit code
// (-1 when killed by a signal).
func (s *Server) Stop(sig syscall.Signal) int {
	s.t.Helper()
	if s.Running() {
		_ = s.Cmd.Process.Signal(sig)
	}
	select {
	case <-s.done:
	case <-time.After(90 * time.Second):
		s.Kill()
		s.t.Fatalf("lockstep serve did not exit within 90s of %v\nstderr:\n%s", sig, s.Stderr)
	}
	return s.ExitCode()
}

// Wait waits for the process to exit on its own and returns the exit code.
func (s *Server) Wait() int {
	s.t.Helper()
	select {
	case <-s.done:
	case <-time.After(90 * time.Second):
		s.Kill()
		s.t.Fatalf("lockstep serve did not exit within 90s\nstderr:\n%s", s.Stderr)
	}
	return s.ExitCode()
}

// Kill sends SIGKILL (no graceful shutdown at all) and waits.
func (s *Server) Kill() {
	if s.Running() {
		_ = s.Cmd.Process.Kill()
		<-s.done
	}
}

// ExitCode is the exit status of the exited process (-1 when killed by a
// signal, -2 when Wait failed otherwise).
func (s *Server) ExitCode() int {
	var ee *exec.ExitError
	if errors.As(s.err, &ee) {
		return ee.ExitCode()
	}
	if s.err != nil {
		return -2
	}
	return 0
}

func (s *Server) cleanup() {
	if s.Running() {
		_ = s.Cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(60 * time.Second):
			s.Kill()
		}
	}
	s.checkRaces()
	if s.t.Failed() {
		s.t.Logf("lockstep serve %s output:\nstdout:\n%s\nstderr:\n%s", s.HostPort, s.Stdout, s.Stderr)
	}
}

// checkRaces fails the test when a -race server reported a data race.
func (s *Server) checkRaces() {
	if out := s.Stderr.String(); strings.Contains(out, "WARNING: DATA RACE") {
		i := strings.Index(out, "WARNING: DATA RACE")
		s.t.Errorf("BUG: the server reported a data race:\n%s", out[i:min(len(out), i+6000)])
	}
}

// Restart starts a new process on the same data directory and database
// (the old one must have exited) with the same flags and environment.
func (s *Server) Restart(t testing.TB) *Server {
	t.Helper()
	if s.Running() {
		t.Fatalf("restart: the old server is still running")
	}
	o := s.Opts
	o.Postgres = false
	return StartServer(t, o)
}
