package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/lockstep-hq/lockstep/fssnap"
)

// Outcomes of the run a filesystem snapshot was taken for.
const (
	runSucceeded = "succeeded"
	runFailed    = "failed"
	runNotRun    = "not_run" // refused before the command started
)

// runRecord says which run a snapshot belongs to and how it ended; the
// retention policy reads it. Snapshots taken by hand have none.
type runRecord struct {
	Snapshot  string    `json:"snapshot"`
	Dir       string    `json:"dir"`
	Workspace string    `json:"workspace,omitempty"`
	Outcome   string    `json:"outcome"`
	At        time.Time `json:"at"`
}

// retention is the snapshot retention policy of a directory: keep the
// newest Keep snapshots, and those of failed runs for KeepFailed (the
// evidence a reviewer may want), whichever is longer; drop the snapshot of
// a run that never started.
type retention struct {
	Keep       int
	KeepFailed time.Duration
}

func (r *retention) declare(f *flagger) {
	f.int(&r.Keep, "keep", "LOCKSTEP_SNAPSHOT_KEEP", 10, "filesystem snapshots kept per directory (newest first; 0 = keep all)")
	f.dur(&r.KeepFailed, "keep-failed", "LOCKSTEP_SNAPSHOT_KEEP_FAILED", 7*24*time.Hour, "keep the snapshots of failed runs this long even beyond --keep")
}

func runRecordPath(stateRoot, id string) string {
	return filepath.Join(stateRoot, "runs", id+".json")
}

func stateRootOr(e *env, root string) string {
	if root != "" {
		return root
	}
	return fssnap.DefaultStateRoot(e.getenv)
}

// recordRun writes the run record of snapshot id.
func recordRun(stateRoot string, rec runRecord) error {
	p := runRecordPath(stateRoot, rec.Snapshot)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	b, _ := json.Marshal(rec)
	return os.WriteFile(p, b, 0o600)
}

func readRunRecord(stateRoot, id string) (runRecord, bool) {
	var rec runRecord
	b, err := os.ReadFile(runRecordPath(stateRoot, id))
	if err != nil || json.Unmarshal(b, &rec) != nil {
		return rec, false
	}
	return rec, true
}

// pruneItem is one snapshot and what prune does with it.
type pruneItem struct {
	ID        string    `json:"id"`
	CreatedAt time.Time `json:"created_at"`
	Outcome   string    `json:"outcome,omitempty"`
	Action    string    `json:"action"` // "keep" or "drop"
	Reason    string    `json:"reason"`
	Error     string    `json:"error,omitempty"`
}

// prunePlan decides, newest first, which snapshots of a directory to keep.
func prunePlan(snaps []fssnap.Snapshot, stateRoot string, pol retention, now time.Time) []pruneItem {
	sort.Slice(snaps, func(i, j int) bool { return snaps[i].CreatedAt.After(snaps[j].CreatedAt) })
	var out []pruneItem
	kept := 0
	for _, s := range snaps {
		it := pruneItem{ID: s.ID, CreatedAt: s.CreatedAt}
		rec, ok := readRunRecord(stateRoot, s.ID)
		if ok {
			it.Outcome = rec.Outcome
		}
		switch {
		case ok && rec.Outcome == runNotRun:
			it.Action, it.Reason = "drop", "its run was refused before the command started"
		case pol.Keep <= 0 || kept < pol.Keep:
			kept++
			it.Action, it.Reason = "keep", fmt.Sprintf("among the newest %d", pol.Keep)
			if pol.Keep <= 0 {
				it.Reason = "--keep 0 keeps all"
			}
		case ok && rec.Outcome == runFailed && now.Sub(s.CreatedAt) < pol.KeepFailed:
			it.Action, it.Reason = "keep", fmt.Sprintf("a failed run's, kept for %s", pol.KeepFailed)
		default:
			it.Action, it.Reason = "drop", fmt.Sprintf("older than the newest %d", pol.Keep)
		}
		out = append(out, it)
	}
	return out
}

// prune applies the policy to dir's snapshots (dry: only plans).
func prune(drv fssnap.Driver, dir, stateRoot string, pol retention, dry bool, now time.Time) ([]pruneItem, error) {
	snaps, err := drv.List(dir)
	if err != nil {
		return nil, err
	}
	plan := prunePlan(snaps, stateRoot, pol, now)
	if dry {
		return plan, nil
	}
	var errs []error
	for i := range plan {
		if plan[i].Action != "drop" {
			continue
		}
		if err := drv.Drop(dir, plan[i].ID); err != nil {
			plan[i].Error = err.Error()
			errs = append(errs, err)
			continue
		}
		os.Remove(runRecordPath(stateRoot, plan[i].ID))
	}
	return plan, errors.Join(errs...)
}
