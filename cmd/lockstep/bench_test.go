//go:build lockstep_server

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep/bench"
)

// TestBenchSmoke runs `lockstep bench` with tiny trees so the command
// and its wiring (the in-process server of `serve`, the incremental
// push) cannot rot: every scenario must produce its row (timings are not
// checked).
func TestBenchSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the lockstep binary and runs git")
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not on PATH")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute) // a hang guard, not a timing assertion: a loaded machine is slow
	defer cancel()
	var stdout, stderr bytes.Buffer
	e := &env{getenv: func(string) string { return "" }, stdout: &stdout, stderr: &stderr}
	err := cmdBench(ctx, e, []string{"--dir", t.TempDir(), "--files", "40", "--big-files", "50", "--iterations", "2", "--fleet", "0,3", "--json"})
	if err != nil {
		t.Fatalf("bench: %v\nstderr:\n%s", err, stderr.String())
	}
	type dist struct {
		N      int     `json:"n"`
		Median float64 `json:"median_ms"`
	}
	var out struct {
		Machine map[string]string `json:"machine"`
		Rows    []struct {
			Name    string `json:"scenario"`
			LS      *dist  `json:"lockstep"`
			Skipped string `json:"skipped"`
		} `json:"rows"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatalf("bench --json: %v\n%s", err, stdout.String())
	}
	got := map[string]int{}
	for i, r := range out.Rows {
		got[r.Name] = i
	}
	names := append(bench.RowNames(), bench.FleetRowNames([]int{0, 3})...)
	for _, name := range names {
		i, ok := got[name]
		if !ok {
			t.Errorf("no row %q", name)
			continue
		}
		r := out.Rows[i]
		if r.Skipped != "" {
			t.Errorf("row %q skipped: %s", name, r.Skipped)
			continue
		}
		if r.LS == nil || r.LS.N < 2 || r.LS.Median <= 0 {
			t.Errorf("row %q: lockstep timings %+v", name, r.LS)
		}
	}
	// The objstore group needs an S3 server and Postgres (bench's own
	// test runs it): without them it is one skipped row saying so.
	if i, ok := got["objstore"]; !ok || !strings.Contains(out.Rows[i].Skipped, "--objstore-url") {
		t.Errorf("no skipped objstore row naming --objstore-url")
	}
	// The db-burst row needs a branch database server (none here).
	if i, ok := got["db-burst-10"]; !ok || !strings.Contains(out.Rows[i].Skipped, "LOCKSTEP_BRANCH_DATABASE_URL") {
		t.Errorf("no skipped db-burst-10 row naming LOCKSTEP_BRANCH_DATABASE_URL")
	}
	// The push-bulk group needs bundles (bench's own test runs it on
	// one): without them it is one skipped row naming --bundles.
	if i, ok := got["push-bulk"]; !ok || !strings.Contains(out.Rows[i].Skipped, "--bundles") {
		t.Errorf("no skipped push-bulk row naming --bundles")
	}
	// The preflight-batch group needs a bundle (--bundles; none here).
	if i, ok := got["preflight-batch"]; !ok || !strings.Contains(out.Rows[i].Skipped, "--bundles") {
		t.Errorf("no skipped preflight-batch row naming --bundles")
	}
	if len(out.Rows) != len(names)+4 { // the four skipped rows above
		t.Errorf("%d rows, want %d", len(out.Rows), len(names)+4)
	}
	if out.Machine["fs"] == "" {
		t.Errorf("machine description lacks the filesystem: %v", out.Machine)
	}
}
