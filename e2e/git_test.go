package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// gitURL is the smart HTTP URL of a repository with key as the password.
func (s *server) gitURL(repo, key string) string {
	return fmt.Sprintf("http://x:%s@%s/git/%s.git", key, s.HostPort, repo)
}

// gitEnv isolates the git CLI from the machine's configuration.
func gitEnv(home string) []string {
	return append(cleanEnv(), "GIT_TERMINAL_PROMPT=0", "GIT_CONFIG_NOSYSTEM=1", "HOME="+home,
		"GIT_AUTHOR_DATE=2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE=2026-01-01T00:00:00Z")
}

// gitCmd runs git in dir and returns its combined output and error.
func gitCmd(t testing.TB, dir string, args ...string) (string, error) {
	t.Helper()
	return gitRun(dir, "", args...)
}

// gitRun runs git with stdin; safe from any goroutine.
func gitRun(dir, stdin string, args ...string) (string, error) {
	home := filepath.Join(tmpRoot, "home")
	_ = os.MkdirAll(home, 0o755)
	full := append([]string{"-c", "user.name=E2E Agent", "-c", "user.email=agent@e2e.test",
		"-c", "init.defaultBranch=main", "-c", "advice.detachedHead=false", "-c", "protocol.version=2"}, args...)
	cmd := exec.Command("git", full...)
	cmd.Dir = dir
	cmd.Env = gitEnv(home)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// git runs git and fails the test on error; it returns trimmed output.
func git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	out, err := gitCmd(t, dir, args...)
	if err != nil {
		t.Fatalf("git %s (in %s): %v\n%s", strings.Join(args, " "), dir, err, out)
	}
	return strings.TrimSpace(out)
}

// clone clones repo into a fresh directory and returns it.
func (s *server) clone(t testing.TB, repo, key string, extra ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), repo)
	args := append([]string{"clone", "-q"}, extra...)
	args = append(args, s.gitURL(repo, key), dir)
	git(t, "", args...)
	return dir
}

// writeFile writes a file (creating directories) or fails the test.
func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// networkDir is a fork network's bare git repository on disk.
func (s *server) networkDir(network string) string {
	return filepath.Join(s.Data, "networks", network+".git")
}

// gitRunBytes runs git with stdin and returns its raw stdout.
func gitRunBytes(dir, stdin string, args ...string) ([]byte, error) {
	home := filepath.Join(tmpRoot, "home")
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = gitEnv(home)
	cmd.Stdin = strings.NewReader(stdin)
	return cmd.Output()
}
