package e2ekit

import (
	"bytes"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// GitURL is the smart-HTTP URL of repo with key as the basic-auth password.
func (s *Server) GitURL(repo, key string) string {
	u, _ := url.Parse(s.URL + "/git/" + repo + ".git")
	u.User = url.UserPassword("x", key)
	return u.String()
}

// GitEnv isolates the git CLI from the machine's configuration: a clean
// environment, no system config, HOME at home, fixed dates.
func GitEnv(home string) []string {
	return append(CleanEnv(), "GIT_TERMINAL_PROMPT=0", "GIT_CONFIG_NOSYSTEM=1", "HOME="+home,
		"GIT_AUTHOR_DATE=2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE=2026-01-01T00:00:00Z")
}

// gitHome is the isolated HOME of every git run (under TmpRoot).
func gitHome() string {
	home := filepath.Join(TmpRoot, "home")
	_ = os.MkdirAll(home, 0o755)
	return home
}

// GitCmd runs git in dir and returns its combined output and error.
func GitCmd(t testing.TB, dir string, args ...string) (string, error) {
	t.Helper()
	return GitRun(dir, "", args...)
}

// GitRun runs git in dir with stdin and a fixed identity; safe from any
// goroutine. It returns the combined output.
func GitRun(dir, stdin string, args ...string) (string, error) {
	full := append([]string{"-c", "user.name=E2E Agent", "-c", "user.email=agent@e2e.test",
		"-c", "init.defaultBranch=main", "-c", "advice.detachedHead=false", "-c", "protocol.version=2"}, args...)
	cmd := exec.Command("git", full...)
	cmd.Dir = dir
	cmd.Env = GitEnv(gitHome())
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// Git runs git and fails the test on error; it returns trimmed output.
func Git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	out, err := GitCmd(t, dir, args...)
	if err != nil {
		t.Fatalf("git %s (in %s): %v\n%s", strings.Join(args, " "), dir, err, out)
	}
	return strings.TrimSpace(out)
}

// GitRunBytes runs git (no -c settings) with stdin and returns its raw
// stdout.
func GitRunBytes(dir, stdin string, args ...string) ([]byte, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = GitEnv(gitHome())
	cmd.Stdin = strings.NewReader(stdin)
	return cmd.Output()
}
