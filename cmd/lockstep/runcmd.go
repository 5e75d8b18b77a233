package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/api"
	"github.com/lockstep-hq/lockstep/client"
	"github.com/lockstep-hq/lockstep/fssnap"
	"github.com/lockstep-hq/lockstep/fssnap/proc"
	"github.com/lockstep-hq/lockstep/fssnap/txrun"
)

// snapOptions reads the filesystem-snapshot flags.
type snapFlags struct {
	driver, stateRoot, dataRoot string
}

func (s *snapFlags) declare(f *flagger) {
	f.str(&s.driver, "driver", "LOCKSTEP_SNAPSHOT_DRIVER", "", "overlay, btrfs, reflink or copy (default: detected for the directory)")
	f.str(&s.stateRoot, "state-root", "LOCKSTEP_SNAPSHOT_STATE", "", "where snapshot records live (default /var/lib/lockstep/snapshots as root, else $XDG_STATE_HOME/lockstep/snapshots)")
	f.str(&s.dataRoot, "data-root", "LOCKSTEP_SNAPSHOT_DATA", "", "where snapshot data lives (default: on the directory's filesystem)")
}

func (s *snapFlags) driverFor(dir string) (fssnap.Driver, fssnap.Options, error) {
	opts := fssnap.Options{StateRoot: s.stateRoot, DataRoot: s.dataRoot}
	if s.driver != "" {
		d, err := fssnap.New(s.driver, opts)
		return d, opts, err
	}
	d, err := fssnap.Detect(dir, opts)
	return d, opts, err
}

