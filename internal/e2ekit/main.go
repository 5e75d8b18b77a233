package e2ekit

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/lockstep-hq/lockstep/fssnap"
)

var (
	// Binary is the lockstep executable built (or named by
	// LOCKSTEP_E2E_BINARY) by Main.
	Binary string
	// TmpRoot holds every temporary directory of the suite (under /dev/shm
	// when it exists: the git object stores fsync a lot). TMPDIR points
	// to it while the tests run, so t.TempDir() lands there too.
	TmpRoot string
)

// Suite describes one end-to-end test package for Main.
type Suite struct {
	// Name is the package name, used in the temporary directory's name
	// and in messages.
	Name string
	// Tools are the programs the suite needs in PATH (git, go, …).
	Tools []string
	// Setup runs after TmpRoot is created and before the tests (for
	// package state under TmpRoot); it is optional.
	Setup func()
}

// Main is the body of a suite's TestMain: it creates TmpRoot, builds
// ./cmd/lockstep into it (with -race when the tests run with it, unless
// LOCKSTEP_E2E_RACE=0), checks the suite's tools and runs the tests. It
// returns the exit code for os.Exit.
func Main(m *testing.M, s Suite) int {
	base := ""
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		base = "/dev/shm"
	}
	dir, err := os.MkdirTemp(base, "lockstep-"+s.Name+"-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: temp dir: %v\n", s.Name, err)
		return 1
	}
	defer os.RemoveAll(dir)
	TmpRoot = dir
	// t.TempDir() honours TMPDIR through os.TempDir.
	os.Setenv("TMPDIR", dir)

	if b := os.Getenv("LOCKSTEP_E2E_BINARY"); b != "" {
		// A prebuilt binary (a release, or a build while the tree is
		// mid-edit).
		Binary = b
	} else if err := build(filepath.Join(dir, "lockstep")); err != nil {
		fmt.Fprintf(os.Stderr, "%s: go build ./cmd/lockstep: %v\n", s.Name, err)
		return 1
	}
	for _, tool := range s.Tools {
		if _, err := exec.LookPath(tool); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %s not found in PATH (apt-get install -y %s)\n", s.Name, tool, tool)
			return 1
		}
	}
	// Filesystem snapshots (lockstep run, checkpoint --fs-snapshot, the MCP
	// server's runs) keep their records and data in the suite's temp dir,
	// never in the machine's /var/lib/lockstep/snapshots (as root) or
	// ~/.local/state: CleanEnv passes these on, and so does os.Environ.
	realState := fssnap.DefaultStateRoot(os.Getenv)
	os.Setenv("LOCKSTEP_SNAPSHOT_STATE", filepath.Join(dir, "snapshot-state"))
	os.Setenv("LOCKSTEP_SNAPSHOT_DATA", filepath.Join(dir, "snapshot-data"))
	before := listDir(realState)
	if s.Setup != nil {
		s.Setup()
	}
	code := m.Run()
	if leaked := leakedSnapshots(realState, before, dir); len(leaked) > 0 {
		fmt.Fprintf(os.Stderr, "%s: the tests left snapshot records outside their temp dirs, in %s: %s\n"+
			"(a child process ran without LOCKSTEP_SNAPSHOT_STATE: start it with e2ekit.CleanEnv)\n",
			s.Name, realState, strings.Join(leaked, ", "))
		if code == 0 {
			code = 1
		}
	}
	return code
}

// SnapshotEnv is the environment that keeps a child's filesystem snapshots
// in the suite's temp dir (part of CleanEnv).
func SnapshotEnv() []string {
	var env []string
	for _, k := range []string{"LOCKSTEP_SNAPSHOT_STATE", "LOCKSTEP_SNAPSHOT_DATA"} {
		if v := os.Getenv(k); v != "" {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// listDir returns the names in dir (none if it does not exist).
func listDir(dir string) map[string]bool {
	names := map[string]bool{}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		names[e.Name()] = true
	}
	return names
}

// leakedSnapshots returns the entries of the real state root that appeared
// during the run and record a directory under tmp: this suite's. (Other
// processes on the machine may add their own meanwhile; those are not
// ours to judge.)
func leakedSnapshots(state string, before map[string]bool, tmp string) []string {
	var leaked []string
	for name := range listDir(state) {
		if before[name] {
			continue
		}
		found := false
		filepath.WalkDir(filepath.Join(state, name), func(p string, d fs.DirEntry, err error) error {
			if found || err != nil || d.IsDir() || !strings.HasSuffix(p, ".json") {
				return nil
			}
			if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), tmp) {
				found = true
			}
			return nil
		})
		if found {
			leaked = append(leaked, name)
		}
	}
	sort.Strings(leaked)
	return leaked
}

// build compiles ./cmd/lockstep of the enclosing module into out (the
// client build) and, beside it, lockstep-server (the server build, -tags
// lockstep_server), which the client runs for serve, and lockstep-egress
// (./cmd/lockstep-egress), which it runs as a run's egress proxy, as a
// user's install does; it sets Binary.
func build(out string) error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	for _, b := range []struct{ out, tags, pkg string }{
		{out, "", "./cmd/lockstep"},
		{filepath.Join(filepath.Dir(out), "lockstep-server"), "lockstep_server", "./cmd/lockstep"},
		{filepath.Join(filepath.Dir(out), "lockstep-egress"), "", "./cmd/lockstep-egress"},
	} {
		args := []string{"build", "-o", b.out}
		if b.tags != "" {
			args = append(args, "-tags", b.tags)
		}
		if raceEnabled && os.Getenv("LOCKSTEP_E2E_RACE") != "0" {
			args = append(args, "-race")
		}
		args = append(args, b.pkg)
		cmd := exec.Command("go", args...)
		cmd.Dir = root
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return err
		}
	}
	Binary = out
	return nil
}

// moduleRoot is the nearest directory above the working directory (the
// test package's) that holds go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}
