package e2e

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/lockstep-hq/lockstep/internal/e2ekit"
)

// TestScripts runs the CLI scenarios of testdata/script/*.txtar
// (testscript: a scenario is a script of commands and expected output)
// against the built binary, which is `lockstep` on the scripts' PATH.
// Beside testscript's own commands they have:
//
//	serve [ARGS...]       start `lockstep serve` (e2ekit.StartServer, stopped
//	                      when the script ends) and point the client at it:
//	                      LOCKSTEP_URL, LOCKSTEP_KEY (the admin key) and
//	                      $URL, $ADMIN_KEY for the script
//	status N CMD [ARGS...] run CMD like exec and require exit status N
//	                      (the CLI's codes: 2 bad input, 3 ref conflict …);
//	                      stdout and stderr are kept for the next checks
//	capture NAME REGEXP   set $NAME to REGEXP's first group in the last
//	                      stdout (an oid the next commands need)
//	jsonvalid             require the last stdout to be one JSON value
//
// Run one with: go test -run TestScripts/help ./e2e/
func TestScripts(t *testing.T) {
	t.Parallel()
	testscript.Run(t, testscript.Params{
		Dir:                 "testdata/script",
		RequireExplicitExec: true,
		RequireUniqueNames:  true,
		Setup: func(env *testscript.Env) error {
			bin := filepath.Join(env.WorkDir, ".bin")
			if err := os.MkdirAll(bin, 0o755); err != nil {
				return err
			}
			if err := os.Symlink(e2ekit.Binary, filepath.Join(bin, "lockstep")); err != nil {
				return err
			}
			env.Setenv("PATH", bin+string(os.PathListSeparator)+env.Getenv("PATH"))
			// The client's caches (push stat cache, run records) stay in
			// the script's directory.
			env.Setenv("XDG_CACHE_HOME", filepath.Join(env.WorkDir, ".cache"))
			env.Setenv("XDG_STATE_HOME", filepath.Join(env.WorkDir, ".state"))
			// As root the snapshot records would go to /var/lib/lockstep.
			env.Setenv("LOCKSTEP_SNAPSHOT_STATE", filepath.Join(env.WorkDir, ".state", "snapshots"))
			env.Setenv("LOCKSTEP_SNAPSHOT_DATA", filepath.Join(env.WorkDir, ".state", "snapshot-data"))
			env.Setenv("LOCKSTEP_URL", "http://127.0.0.1:1") // until serve
			// serve's server lives as long as this script's subtest.
			env.Values[tbKey{}] = env.T()
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"serve":     scriptServe,
			"status":    scriptStatus,
			"capture":   scriptCapture,
			"jsonvalid": scriptJSONValid,
		},
	})
}

// tbKey holds a script's testing.TB in its Env.Values.
type tbKey struct{}

func scriptServe(ts *testscript.TestScript, neg bool, args []string) {
	if neg {
		ts.Fatalf("unsupported: ! serve")
	}
	tb, ok := ts.Value(tbKey{}).(testing.TB)
	if !ok {
		ts.Fatalf("serve: the script does not run under a *testing.T")
	}
	s := e2ekit.StartServer(tb, e2ekit.ServerOpts{Args: args})
	ts.Setenv("URL", s.URL)
	ts.Setenv("ADMIN_KEY", s.AdminKey)
	ts.Setenv("LOCKSTEP_URL", s.URL)
	ts.Setenv("LOCKSTEP_KEY", s.AdminKey)
}

func scriptStatus(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: status N CMD [ARGS...]")
	}
	want, err := strconv.Atoi(args[0])
	if err != nil {
		ts.Fatalf("status: %q is not an exit status", args[0])
	}
	got := 0
	if err := ts.Exec(args[1], args[2:]...); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			ts.Fatalf("status: %s: %v", args[1], err)
		}
		got = ee.ExitCode()
	}
	if got != want {
		ts.Fatalf("%s exited with status %d, want %d", args[1], got, want)
	}
}

func scriptCapture(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: capture NAME REGEXP")
	}
	re, err := regexp.Compile("(?m)" + args[1])
	ts.Check(err)
	m := re.FindStringSubmatch(ts.ReadFile("stdout"))
	if len(m) < 2 {
		ts.Fatalf("capture %s: no match of %q (with a group) in stdout", args[0], args[1])
	}
	ts.Setenv(args[0], m[1])
}

func scriptJSONValid(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 0 {
		ts.Fatalf("usage: [!] jsonvalid")
	}
	out := ts.ReadFile("stdout")
	if json.Valid([]byte(out)) == neg {
		// json.Valid returned neg: the stdout's validity is neg.
		ts.Fatalf("stdout is valid JSON: %v, want %v: %q", neg, !neg, out)
	}
}
