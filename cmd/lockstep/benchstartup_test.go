//go:build lockstep_server

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"testing"
	"time"
)

// TestBenchCLIStartupRow: `lockstep bench --only cli-startup` runs the
// binary's `version` against `git --version`, interleaved, and prints
// one row with both distributions (timings are not checked).
func TestBenchCLIStartupRow(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the lockstep binary and runs git")
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not on PATH")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute) // a hang guard, not a timing assertion
	defer cancel()
	var stdout, stderr bytes.Buffer
	e := &env{getenv: func(string) string { return "" }, stdout: &stdout, stderr: &stderr}
	if err := cmdBench(ctx, e, []string{"--dir", t.TempDir(), "--only", "cli-startup", "--iterations", "2", "--json"}); err != nil {
		t.Fatalf("bench: %v\nstderr:\n%s", err, stderr.String())
	}
	var out struct {
		Rows []struct {
			Name   string           `json:"scenario"`
			LS     *struct{ N int } `json:"lockstep"`
			Git    *struct{ N int } `json:"git"`
			GitCmd string           `json:"git_command"`
			Target string           `json:"target"`
		} `json:"rows"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatalf("bench --json: %v\n%s", err, stdout.String())
	}
	if len(out.Rows) != 1 {
		t.Fatalf("%d rows, want 1: %s", len(out.Rows), stdout.String())
	}
	r := out.Rows[0]
	if r.Name != "cli-startup" || r.GitCmd != "git --version" || r.Target != "≤ 3× git" || r.LS == nil || r.LS.N != 6 || r.Git == nil || r.Git.N != 6 {
		t.Errorf("row %+v (lockstep %+v, git %+v)", r, r.LS, r.Git)
	}
}
