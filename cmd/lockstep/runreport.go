package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/lockstep-hq/lockstep/api"
	"github.com/lockstep-hq/lockstep/client"
	"github.com/lockstep-hq/lockstep/fssnap"
	"github.com/lockstep-hq/lockstep/fssnap/contain"
	"github.com/lockstep-hq/lockstep/fssnap/txrun"
	"github.com/lockstep-hq/lockstep/internal/lazyre"
)

// lastRun is how the previous run of a directory on this machine ended:
// whether the next run is a retry, and whether it starts from an instance
// the previous rollback verified clean (the purity index).
type lastRun struct {
	Dir        string    `json:"dir"`
	Workspace  string    `json:"workspace,omitempty"`
	RunID      string    `json:"run_id"`
	Succeeded  bool      `json:"succeeded"`
	RolledBack bool      `json:"rolled_back"`
	Clean      bool      `json:"clean"` // the rollback was verified clean
	At         time.Time `json:"at"`
}

func lastRunPath(stateRoot, dir string) string {
	h := sha256.Sum256([]byte(dir))
	return filepath.Join(stateRoot, "lastrun", hex.EncodeToString(h[:8])+".json")
}

func readLastRun(stateRoot, dir string) (lastRun, bool) {
	var l lastRun
	b, err := os.ReadFile(lastRunPath(stateRoot, dir))
	if err != nil || json.Unmarshal(b, &l) != nil || l.Dir != dir {
		return l, false
	}
	return l, true
}

func writeLastRun(stateRoot string, l lastRun) error {
	p := lastRunPath(stateRoot, l.Dir)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	b, _ := json.Marshal(l)
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}

var reportIDRE = lazyre.New(`^[A-Za-z0-9_-]{1,64}$`)

// runReportTimeout bounds the one attempt to send a run report.
const runReportTimeout = 15 * time.Second

// buildRunReport is the server's record of a run: timings, purity, the
// retry it was, the snapshot's storage overhead and (capped at
// api.MaxRunWrites) what it wrote inside and outside --dir.
func buildRunReport(rep *txrun.Report, prev lastRun, hadPrev bool, drvName string, sopts fssnap.Options, forensics, machine string, quarantined bool) (api.RunReport, bool) {
	id := rep.RunID
	if id == "" {
		id = rep.FSSnapshot
	}
	if !reportIDRE.MatchString(id) {
		return api.RunReport{}, false
	}
	r := api.RunReport{RunID: id, Command: rep.Command, Exit: rep.Status.ExitCode, Signal: rep.Status.Signal, TimedOut: rep.Status.TimedOut,
		Succeeded: rep.Succeeded, RolledBack: rep.RolledBack, Contain: rep.Contain, TotalMS: rep.TotalMs, Captured: rep.FSSnapshot != "",
		Purity:  api.RunPurity{Checked: rep.Purity.Checked, Clean: rep.Purity.Clean, Instance: rep.Purity.Instance},
		Machine: clip(machine, 255), Quarantined: quarantined}
	if len(r.Command) > 200 {
		r.Command = r.Command[:200]
	}
	for _, s := range rep.Steps {
		switch s.Name {
		case "snapshot", "manifest":
			r.CaptureMS += s.DurationMs
		case "restore_fs", "list_outside", "discard_layers":
			r.RollbackMS += s.DurationMs
		case "verify":
			r.VerifyMS += s.DurationMs
		}
	}
	for _, it := range rep.Residue {
		r.Residue = append(r.Residue, clip(it.String(), 1000))
	}
	for _, p := range rep.Purity.Processes {
		r.Residue = append(r.Residue, clip(fmt.Sprintf("process pid %d: %s", p.PID, p.Cmdline), 1000))
	}
	if !rep.Purity.Files.Clean() {
		r.Residue = append(r.Residue, clip("files in --dir: "+rep.Purity.Files.String(), 1000))
	}
	if len(r.Residue) > 200 {
		r.Residue = r.Residue[:200]
	}
	if hadPrev && !prev.Succeeded && prev.RolledBack {
		r.Retry, r.RetryFromClean = true, prev.Clean
	}
	if rep.FSSnapshot != "" {
		if n, err := fssnap.ManifestBytes(sopts, rep.Dir, rep.FSSnapshot); err == nil {
			r.ManifestBytes = n
		}
		// The run measured its tree; an older report (0) reads the
		// stored manifest again.
		r.TreeBytes = rep.TreeBytes
		if r.TreeBytes == 0 {
			if m, err := fssnap.LoadManifest(sopts, rep.Dir, rep.FSSnapshot); err == nil {
				_, r.TreeBytes = m.Files()
			}
		}
		// The copy driver's object store holds a whole copy of the tree
		// (snapshots share unchanged content); the others share its
		// blocks (copy-on-write) until it changes.
		if drvName == fssnap.NameCopy {
			r.SnapshotBytes = r.TreeBytes
		}
	}
	add := func(cs []contain.Change, outside bool) {
		for _, c := range cs {
			if len(r.Wrote) == api.MaxRunWrites {
				r.WroteOmitted++
				continue
			}
			r.Wrote = append(r.Wrote, api.RunWrite{Path: clip(c.Path, 4096), Kind: c.Kind, Size: c.Size, Outside: outside})
		}
	}
	if rec, err := txrun.LoadRecord(forensics, id); err == nil && !rep.Succeeded {
		add(rec.Inside, false)
		add(rec.Outside, true)
	} else {
		add(rep.Outside, true)
	}
	return r, true
}

// reportRun sends the run's report to the server (one attempt, bounded;
// a failure is a warning: the run's outcome does not depend on it) and
// records how the run ended for the next run's retry accounting.
func reportRun(ctx context.Context, e *env, c *client.Client, ws string, noServer bool, rep *txrun.Report, drvName string, sopts fssnap.Options, stateRoot, forensics, machine string, quarantined bool) {
	if rep == nil {
		return
	}
	prev, hadPrev := readLastRun(stateRoot, rep.Dir)
	if !noServer && c != nil && ws != "" {
		if r, ok := buildRunReport(rep, prev, hadPrev, drvName, sopts, forensics, machine, quarantined); ok {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), runReportTimeout)
			if _, err := c.ReportRun(rctx, ws, r); err != nil {
				fmt.Fprintf(e.stderr, "lockstep run: WARNING: could not report the run to the server: %v\n", err)
			}
			cancel()
		}
	}
	if rep.FSSnapshot == "" { // refused before anything ran: not a run to retry from
		return
	}
	l := lastRun{Dir: rep.Dir, Workspace: ws, RunID: rep.RunID, Succeeded: rep.Succeeded, RolledBack: rep.RolledBack,
		Clean: rep.Purity.Checked && rep.Purity.Clean, At: time.Now().UTC()}
	if err := writeLastRun(stateRoot, l); err != nil {
		fmt.Fprintf(e.stderr, "lockstep run: could not record the run for the next retry: %v\n", err)
	}
}
