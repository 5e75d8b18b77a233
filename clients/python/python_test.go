// Package python runs the Python client's unittest suite (tests/) and the
// examples/agent_loop.py agent loop against a real `lockstep serve`
// started by the end-to-end harness, and checks that the package installs
// offline with pip into a fresh virtual environment.
package python

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockstep-hq/lockstep/internal/e2ekit"
)

func TestMain(m *testing.M) {
	os.Exit(e2ekit.Main(m, e2ekit.Suite{Name: "python", Tools: []string{"git", "python3"}}))
}

func python(t *testing.T, srv *e2ekit.Server, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("python3", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "LOCKSTEP_URL="+srv.URL, "LOCKSTEP_KEY="+srv.AdminKey,
		"XDG_CACHE_HOME="+t.TempDir(), "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python3 %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestPythonClient runs clients/python/tests against a real server.
func TestPythonClient(t *testing.T) {
	srv := e2ekit.StartServer(t, e2ekit.ServerOpts{})
	out := python(t, srv, ".", "-m", "unittest", "discover", "-v", "-s", "tests", "-t", ".")
	if !strings.Contains(out, "\nOK") {
		t.Fatalf("unittest did not report OK:\n%s", out)
	}
	if strings.Contains(out, "LOCKSTEP_URL and LOCKSTEP_KEY") {
		t.Fatalf("the server tests were skipped:\n%s", out)
	}
	t.Logf("%s", out)
}

// TestAgentLoopExample runs examples/agent_loop.py end to end.
func TestAgentLoopExample(t *testing.T) {
	srv := e2ekit.StartServer(t, e2ekit.ServerOpts{})
	out := python(t, srv, ".", filepath.Join("..", "..", "examples", "agent_loop.py"))
	for _, want := range []string{"forked", "checkpoint", "restored", "gate refused", "promoted"} {
		if !strings.Contains(out, want) {
			t.Errorf("agent_loop.py output lacks %q:\n%s", want, out)
		}
	}
}

// TestPipInstallOffline installs the package the way the README says, in
// a fresh venv with the package index unreachable, and imports it.
func TestPipInstallOffline(t *testing.T) {
	venv := filepath.Join(t.TempDir(), "venv")
	if out, err := exec.Command("python3", "-m", "venv", venv).CombinedOutput(); err != nil {
		t.Skipf("python3 -m venv unavailable (install python3-venv): %v\n%s", err, out)
	}
	pip := exec.Command(filepath.Join(venv, "bin", "pip"), "install", "--no-index", "--disable-pip-version-check", ".")
	pip.Env = append(os.Environ(), "PIP_INDEX_URL=http://127.0.0.1:9/unreachable")
	if out, err := pip.CombinedOutput(); err != nil {
		t.Fatalf("pip install ./clients/python: %v\n%s", err, out)
	}
	imp := exec.Command(filepath.Join(venv, "bin", "python"), "-c", "import lockstep, sys; sys.stdout.write(lockstep.__file__)")
	imp.Dir = t.TempDir() // not the source tree: the installed copy
	out, err := imp.CombinedOutput()
	if err != nil || !strings.Contains(string(out), filepath.Join(venv, "lib")) {
		t.Fatalf("import the installed package: %v\n%s", err, out)
	}
}
