package e2ekit

import (
	"bytes"
	"errors"
	"fmt"
	"os/exec"
	"testing"
)

// CLIResult is one run of the lockstep CLI.
type CLIResult struct {
	Stdout, Stderr string
	Code           int
}

func (r CLIResult) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.Code, r.Stdout, r.Stderr)
}

// CLI runs the lockstep binary as a client of s (LOCKSTEP_URL,
// LOCKSTEP_KEY) in dir ("" for the test's working directory).
func (s *Server) CLI(t testing.TB, key, dir string, args ...string) CLIResult {
	t.Helper()
	return s.CLIEnv(t, key, dir, nil, args...)
}

// CLIEnv is CLI with extra environment variables.
func (s *Server) CLIEnv(t testing.TB, key, dir string, env []string, args ...string) CLIResult {
	t.Helper()
	cmd := exec.Command(Binary, args...)
	cmd.Dir = dir
	cmd.Env = append(append(CleanEnv(), "LOCKSTEP_URL="+s.URL, "LOCKSTEP_KEY="+key), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return CLIResult{Stdout: out.String(), Stderr: errb.String(), Code: ExitCode(t, err)}
}

// ExitCode of an exec error (0 when nil); an error that is not an exit
// status fails the test.
func ExitCode(t testing.TB, err error) int {
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
