package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"testing"
	"time"
)

// TestBenchSmoke runs `lockstep bench` with tiny trees so the command
// cannot rot: every scenario must produce its row (timings are not
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
	var out struct {
		Machine map[string]string `json:"machine"`
		Rows    []benchRow        `json:"rows"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatalf("bench --json: %v\n%s", err, stdout.String())
	}
	got := map[string]benchRow{}
	for _, r := range out.Rows {
		got[r.Name] = r
	}
	names := append(append([]string(nil), benchRowNames...), fleetRowNames([]int{0, 3})...)
	for _, name := range names {
		r, ok := got[name]
		if !ok {
			t.Errorf("no row %q", name)
			continue
		}
		if r.Skipped != "" {
			t.Errorf("row %q skipped: %s", name, r.Skipped)
			continue
		}
		if r.LS == nil || r.LS.N < 2 || r.LS.Median <= 0 {
			t.Errorf("row %q: lockstep timings %+v", name, r.LS)
		}
	}
	if len(out.Rows) != len(names) {
		t.Errorf("%d rows, want %d", len(out.Rows), len(names))
	}
	if out.Machine["fs"] == "" {
		t.Errorf("machine description lacks the filesystem: %v", out.Machine)
	}
}

func TestBenchOnly(t *testing.T) {
	b := &bencher{o: benchOpts{only: []string{"fork-20k", "read-refs"}}}
	for g, want := range map[string]bool{"fork": true, "read": true, "rollback": false, "push-incremental": false, "run": false} {
		if b.selected(g) != want {
			t.Errorf("selected(%q) = %v, want %v", g, !want, want)
		}
	}
}

func TestBenchDist(t *testing.T) {
	d := newDist([]float64{5, 1, 4, 2, 3, 6, 7, 8, 9, 10})
	if d.Median != 5.5 || d.P90 != 9 || d.Min != 1 || d.Max != 10 || d.N != 10 {
		t.Errorf("newDist = %+v", d)
	}
}
