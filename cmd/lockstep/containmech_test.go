package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
)

// TestRunContainMechanismChecked: a bad --contain-mechanism (or
// LOCKSTEP_RUN_CONTAIN_MECHANISM) is refused with a clear error before
// anything is snapshotted or run.
func TestRunContainMechanismChecked(t *testing.T) {
	dir, home := t.TempDir(), t.TempDir()
	for _, tc := range []struct {
		args []string
		env  string
	}{
		{args: []string{"run", "--no-server", "--contain-mechanism", "rootless", "--dir", dir, "--", "touch", "ran"}},
		{args: []string{"run", "--no-server", "--dir", dir, "--", "touch", "ran"}, env: "sudo"},
	} {
		getenv := func(k string) string {
			switch k {
			case "HOME":
				return home
			case "LOCKSTEP_RUN_CONTAIN_MECHANISM":
				return tc.env
			}
			return ""
		}
		var out, errb bytes.Buffer
		err := run(context.Background(), tc.args, getenv, strings.NewReader(""), &out, &errb)
		if err == nil || !strings.Contains(err.Error()+errb.String(), "--contain-mechanism") || !strings.Contains(err.Error()+errb.String(), "auto, root or userns") {
			t.Errorf("%v (env %q): %v %s; want the flag named with its choices", tc.args, tc.env, err, errb.String())
		}
		if ents, _ := os.ReadDir(dir); len(ents) != 0 {
			t.Errorf("something ran or was written: %v", ents)
		}
		if ents, _ := os.ReadDir(home); len(ents) != 0 {
			t.Errorf("state written under $HOME: %v", ents)
		}
	}
}
