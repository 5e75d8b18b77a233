package e2egate

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

var (
	// binary is the lockstep executable built once by TestMain.
	binary string
	// tmpRoot holds every temporary directory of the suite (on /dev/shm
	// when it exists: the object stores fsync a lot).
	tmpRoot string
	// goCache is the GOCACHE shared by every `go test` the runner starts,
	// so only the first one compiles the standard library.
	goCache string
)

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	base := ""
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		base = "/dev/shm"
	}
	dir, err := os.MkdirTemp(base, "lockstep-e2egate-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2egate: temp dir:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	tmpRoot = dir
	os.Setenv("TMPDIR", dir) // t.TempDir() and the runner's checkouts
	goCache = filepath.Join(dir, "gocache")

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
		fmt.Fprintln(os.Stderr, "e2egate: go build ./cmd/lockstep:", err)
		return 1
	}
	for _, tool := range []string{"git", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			fmt.Fprintf(os.Stderr, "e2egate: %s not found in PATH\n", tool)
			return 1
		}
	}
	return m.Run()
}
