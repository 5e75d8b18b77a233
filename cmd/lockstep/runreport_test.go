package main

import (
	"fmt"
	"testing"

	"github.com/lockstep-hq/lockstep/api"
	"github.com/lockstep-hq/lockstep/fssnap"
	"github.com/lockstep-hq/lockstep/fssnap/contain"
	"github.com/lockstep-hq/lockstep/fssnap/proc"
	"github.com/lockstep-hq/lockstep/fssnap/txrun"
)

// TestBuildRunReport: the timings come from the run's steps, a retry is a
// run after a failed one (from clean when that rollback was verified
// clean), and what the run wrote is capped at api.MaxRunWrites with the
// rest counted.
func TestBuildRunReport(t *testing.T) {
	rep := &txrun.Report{Dir: t.TempDir(), RunID: "run_1", Command: []string{"make"}, FSSnapshot: "",
		Status: proc.Status{ExitCode: 0}, Succeeded: true, Contain: txrun.ContainInstance,
		Steps: []txrun.Step{{Name: "snapshot", DurationMs: 2}, {Name: "manifest", DurationMs: 1.5}, {Name: "run", DurationMs: 100}}}
	for i := 0; i < api.MaxRunWrites+7; i++ {
		rep.Outside = append(rep.Outside, contain.Change{Path: fmt.Sprintf("/tmp/f%d", i), Kind: "created", Size: 1})
	}
	prev := lastRun{Dir: rep.Dir, Succeeded: false, RolledBack: true, Clean: true}
	r, ok := buildRunReport(rep, prev, true, fssnap.NameCopy, fssnap.Options{}, t.TempDir(), "m1", false)
	if !ok {
		t.Fatal("no report")
	}
	if r.CaptureMS != 3.5 || r.RollbackMS != 0 || r.Captured {
		t.Errorf("capture %v rollback %v captured %v", r.CaptureMS, r.RollbackMS, r.Captured)
	}
	if !r.Retry || !r.RetryFromClean {
		t.Errorf("retry %v from clean %v, want both", r.Retry, r.RetryFromClean)
	}
	if len(r.Wrote) != api.MaxRunWrites || r.WroteOmitted != 7 || !r.Wrote[0].Outside {
		t.Errorf("wrote %d (omitted %d), want %d (7)", len(r.Wrote), r.WroteOmitted, api.MaxRunWrites)
	}
	// After a success, the next run is no retry; after an impure
	// rollback, a retry not from clean.
	if r, _ := buildRunReport(rep, lastRun{Succeeded: true}, true, "", fssnap.Options{}, "", "m1", false); r.Retry {
		t.Error("a run after a success counted as a retry")
	}
	if r, _ := buildRunReport(rep, lastRun{RolledBack: true}, true, "", fssnap.Options{}, "", "m1", false); !r.Retry || r.RetryFromClean {
		t.Errorf("after an impure rollback: retry %v from clean %v", r.Retry, r.RetryFromClean)
	}
	if _, ok := buildRunReport(&txrun.Report{}, prev, false, "", fssnap.Options{}, "", "m1", false); ok {
		t.Error("a run without id or snapshot was reported")
	}
}

// TestBuildRunReportTreeBytesFromRun: the tree's size comes from the run
// (measured when its snapshot was taken), not from a second read of the
// stored manifest, which cost a contained `run -- true` 7% of its CPU.
func TestBuildRunReportTreeBytesFromRun(t *testing.T) {
	rep := &txrun.Report{Dir: t.TempDir(), RunID: "run_2", FSSnapshot: "0123456789ab", TreeBytes: 12345, Succeeded: true}
	r, ok := buildRunReport(rep, lastRun{}, false, fssnap.NameCopy, fssnap.Options{StateRoot: t.TempDir()}, t.TempDir(), "m1", false)
	if !ok || r.TreeBytes != 12345 || r.SnapshotBytes != 12345 {
		t.Fatalf("tree %d snapshot %d, want 12345 from the run", r.TreeBytes, r.SnapshotBytes)
	}
}
