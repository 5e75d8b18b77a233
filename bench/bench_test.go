package bench

import (
	"context"
	"strings"
	"testing"
)

func TestBenchOnly(t *testing.T) {
	b := &bencher{o: benchOpts{only: []string{"fork-20k", "read-refs"}}}
	for g, want := range map[string]bool{"fork": true, "read": true, "rollback": false, "push-incremental": false, "run": false} {
		if b.selected(g) != want {
			t.Errorf("selected(%q) = %v, want %v", g, !want, want)
		}
	}
}

// TestBenchOnlyLongestGroup: a row of run-baseline selects that group
// only, not run (whose name prefixes it).
func TestBenchOnlyLongestGroup(t *testing.T) {
	b := &bencher{o: benchOpts{only: []string{"run-baseline-false"}}}
	for g, want := range map[string]bool{"run-baseline": true, "run": false} {
		if b.selected(g) != want {
			t.Errorf("selected(%q) = %v, want %v", g, !want, want)
		}
	}
	b = &bencher{o: benchOpts{only: []string{"run-true"}}}
	if !b.selected("run") || b.selected("run-baseline") {
		t.Errorf("run-true selects run only")
	}
}

// TestBenchOnlyPreflightBatch: preflight-batch and its second row
// preflight-single select that group only; preflight selects its own.
func TestBenchOnlyPreflightBatch(t *testing.T) {
	for _, c := range []struct {
		only       string
		pre, batch bool
	}{{"preflight-batch", false, true}, {"preflight-single", false, true}, {"preflight", true, false}, {"preflight-deep-20k", true, false}} {
		b := &bencher{o: benchOpts{only: []string{c.only}}}
		if b.selected("preflight") != c.pre || b.selected("preflight-batch") != c.batch {
			t.Errorf("--only %s: preflight %v, preflight-batch %v; want %v, %v", c.only, b.selected("preflight"), b.selected("preflight-batch"), c.pre, c.batch)
		}
	}
}

func TestBenchDist(t *testing.T) {
	d := newDist([]float64{5, 1, 4, 2, 3, 6, 7, 8, 9, 10})
	if d.Median != 5.5 || d.P90 != 9 || d.Min != 1 || d.Max != 10 || d.N != 10 {
		t.Errorf("newDist = %+v", d)
	}
}

func TestRunValidatesOptions(t *testing.T) {
	for _, o := range []Options{
		{Files: 29, BigFiles: 50, Iterations: 1},
		{Files: 40, BigFiles: 29, Iterations: 1},
		{Files: 40, BigFiles: 50, Iterations: 0},
	} {
		err := Run(context.Background(), o, nil)
		if err == nil || !strings.Contains(err.Error(), "must be ≥ 30") {
			t.Errorf("Run(%+v) = %v, want the size error", o, err)
		}
	}
	err := Run(context.Background(), Options{Files: 40, BigFiles: 50, Iterations: 1}, nil)
	if err == nil || !strings.Contains(err.Error(), "Options.StartServer is required") {
		t.Errorf("Run without StartServer = %v", err)
	}
}
