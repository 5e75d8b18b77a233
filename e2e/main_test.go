package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// binary is the lockstep executable built once by TestMain.
var binary string

// tmpRoot holds every temporary directory of the suite (under /dev/shm
// when it exists: the git object stores fsync a lot).
var tmpRoot string

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	base := ""
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		base = "/dev/shm"
	}
	dir, err := os.MkdirTemp(base, "lockstep-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: temp dir:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	tmpRoot = dir
	// t.TempDir() honours TMPDIR through os.TempDir.
	os.Setenv("TMPDIR", dir)

	if b := os.Getenv("LOCKSTEP_E2E_BINARY"); b != "" {
		// A prebuilt binary (a release, or a build while the tree is
		// mid-edit).
		binary = b
		return m.Run()
	}
	binary = filepath.Join(dir, "lockstep")
	args := []string{"build", "-o", binary}
	if raceEnabled && os.Getenv("LOCKSTEP_E2E_RACE") != "0" {
		args = append(args, "-race")
	}
	args = append(args, "./cmd/lockstep")
	cmd := exec.Command("go", args...)
	cmd.Dir = ".."
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: go build ./cmd/lockstep:", err)
		return 1
	}
	if _, err := exec.LookPath("git"); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: git not found in PATH (apt-get install -y git)")
		return 1
	}
	return m.Run()
}
