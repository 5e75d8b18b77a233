package txrun

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/fssnap"
	"github.com/lockstep-hq/lockstep/fssnap/contain"
	"github.com/lockstep-hq/lockstep/internal/lazyre"
)

// DefaultForensicsWindow is how long a failed run's record is kept.
const DefaultForensicsWindow = 24 * time.Hour

// Record is what a failed run wrote, kept for forensics in
// <dir>/<run id>/run.json, the overlay upper directories beside it
// (upper/<i>, upper/mounts.json) and the pre-run manifest of Dir in the
// snapshot's state (FSSnapshot).
type Record struct {
	RunID      string           `json:"run_id"`
	Dir        string           `json:"dir"`
	Command    []string         `json:"command"`
	StartedAt  time.Time        `json:"started_at"`
	FailedAt   time.Time        `json:"failed_at"`
	Status     string           `json:"status"`
	FSSnapshot string           `json:"fs_snapshot"`
	Contain    string           `json:"contain"`
	Inside     []contain.Change `json:"inside"`  // under Dir (undone by the restore)
	Outside    []contain.Change `json:"outside"` // elsewhere (contained runs: discarded)
	Upper      string           `json:"upper,omitempty"`
}

var runIDRE = lazyre.New(`^[A-Za-z0-9_-]{1,64}$`)

// keepForensics records what the failed run wrote, before anything is
// undone: Dir compared with its pre-run manifest, the overlay upper
// directories listed and copied. The comparison, when made, is stored in
// *res (a copy driver's restore repairs by it instead of comparing again).
func keepForensics(opts Options, rep *Report, m *fssnap.Manifest, sess *contain.Session, residue **fssnap.Residue) error {
	id := rep.RunID
	if id == "" {
		id = rep.FSSnapshot
	}
	if !runIDRE.MatchString(id) {
		return fmt.Errorf("forensics: unusable run id %q", id)
	}
	dst := filepath.Join(opts.Forensics, id)
	if err := os.MkdirAll(dst, 0o700); err != nil {
		return err
	}
	rec := Record{RunID: id, Dir: opts.Dir, Command: opts.Args, StartedAt: rep.StartedAt, FailedAt: time.Now(), FSSnapshot: rep.FSSnapshot,
		Contain: rep.Contain, Status: statusText(rep), Inside: []contain.Change{}, Outside: []contain.Change{}}
	if m != nil {
		// The directories the run did not touch are not read: their
		// names are m's (see fssnap.VerifyKnownDirs).
		res, err := fssnap.VerifyKnownDirs(opts.Dir, m)
		if err != nil {
			return err
		}
		*residue = &res
		for _, p := range res.Added {
			rec.Inside = append(rec.Inside, statChange(filepath.Join(opts.Dir, p), "created"))
		}
		for _, c := range res.Changed {
			rec.Inside = append(rec.Inside, statChange(filepath.Join(opts.Dir, c.Path), "modified"))
		}
		for _, p := range res.Removed {
			c := contain.Change{Path: filepath.Join(opts.Dir, p), Kind: "deleted", Type: "other"}
			if e, ok := m.Lookup(p); ok {
				c.Size, c.Type = e.Size, string(e.Type)
			}
			rec.Inside = append(rec.Inside, c)
		}
	}
	if sess != nil {
		out, err := sess.Changes()
		if err != nil {
			return err
		}
		rep.Outside = out
		rec.Outside = append(rec.Outside, out...)
		rec.Upper = filepath.Join(dst, "upper")
		if err := sess.Keep(rec.Upper); err != nil {
			return err
		}
	}
	data, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	rep.Forensics = dst
	return os.WriteFile(filepath.Join(dst, "run.json"), data, 0o600)
}

func statusText(rep *Report) string {
	switch st := rep.Status; {
	case st.TimedOut:
		return "timed out"
	case st.Signal != "":
		return "killed by signal " + st.Signal
	default:
		return fmt.Sprintf("exit code %d", st.ExitCode)
	}
}

func statChange(p, kind string) contain.Change {
	c := contain.Change{Path: p, Kind: kind, Type: "other"}
	if fi, err := os.Lstat(p); err == nil {
		switch {
		case fi.Mode().IsRegular():
			c.Type, c.Size = "file", fi.Size()
		case fi.IsDir():
			c.Type = "dir"
		case fi.Mode()&os.ModeSymlink != 0:
			c.Type = "symlink"
		}
	}
	return c
}

// LoadRecord reads a failed run's record. Errors: invalid_argument for a
// malformed id, not_found when there is none (never kept, or pruned).
func LoadRecord(dir, id string) (*Record, error) {
	if !runIDRE.MatchString(id) {
		return nil, lockstep.Errorf(lockstep.EINVALID, "run id %q: letters, digits, - and _ only", id)
	}
	data, err := os.ReadFile(filepath.Join(dir, id, "run.json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, lockstep.Errorf(lockstep.ENOTFOUND, "no record of run %s in %s (kept only for failed runs, for the forensics window)", id, dir)
	}
	if err != nil {
		return nil, err
	}
	var r Record
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("run %s: %w", id, err)
	}
	return &r, nil
}

// PruneRecords drops the records older than window and returns how many.
func PruneRecords(dir string, window time.Duration, now time.Time) (int, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil || !e.IsDir() || now.Sub(fi.ModTime()) <= window {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}