func cmdSnapshot(ctx context.Context, e *env, args []string) error {
	const usageText = "usage: lockstep snapshot take DIR | restore DIR ID | list DIR | drop DIR ID | prune DIR [--keep N] [--keep-failed D] [--dry-run] | prepare DIR | unprepare DIR  [--driver D] [--state-root P]"
	usage := lockstep.Errorf(lockstep.EINVALID, usageText)
	if done, err := subcommands(e, "snapshot", usageText, args); done {
		return err
	}
	sub := args[0]
	var sf snapFlags
	var asJSON, dry, quiet bool
	var pol retention
	f := newFlagger("snapshot "+sub, e)
	sf.declare(f)
	f.fs.BoolVar(&asJSON, "json", false, "print JSON")
	if sub == "take" {
		f.fs.BoolVar(&quiet, "quiet", false, "print only the snapshot id")
	}
	if sub == "prune" {
		pol.declare(f)
		f.fs.BoolVar(&dry, "dry-run", false, "only say what would be dropped")
	}
	if err := f.parse(args[1:]); err != nil {
		return err
	}
	pos := f.pos
	if len(pos) < 1 {
		return usage
	}
	dir, err := filepath.Abs(pos[0])
	if err != nil {
		return err
	}
	drv, _, err := sf.driverFor(dir)
	if err != nil {
		return err
	}
	out := func(v any, human string) error {
		if asJSON {
			enc := json.NewEncoder(e.stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(v)
		}
		fmt.Fprintln(e.stdout, human)
		return nil
	}
	start := time.Now()
	switch sub {
	case "take":
		s, err := drv.Take(ctx, dir)
		if err != nil {
			return err
		}
		m := s.Manifest
		if m == nil {
			if m, err = fssnap.BuildManifest(dir, nil); err != nil {
				return err
			}
		}
		if err := fssnap.SaveManifest(fssnap.Options{StateRoot: sf.stateRoot, DataRoot: sf.dataRoot}, dir, s.ID, m); err != nil {
			return err
		}
		if quiet && !asJSON {
			fmt.Fprintln(e.stdout, s.ID)
			return nil
		}
		return out(map[string]any{"snapshot": s, "duration_ms": msSince(start)}, fmt.Sprintf("%s snapshot %s of %s (%.1f ms)", s.Driver, s.ID, dir, msSince(start)))
	case "restore", "drop":
		if len(pos) != 2 {
			return usage
		}
		if sub == "restore" {
			err = drv.Restore(ctx, dir, pos[1])
		} else {
			err = drv.Drop(dir, pos[1])
		}
		if err != nil {
			return err
		}
		res := map[string]any{"dir": dir, "snapshot": pos[1], "driver": drv.Name(), "duration_ms": msSince(start)}
		if sub == "restore" {
			if m, err := fssnap.LoadManifest(fssnap.Options{StateRoot: sf.stateRoot, DataRoot: sf.dataRoot}, dir, pos[1]); err == nil {
				r, err := fssnap.Verify(dir, m)
				if err != nil {
					return err
				}
				res["pure"] = r.Clean()
				if !r.Clean() {
					out(res, "")
					return lockstep.Errorf(lockstep.EINTERNAL, "restore left residue: %s", r)
				}
			}
		}
		return out(res, fmt.Sprintf("%s %s: %s (%.1f ms)", sub, pos[1], dir, msSince(start)))
	case "list":
		snaps, err := drv.List(dir)
		if err != nil {
			return err
		}
		if asJSON {
			if snaps == nil {
				snaps = []fssnap.Snapshot{}
			}
			return out(map[string]any{"dir": dir, "snapshots": snaps}, "")
		}
		rows := [][]string{{"ID", "DRIVER", "CREATED", "FILES"}}
		for _, s := range snaps {
			rows = append(rows, []string{s.ID, s.Driver, s.CreatedAt.Format("2006-01-02 15:04:05"), fmt.Sprint(s.Files)})
		}
		table(e, rows)
		return nil
	case "prune":
		plan, err := prune(drv, dir, stateRootOr(e, sf.stateRoot), pol, dry, time.Now())
		if plan == nil {
			plan = []pruneItem{}
		}
		if asJSON {
			if werr := writeJSON(e.stdout, map[string]any{"dir": dir, "dry_run": dry, "snapshots": plan}); werr != nil {
				return werr
			}
			return err
		}
		rows := [][]string{{"ID", "CREATED", "RUN", "ACTION", "REASON"}}
		dropped := 0
		for _, it := range plan {
			act := it.Action
			if act == "drop" {
				dropped++
				if dry {
					act = "would drop"
				}
			}
			if it.Error != "" {
				act += " (failed: " + it.Error + ")"
			}
			rows = append(rows, []string{it.ID, it.CreatedAt.Format("2006-01-02 15:04:05"), humanValue(it.Outcome), act, it.Reason})
		}
		table(e, rows)
		verb := "dropped"
		if dry {
			verb = "would drop"
		}
		fmt.Fprintf(e.stdout, "%s %d of %d snapshots of %s\n", verb, dropped, len(plan), dir)
		return err
	case "prepare", "unprepare":
		p, ok := drv.(fssnap.Preparer)
		if !ok {
			d, err := fssnap.New(fssnap.NameOverlay, fssnap.Options{StateRoot: sf.stateRoot, DataRoot: sf.dataRoot})
			if err != nil {
				return err
			}
			p = d.(fssnap.Preparer)
		}
		if sub == "prepare" {
			err = p.Prepare(ctx, dir)
		} else {
			err = p.Unprepare(ctx, dir)
		}
		if err != nil {
			return err
		}
		return out(map[string]any{"dir": dir, sub + "d": true}, fmt.Sprintf("%sd %s", sub, dir))
	}
	return usage
}

// serverCheckpointer is the server side of `lockstep run`: it pushes the
// worktree and records checkpoints over the HTTP API.
type serverCheckpointer struct {
	c       *client.Client
	ws      string
	dir     string
	command []string
	cache   string
}

func (s *serverCheckpointer) push(ctx context.Context, msg string) (*pushReport, error) {
	return pushDirCache(ctx, s.c, s.dir, s.ws, client.WriteOptions{Message: msg}, true, nil, s.cache)
}

// Checkpoint pushes the worktree as it is before the run, then records the
// checkpoint with the filesystem snapshot id.
func (s *serverCheckpointer) Checkpoint(ctx context.Context, fsID string) (string, error) {
	if _, err := s.push(ctx, "checkpoint before: "+strings.Join(s.command, " ")); err != nil {
		return "", fmt.Errorf("push worktree: %w", err)
	}
	cp, err := s.c.CreateCheckpoint(ctx, s.ws, api.CheckpointRequest{FSSnapshot: fsID, Label: clip("run: "+strings.Join(s.command, " "), 200)})
	if err != nil {
		return "", err
	}
	return cp.ID, nil
}

// Evidence pushes the failed run's worktree as an attempt before anything
// is restored: the damage is undone, the evidence kept.
// Its commit message says how the run failed.
func (s *serverCheckpointer) Evidence(ctx context.Context, f *txrun.Failure) (string, error) {
	rep, err := s.push(ctx, evidenceMessage(f))
	if err != nil {
		return "", err
	}
	return rep.Commit, nil
}

// evidenceMessage is the commit message of a failed run's evidence: the
// command, how it ended, and the tail of its error output.
func evidenceMessage(f *txrun.Failure) string {
	var b strings.Builder
	fmt.Fprintf(&b, "failed run: %s\n\n%s after %.1f s\n", clip(strings.Join(f.Command, " "), 200), failureText(f.Status), f.Status.DurationMs/1000)
	if t := strings.TrimSpace(f.StderrTail); t != "" {
		fmt.Fprintf(&b, "\nstderr (last lines):\n%s\n", lastLines(t, 20))
	} else if t := strings.TrimSpace(f.StdoutTail); t != "" {
		fmt.Fprintf(&b, "\nstdout (last lines):\n%s\n", lastLines(t, 20))
	}
	return b.String()
}

// failureText says how a command ended: "exit code 3", "killed by
// signal killed", "timed out".
func failureText(st proc.Status) string {
	switch {
	case st.TimedOut:
		return "timed out"
	case st.Signal != "":
		return "killed by signal " + st.Signal
	}
	return fmt.Sprintf("exit code %d", st.ExitCode)
}

func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Restore rolls code and database back on the server and records why the
// run failed (exit code, duration, output tails, the evidence commit).
func (s *serverCheckpointer) Restore(ctx context.Context, id string, f *txrun.Failure) (txrun.RestoreReport, error) {
	r, err := s.c.RestoreCheckpoint(ctx, s.ws, id, api.RestoreRequest{Failure: &api.Failure{Command: s.command, ExitCode: f.Status.ExitCode, Signal: f.Status.Signal,
		TimedOut: f.Status.TimedOut, DurationMS: f.Status.DurationMs, StdoutTail: f.StdoutTail, StderrTail: f.StderrTail,
		Evidence: f.Evidence, Reason: failureText(f.Status)}})
	if err != nil {
		return txrun.RestoreReport{}, err
	}
	return txrun.RestoreReport{Commit: r.Commit, Tree: r.Tree, DBRestored: r.DBRestored, FSSnapshot: r.FSSnapshot, DurationMs: r.DurationMS}, nil
}

// Commit pushes the successful run's result.
func (s *serverCheckpointer) Commit(ctx context.Context) error {
	_, err := s.push(ctx, "run: "+strings.Join(s.command, " "))
	return err
}

func cmdRun(ctx context.Context, e *env, args []string) error {
	var ws, dir string
	var timeout time.Duration
	var commit, noServer bool
	var sf snapFlags
	var pol retention
	var eg egressFlags
	cf, c, rest, err := setup("run", e, args, func(f *flagger) {
		pol.declare(f)
		eg.declare(f)
		f.fs.StringVar(&ws, "workspace", "", "workspace the run belongs to (required unless --no-server)")
		f.fs.StringVar(&dir, "dir", ".", "the agent's working directory to protect")
		f.fs.DurationVar(&timeout, "timeout", 0, "kill the command after this long (a failure)")
		f.fs.BoolVar(&commit, "commit-on-success", false, "push the result when the command succeeds")
		f.fs.BoolVar(&noServer, "no-server", false, "filesystem-only transaction (no push, no checkpoint)")
		sf.declare(f)
	})
	if err != nil && !(noServer && lockstep.ErrorCode(err) == lockstep.EUNAUTH) {
		return err
	}
	if len(rest) == 0 || (ws == "" && !noServer) {
		return lockstep.Errorf(lockstep.EINVALID, "usage: lockstep run --workspace WS --dir DIR [--timeout D] [--commit-on-success] [--egress stage|deny|off] -- COMMAND [ARGS...]")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	drv, sopts, err := sf.driverFor(abs)
	if err != nil {
		return err
	}
	// A relative command path is the caller's, as a shell would read it,
	// not --dir's (the command runs in --dir).
	if p := rest[0]; strings.ContainsRune(p, '/') && !filepath.IsAbs(p) {
		a, err := filepath.Abs(p)
		if err != nil {
			return err
		}
		rest = append([]string{a}, rest[1:]...)
	}
	opts := txrun.Options{Workspace: ws, Dir: abs, Args: rest, Timeout: timeout, CommitOnSuccess: commit, Driver: drv, Snap: sopts,
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Env: runEnv(ctx, e, c, cf, ws, noServer)}
	if cf.json {
		opts.Stdout = os.Stderr // keep stdout for the report
	}
	if !noServer {
		opts.Checkpointer = &serverCheckpointer{c: c, ws: ws, dir: abs, command: rest, cache: statCachePath(abs)}
	}
	// The egress proxy: writes the command sends through it are staged as
	// effects of the run, discarded if the run fails.
	var px *runEgress
	if px, opts.Env, err = eg.start(c, cf, ws, noServer, opts.Env); err != nil {
		return err
	}
	rep, err := txrun.Run(ctx, opts)
	px.finish(ctx, e, rep, err)
	if rep != nil {
		cf.out(e, rep, func() { printRunReport(e, rep) })
		keepSnapshots(e, drv, rep, ws, stateRootOr(e, sf.stateRoot), pol)
	}
	if err != nil {
		if errors.Is(err, txrun.ErrResidue) {
			fmt.Fprintln(e.stderr, "lockstep run: ROLLBACK IMPURE: residue left behind (see report)")
		}
		if cf.json && rep != nil {
			// The report (with the error in its steps) is the one JSON
			// document on stdout; the error line goes to stderr.
			fmt.Fprintln(e.stderr, "lockstep:", err)
			return exitError(exitCode(err))
		}
		return err
	}
	if !rep.Succeeded {
		code := rep.Status.ExitCode
		if code <= 0 {
			code = 1
		}
		return exitError(code)
	}
	return nil
}

// keepSnapshots records how the run ended next to its filesystem
// snapshot and applies the retention policy to the directory: the
// snapshot of a run refused before it started goes at once, the newest
// --keep stay, failed runs' stay for --keep-failed.
func keepSnapshots(e *env, drv fssnap.Driver, rep *txrun.Report, ws, stateRoot string, pol retention) {
	if rep.FSSnapshot == "" {
		return
	}
	outcome := runSucceeded
	switch {
	case rep.Succeeded:
	case rep.RolledBack:
		outcome = runFailed
	default:
		outcome = runNotRun
	}
	if err := recordRun(stateRoot, runRecord{Snapshot: rep.FSSnapshot, Dir: rep.Dir, Workspace: ws, Outcome: outcome, At: time.Now()}); err != nil {
		fmt.Fprintf(e.stderr, "lockstep run: could not record the run of snapshot %s: %v\n", rep.FSSnapshot, err)
	}
	if outcome == runNotRun || pol.Keep > 0 {
		if _, err := prune(drv, rep.Dir, stateRoot, pol, false, time.Now()); err != nil {
			fmt.Fprintf(e.stderr, "lockstep run: snapshot retention: %v\n", err)
		}
	}
}

// runEnv is the command's environment: the caller's, plus
// LOCKSTEP_WORKSPACE, LOCKSTEP_URL and, when the workspace has a database
// branch, DATABASE_URL (its DSN). The key stays in the environment only
// if the caller had it there.
func runEnv(ctx context.Context, e *env, c *client.Client, cf *clientFlags, ws string, noServer bool) []string {
	env := os.Environ()
	if ws != "" {
		env = append(env, "LOCKSTEP_WORKSPACE="+ws)
	}
	if noServer || c == nil {
		return env
	}
	env = append(env, "LOCKSTEP_URL="+cf.url)
	db, err := c.Database(ctx, ws)
	if err != nil {
		if code := lockstep.ErrorCode(err); code != lockstep.EUNAVAILABLE && code != lockstep.ENOTFOUND {
			fmt.Fprintf(e.stderr, "lockstep run: no DATABASE_URL for the command: %v\n", err)
		}
		return env
	}
	if db.DSN != "" {
		env = append(env, "DATABASE_URL="+db.DSN)
	}
	return env
}

func printRunReport(e *env, rep *txrun.Report) {
	switch {
	case rep.Succeeded:
		fmt.Fprintf(e.stderr, "\nlockstep run succeeded (%s driver, snapshot %s, checkpoint %s)\n", rep.Driver, rep.FSSnapshot, rep.Checkpoint)
	case !rep.RolledBack:
		// Refused before the command started: nothing ran, nothing to undo.
		fmt.Fprintf(e.stderr, "\nlockstep run: NOT RUN: refused before the command started (nothing changed)\n")
	default:
		fmt.Fprintf(e.stderr, "\nlockstep run FAILED → rolled back (%s driver, snapshot %s, checkpoint %s)\n", rep.Driver, rep.FSSnapshot, rep.Checkpoint)
		fmt.Fprintf(e.stderr, "  command: %s after %.1f s\n", failureText(rep.Status), rep.Status.DurationMs/1000)
		if rep.Evidence != "" {
			fmt.Fprintf(e.stderr, "  failed worktree kept as evidence: %s\n", short(rep.Evidence))
		}
	}
	for _, s := range rep.Steps {
		line := fmt.Sprintf("  %-20s %8.1f ms", s.Name, s.DurationMs)
		if s.Error != "" {
			line += "  error: " + s.Error
		}
		fmt.Fprintln(e.stderr, line)
	}
	if rep.Restored != nil {
		fmt.Fprintf(e.stderr, "  code restored to %s, database restored: %v\n", short(rep.Restored.Commit), rep.Restored.DBRestored)
	}
	if rep.Purity.Checked {
		fmt.Fprintf(e.stderr, "  purity: clean=%v\n", rep.Purity.Clean)
	}
	fmt.Fprintf(e.stderr, "  total %.1f ms\n", rep.TotalMs)
}

// statCachePath keeps the push stat cache outside the pushed directory, in
// the user's cache dir, keyed by the directory's absolute path: lockstep
// never writes into the tree it snapshots.
func statCachePath(absDir string) string { return client.DefaultStatCachePath(absDir) }

// clip shortens s to at most n bytes on a rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	n -= len("…")
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
