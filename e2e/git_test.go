package e2e

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/lockstep-hq/lockstep/internal/e2ekit"
)

// clone clones repo into a fresh directory and returns it.
func (s *server) clone(t testing.TB, repo, key string, extra ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), repo)
	args := append([]string{"clone", "-q"}, extra...)
	args = append(args, s.GitURL(repo, key), dir)
	e2ekit.Git(t, "", args...)
	return dir
}

// networkDir is a fork network's bare git repository on disk.
func (s *server) networkDir(network string) string {
	return filepath.Join(s.Data, "networks", network+".git")
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
