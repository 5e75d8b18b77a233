package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/api"
	"github.com/lockstep-hq/lockstep/client"
	"github.com/lockstep-hq/lockstep/fssnap"
	"github.com/lockstep-hq/lockstep/fssnap/contain"
	"github.com/lockstep-hq/lockstep/fssnap/instance"
	"github.com/lockstep-hq/lockstep/fssnap/proc"
	"github.com/lockstep-hq/lockstep/fssnap/txrun"
	"github.com/lockstep-hq/lockstep/internal/procenv"
	"github.com/lockstep-hq/lockstep/worktree"
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
	var verify bool
	if sub == "restore" {
		f.fs.BoolVar(&verify, "verify", false, "compare the restored tree with the snapshot's manifest (built from the snapshot first when the take left that for later) even when the driver restores exactly (btrfs, overlay; the copy and reflink drivers always verify)")
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
		s, err := fssnap.TakeRecorded(ctx, drv, fssnap.Options{StateRoot: sf.stateRoot, DataRoot: sf.dataRoot}, dir)
		if err != nil {
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
		var r *fssnap.Residue
		if sub == "restore" {
			r, err = restoreSnapshot(ctx, e, drv, sf, dir, pos[1], verify)
		} else {
			err = drv.Drop(dir, pos[1])
		}
		res := map[string]any{"dir": dir, "snapshot": pos[1], "driver": drv.Name(), "duration_ms": msSince(start)}
		if sub == "restore" {
			// verified: the restored tree was compared with the snapshot's
			// manifest (--verify, or a driver whose restore is not exact).
			res["verified"] = r != nil
			if r != nil {
				res["pure"] = r.Clean()
			}
		}
		if err != nil {
			if r != nil && !r.Clean() {
				out(res, "")
			}
			return err
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
	// expect, when set, is the tip the run started from: every push is a
	// compare-and-swap on it (then on the commit the run last wrote),
	// instead of on the tip read at each push.
	expect string
	pushed string // the commit Commit pushed
	// prepared: PrepareCheckpoint pushed the worktree (Checkpoint then only
	// records the checkpoint).
	prepared bool
}

func (s *serverCheckpointer) push(ctx context.Context, msg string) (*pushReport, error) {
	if s.expect == "" {
		return pushDirCache(ctx, s.c, s.dir, s.ws, client.WriteOptions{Message: msg}, true, nil, s.cache, 0)
	}
	rep, err := pushDirCache(ctx, s.c, s.dir, s.ws, client.WriteOptions{Message: msg, ExpectOID: s.expect}, false, nil, s.cache, 0)
	if err == nil && rep.Commit != "" {
		s.expect = rep.Commit
	}
	return rep, err
}

// Checkpoint pushes the worktree as it is before the run, then records the
// checkpoint with the filesystem snapshot id.
func (s *serverCheckpointer) Checkpoint(ctx context.Context, fsID string) (string, error) {
	if !s.prepared {
		if err := s.PrepareCheckpoint(ctx); err != nil {
			return "", err
		}
	}
	s.prepared = false
	cp, err := s.c.CreateCheckpoint(ctx, s.ws, api.CheckpointRequest{FSSnapshot: fsID, Label: clip("run: "+strings.Join(s.command, " "), 200)})
	if err != nil {
		return "", err
	}
	return cp.ID, nil
}

// PrepareCheckpoint pushes the worktree as it is before the run (txrun
// runs it while the filesystem snapshot is taken: both only read it).
func (s *serverCheckpointer) PrepareCheckpoint(ctx context.Context) error {
	if _, err := s.push(ctx, "checkpoint before: "+strings.Join(s.command, " ")); err != nil {
		return fmt.Errorf("push worktree: %w", err)
	}
	s.prepared = true
	return nil
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
	if s.expect != "" && r.Commit != "" {
		s.expect = r.Commit
	}
	return txrun.RestoreReport{Commit: r.Commit, Tree: r.Tree, DBRestored: r.DBRestored, FSSnapshot: r.FSSnapshot, DurationMs: r.DurationMS,
		RedisRestored: r.RedisRestored}, nil
}

// Commit pushes the successful run's result.
func (s *serverCheckpointer) Commit(ctx context.Context) error {
	rep, err := s.push(ctx, "run: "+strings.Join(s.command, " "))
	if err == nil && rep != nil {
		s.pushed = rep.Commit
	}
	return err
}

// Exit statuses of `lockstep run` beyond the command's own.
const (
	exitResidue     = 10 // the rollback left residue (ROLLBACK IMPURE)
	exitQuarantined = 11 // the machine is quarantined: run refused
)

// instanceFlags are the whole-instance containment and verification
// settings of `lockstep run`.
type instanceFlags struct {
	contain, outside, onResidue, quarantineCmd  string
	machine                                     string
	roots, crontabDir, atSpool, userUnits, size string
	mechanism                                   string
	share                                       stringList
	window                                      time.Duration
	getenv                                      func(string) string
}

type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

func (i *instanceFlags) declare(f *flagger) {
	f.str(&i.contain, "contain", "LOCKSTEP_RUN_CONTAIN", txrun.ContainInstance, "instance: the command's writes anywhere go to copy-on-write layers (root, or unprivileged user namespaces); dir: only --dir is protected")
	f.str(&i.mechanism, "contain-mechanism", "LOCKSTEP_RUN_CONTAIN_MECHANISM", contain.MechanismAuto, "how --contain instance makes the run's namespace: auto (root when root, else userns), root, or userns (an unprivileged user namespace, kernel >= 5.11)")
	f.str(&i.outside, "outside", "LOCKSTEP_RUN_OUTSIDE", txrun.OutsideKeep, "a contained run that succeeds: keep (apply its writes outside --dir) or discard them")
	f.fs.Var(&i.share, "share", "a path written through under containment (repeatable), e.g. a package cache (env LOCKSTEP_RUN_SHARE, colon-separated, when no --share is given)")
	i.getenv = f.getenv
	f.str(&i.onResidue, "on-residue", "LOCKSTEP_RUN_ON_RESIDUE", "fail", "after an impure rollback: fail, or quarantine (mark the machine dirty: later runs refuse until `lockstep run unquarantine`, and run --quarantine-command)")
	f.str(&i.machine, "machine", "LOCKSTEP_RUN_MACHINE", "", "this machine's name in run reports and the server's quarantine record (default its hostname)")
	f.str(&i.quarantineCmd, "quarantine-command", "LOCKSTEP_RUN_QUARANTINE_COMMAND", "", "shell command run when the machine is quarantined (e.g. destroy and recreate it); LOCKSTEP_RESIDUE_FILE names the residue")
	f.str(&i.roots, "instance-roots", "LOCKSTEP_INSTANCE_ROOTS", "", "colon-separated directories walked for files changed by a --contain=dir run (default /tmp:/var/tmp:/opt:$HOME)")
	f.str(&i.crontabDir, "crontab-dir", "LOCKSTEP_CRONTAB_DIR", "/var/spool/cron/crontabs", "crontab spool compared before and after a run")
	f.str(&i.atSpool, "at-spool", "LOCKSTEP_AT_SPOOL", "/var/spool/cron/atjobs", "at job spool compared before and after a run")
	f.str(&i.userUnits, "user-units-dir", "LOCKSTEP_USER_UNITS_DIR", "", "systemd user units compared before and after a run (default $HOME/.config/systemd/user)")
	f.str(&i.size, "contain-tmpfs-size", "LOCKSTEP_RUN_CONTAIN_TMPFS_SIZE", "", "size of the tmpfs holding a contained run's writes (tmpfs size=, e.g. 25% or 4g; default the kernel's, half of RAM)")
	f.dur(&i.window, "forensics-window", "LOCKSTEP_RUN_FORENSICS_WINDOW", txrun.DefaultForensicsWindow, "how long a failed run's record (what it wrote, its overlay layers) is kept for `lockstep run show`")
}

func (i *instanceFlags) check() error {
	if i.contain != txrun.ContainInstance && i.contain != txrun.ContainDir {
		return lockstep.Errorf(lockstep.EINVALID, "--contain %q: instance or dir", i.contain)
	}
	switch i.mechanism {
	case contain.MechanismAuto, contain.MechanismRoot, contain.MechanismUserns:
	default:
		return lockstep.Errorf(lockstep.EINVALID, "--contain-mechanism %q: auto, root or userns", i.mechanism)
	}
	if i.outside != txrun.OutsideKeep && i.outside != txrun.OutsideDiscard {
		return lockstep.Errorf(lockstep.EINVALID, "--outside %q: keep or discard", i.outside)
	}
	if i.onResidue != "fail" && i.onResidue != "quarantine" {
		return lockstep.Errorf(lockstep.EINVALID, "--on-residue %q: fail or quarantine", i.onResidue)
	}
	if len(i.share) == 0 && i.getenv != nil {
		for _, p := range strings.Split(i.getenv("LOCKSTEP_RUN_SHARE"), ":") {
			if p != "" {
				i.share = append(i.share, p)
			}
		}
	}
	for k, p := range i.share {
		a, err := filepath.Abs(p)
		if err != nil || a == "/" {
			return lockstep.Errorf(lockstep.EINVALID, "--share %q: an absolute path other than /", p)
		}
		i.share[k] = a
	}
	return nil
}

func (i *instanceFlags) config(e *env) *instance.Config {
	home := e.getenv("HOME")
	cfg := instance.Defaults(home)
	cfg.CrontabDir, cfg.AtSpool = i.crontabDir, i.atSpool
	if i.userUnits != "" {
		cfg.UserUnits = i.userUnits
	}
	if i.roots != "" {
		cfg.Roots = nil
		for _, r := range strings.Split(i.roots, ":") {
			if r != "" {
				cfg.Roots = append(cfg.Roots, r)
			}
		}
	}
	return &cfg
}

// quarantinePath is the marker of a machine a run left dirty.
func quarantinePath(stateRoot string) string { return filepath.Join(stateRoot, "quarantine.json") }

func forensicsDir(stateRoot string) string { return filepath.Join(stateRoot, "forensics") }

func cmdRun(ctx context.Context, e *env, args []string) error {
	if len(args) > 0 && (args[0] == "show" || args[0] == "unquarantine") {
		return cmdRunSub(ctx, e, args)
	}
	var ws, dir string
	var timeout time.Duration
	var commit, noServer bool
	var sf snapFlags
	var pol retention
	var inst instanceFlags
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
		inst.declare(f)
	})
	// --no-server needs neither a key nor a usable server URL.
	if err != nil && !(noServer && cf != nil && (lockstep.ErrorCode(err) == lockstep.EUNAUTH || checkServerURL(cf.url) != nil)) {
		return err
	}
	if len(rest) == 0 || (ws == "" && !noServer) {
		return lockstep.Errorf(lockstep.EINVALID, "usage: lockstep run --workspace WS --dir DIR [--timeout D] [--commit-on-success] [--contain instance|dir] [--egress stage|deny|off] [--share P]... -- COMMAND [ARGS...] | run show RUNID | run unquarantine")
	}
	if err := inst.check(); err != nil {
		return err
	}
	abs, err := filepath.Abs(dir)
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
	sp := runSpec{ws: ws, dir: abs, args: rest, timeout: timeout, commit: commit, noServer: noServer, sf: sf, pol: pol, inst: inst, eg: eg,
		stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr}
	if cf.json {
		sp.stdout = os.Stderr // keep stdout for the report
	}
	rep, _, err := transactionalRun(ctx, e, c, cf, sp)
	if rep != nil && rep.ContainNote != "" {
		if rep.Contain == txrun.ContainInstance {
			fmt.Fprintln(e.stderr, "lockstep run: note:", rep.ContainNote) // contained, by userns
		} else {
			fmt.Fprintln(e.stderr, "lockstep run: WARNING:", rep.ContainNote)
		}
	}
	if rep != nil {
		cf.out(e, rep, func() { printRunReport(e, rep) })
	}
	if err != nil {
		if errors.Is(err, txrun.ErrResidue) {
			fmt.Fprintln(e.stderr, "lockstep:", err)
			return exitError(exitResidue)
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

// runSpec is one transactional run: what `lockstep run` and a runner's
// job (runnercmd.go) hand to transactionalRun.
type runSpec struct {
	ws, dir          string // dir is absolute
	args             []string
	timeout          time.Duration
	commit, noServer bool
	// expect, when set, makes the run's pushes compare-and-swap on the tip
	// the run started from (a runner's job: the tip it checked out).
	expect string
	// jobEnv drops the caller's LOCKSTEP_KEY and LOCKSTEP_KEY_FILE from
	// the command's environment (a runner's key is not the job's).
	jobEnv bool
	sf     snapFlags
	pol    retention
	inst   instanceFlags
	eg     egressFlags
	stdin  *os.File // nil: /dev/null
	stdout *os.File
	stderr *os.File
}

// transactionalRun is `lockstep run`: snapshot, contain, run, roll back on
// failure, verify, report to the server (and, after an impure rollback,
// mark the workspace failed and maybe quarantine the machine). It returns
// the report, the commit pushed after a successful run (commit) and the
// run's error (txrun.ErrResidue after an impure rollback).
func transactionalRun(ctx context.Context, e *env, c *client.Client, cf *clientFlags, sp runSpec) (*txrun.Report, string, error) {
	ws, abs, rest, noServer, sf, pol, inst, eg := sp.ws, sp.dir, sp.args, sp.noServer, sp.sf, sp.pol, sp.inst, sp.eg
	stateRoot := stateRootOr(e, sf.stateRoot)
	if q, err := os.ReadFile(quarantinePath(stateRoot)); err == nil {
		fmt.Fprintf(e.stderr, "lockstep run: REFUSED: this machine is quarantined after a run left residue (%s); inspect it, then `lockstep run unquarantine --state-root %s`\n%s\n", quarantinePath(stateRoot), stateRoot, q)
		return nil, "", exitError(exitQuarantined)
	}
	if _, err := txrun.PruneRecords(forensicsDir(stateRoot), inst.window, time.Now()); err != nil {
		fmt.Fprintf(e.stderr, "lockstep run: forensics retention: %v\n", err)
	}
	sf.stateRoot = stateRoot
	drv, sopts, err := sf.driverFor(abs)
	if err != nil {
		return nil, "", err
	}
	env := runEnv(ctx, e, c, cf, ws, noServer)
	if sp.jobEnv {
		env = procenv.Drop(env, "LOCKSTEP_KEY", "LOCKSTEP_KEY_FILE")
	}
	opts := txrun.Options{Workspace: ws, Dir: abs, Args: rest, Timeout: sp.timeout, CommitOnSuccess: sp.commit, Driver: drv, Snap: sopts,
		Stdin: sp.stdin, Stdout: sp.stdout, Stderr: sp.stderr, Env: env,
		Contain: inst.contain, Share: inst.share, Outside: inst.outside, Instance: inst.config(e),
		Forensics: forensicsDir(stateRoot), ContainTmpfsSize: inst.size, ContainMechanism: inst.mechanism}
	var cp *serverCheckpointer
	if !noServer {
		cp = &serverCheckpointer{c: c, ws: ws, dir: abs, command: rest, cache: statCachePath(abs), expect: sp.expect}
		opts.Checkpointer = cp
	}
	// The egress proxy: writes the command sends through it are staged as
	// effects of the run, discarded if the run fails. Its process starts
	// now and comes up while the snapshot is taken; the command's
	// environment (the proxy's address) is awaited only when the command
	// starts.
	px, err := eg.start(e, c, cf, ws, noServer)
	if err != nil {
		return nil, "", err
	}
	if px != nil {
		base := opts.Env
		opts.EnvWait = func() ([]string, error) { return px.wait(ctx, base) }
	}
	rep, err := txrun.Run(ctx, opts)
	px.finish(ctx, e, rep, err)
	pushed := ""
	if cp != nil {
		pushed = cp.pushed
	}
	if rep != nil {
		keepSnapshots(e, drv, rep, ws, stateRoot, pol)
		// Before the residue actuator marks the workspace failed (a
		// failed workspace's refs no longer move: the report would be
		// refused).
		quarantine := errors.Is(err, txrun.ErrResidue) && inst.onResidue == "quarantine"
		reportRun(ctx, e, c, ws, noServer, rep, drv.Name(), sopts, stateRoot, forensicsDir(stateRoot), runMachine(inst.machine), quarantine)
	}
	if errors.Is(err, txrun.ErrResidue) {
		fmt.Fprintln(e.stderr, "lockstep run: ROLLBACK IMPURE: residue left behind (see report)")
		onResidue(ctx, e, c, ws, noServer, rep, inst, stateRoot)
	}
	return rep, pushed, err
}

// onResidue is the actuator of an impure rollback: the workspace is
// marked failed with the residue named (when there is a server), and with
// --on-residue quarantine the machine is marked dirty (later runs refuse)
// and --quarantine-command runs.
func onResidue(ctx context.Context, e *env, c *client.Client, ws string, noServer bool, rep *txrun.Report, inst instanceFlags, stateRoot string) {
	var names []string
	if rep != nil {
		for _, it := range rep.Residue {
			names = append(names, it.String())
		}
		for _, p := range rep.Purity.Processes {
			names = append(names, fmt.Sprintf("process pid %d: %s", p.PID, p.Cmdline))
		}
		if !rep.Purity.Files.Clean() {
			names = append(names, "files in --dir: "+rep.Purity.Files.String())
		}
	}
	if !noServer && c != nil && ws != "" {
		reason := clip("rollback left residue: "+strings.Join(names, "; "), 1000)
		if _, err := c.SetStatus(ctx, ws, "failed", reason); err != nil {
			fmt.Fprintf(e.stderr, "lockstep run: could not record the residue on workspace %s: %v\n", ws, err)
		}
	}
	if inst.onResidue != "quarantine" {
		return
	}
	q := quarantineMark{At: time.Now().UTC(), Workspace: ws, Machine: runMachine(inst.machine), Residue: names}
	if !noServer && c != nil {
		q.Server = c.BaseURL
	}
	if rep != nil {
		q.RunID, q.Dir, q.Command = rep.RunID, rep.Dir, rep.Command
	}
	data, _ := json.MarshalIndent(q, "", "  ")
	p := quarantinePath(stateRoot)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err == nil {
		err = os.WriteFile(p, data, 0o600)
		if err != nil {
			fmt.Fprintf(e.stderr, "lockstep run: could not quarantine the machine (%s): %v\n", p, err)
		}
	}
	fmt.Fprintf(e.stderr, "lockstep run: machine QUARANTINED (%s): later runs refuse until `lockstep run unquarantine`\n", p)
	if inst.quarantineCmd != "" {
		cmd := exec.CommandContext(context.WithoutCancel(ctx), "sh", "-c", inst.quarantineCmd)
		cmd.Env = append(os.Environ(), "LOCKSTEP_RESIDUE_FILE="+p)
		cmd.Stdout, cmd.Stderr = e.stderr, e.stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintf(e.stderr, "lockstep run: --quarantine-command: %v\n", err)
		}
	}
}

// quarantineMark is <state-root>/quarantine.json: the machine a run left
// dirty, and where the mark was also recorded with the server.
type quarantineMark struct {
	At        time.Time `json:"at"`
	Workspace string    `json:"workspace,omitempty"`
	Machine   string    `json:"machine"`
	Server    string    `json:"server,omitempty"` // the server told (empty: none)
	RunID     string    `json:"run_id,omitempty"`
	Dir       string    `json:"dir,omitempty"`
	Command   []string  `json:"command,omitempty"`
	Residue   []string  `json:"residue"`
}

// runMachine is the machine's name in run reports: --machine, else the
// hostname.
func runMachine(flag string) string {
	if flag != "" {
		return flag
	}
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "unknown"
	}
	return h
}

// cmdUnquarantine is `lockstep run unquarantine`: it clears the server's
// quarantine record of this machine (a run report with unquarantine set,
// on the workspace whose run quarantined it), then the local mark. When
// the server cannot be told, the local mark stays (later runs still
// refuse) and the error says why.
func cmdUnquarantine(ctx context.Context, e *env, args []string) error {
	var stateRoot, machine string
	cf, c, _, cerr := setup("run unquarantine", e, args, func(f *flagger) {
		f.str(&stateRoot, "state-root", "LOCKSTEP_SNAPSHOT_STATE", "", "where snapshot records live")
		f.str(&machine, "machine", "LOCKSTEP_RUN_MACHINE", "", "this machine's name (default: the one the quarantine recorded)")
	})
	if cf == nil {
		return cerr
	}
	stateRoot = stateRootOr(e, stateRoot)
	p := quarantinePath(stateRoot)
	data, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		fmt.Fprintf(e.stdout, "not quarantined (%s)\n", p)
		return nil
	}
	if err != nil {
		return err
	}
	var q quarantineMark
	if err := json.Unmarshal(data, &q); err != nil {
		return fmt.Errorf("read %s: %w", p, err)
	}
	if machine == "" {
		machine = q.Machine
	}
	if q.Workspace != "" && q.Server != "" && machine != "" {
		if cerr != nil {
			return fmt.Errorf("the quarantine is recorded with %s (workspace %s): clear it there first (LOCKSTEP_URL, LOCKSTEP_KEY): %w; the local mark %s stays", q.Server, q.Workspace, cerr, p)
		}
		var b [6]byte
		rand.Read(b[:])
		r := api.RunReport{RunID: "unquarantine-" + hex.EncodeToString(b[:]), Machine: machine, Unquarantine: true}
		if _, err := c.ReportRun(ctx, q.Workspace, r); err != nil {
			return fmt.Errorf("clear the quarantine of %s on workspace %s: %w; the local mark %s stays", machine, q.Workspace, err, p)
		}
		fmt.Fprintf(e.stdout, "quarantine of %s cleared on the server (workspace %s)\n", machine, q.Workspace)
	}
	if err := os.Remove(p); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "quarantine cleared (%s)\n", p)
	return nil
}

// cmdRunSub is `lockstep run show RUNID` and `lockstep run unquarantine`.
func cmdRunSub(ctx context.Context, e *env, args []string) error {
	if args[0] == "unquarantine" {
		return cmdUnquarantine(ctx, e, args[1:])
	}
	var stateRoot string
	var asJSON bool
	f := newFlagger("run "+args[0], e)
	f.str(&stateRoot, "state-root", "LOCKSTEP_SNAPSHOT_STATE", "", "where snapshot records live")
	f.fs.BoolVar(&asJSON, "json", false, "print JSON")
	if err := f.parse(args[1:]); err != nil {
		return err
	}
	stateRoot = stateRootOr(e, stateRoot)
	if len(f.pos) != 1 {
		return lockstep.Errorf(lockstep.EINVALID, "usage: lockstep run show RUNID [--json] [--state-root P]")
	}
	rec, err := txrun.LoadRecord(forensicsDir(stateRoot), f.pos[0])
	if err != nil {
		return err
	}
	if asJSON {
		return writeJSON(e.stdout, rec)
	}
	fmt.Fprintf(e.stdout, "run %s: %s, failed at %s (%s)\n  command: %s\n  dir: %s (contain=%s, snapshot %s)\n", rec.RunID, rec.Status,
		rec.FailedAt.Format(time.RFC3339), time.Since(rec.FailedAt).Round(time.Second), strings.Join(rec.Command, " "), rec.Dir, rec.Contain, rec.FSSnapshot)
	for _, part := range []struct {
		name string
		cs   []contain.Change
	}{{"inside --dir", rec.Inside}, {"outside --dir", rec.Outside}} {
		fmt.Fprintf(e.stdout, "\n%s: %d\n", part.name, len(part.cs))
		rows := [][]string{{"KIND", "TYPE", "SIZE", "PATH"}}
		for _, c := range part.cs {
			rows = append(rows, []string{c.Kind, c.Type, fmt.Sprint(c.Size), c.Path})
		}
		if len(part.cs) > 0 {
			table(e, rows)
		}
	}
	if rec.Upper != "" {
		fmt.Fprintf(e.stdout, "\nthe run's overlay layers are kept in %s\n", rec.Upper)
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
// branch, DATABASE_URL (its DSN), and when it has a Redis branch,
// REDIS_URL. The key stays in the environment only
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
		if code := lockstep.ErrorCode(err); code != lockstep.EUNAVAILABLE && code != lockstep.ENOTFOUND && code != lockstep.ENOTCONFIGURED {
			fmt.Fprintf(e.stderr, "lockstep run: no DATABASE_URL for the command: %v\n", err)
		}
	} else if db.DSN != "" {
		env = append(env, "DATABASE_URL="+db.DSN)
	}
	return redisEnv(ctx, e, c, ws, env)
}

// redisEnv adds REDIS_URL when the server branches Redis (asking creates
// the workspace's instance, so the run's checkpoint snapshots it).
func redisEnv(ctx context.Context, e *env, c *client.Client, ws string, env []string) []string {
	r, err := c.Redis(ctx, ws)
	if err != nil {
		if code := lockstep.ErrorCode(err); code != lockstep.ENOTFOUND && code != lockstep.ENOTCONFIGURED {
			fmt.Fprintf(e.stderr, "lockstep run: no REDIS_URL for the command: %v\n", err)
		}
		return env
	}
	if r.URL != "" {
		env = append(env, "REDIS_URL="+r.URL)
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
		fmt.Fprintf(e.stderr, "  code restored to %s, database restored: %v, redis restored: %v\n", short(rep.Restored.Commit), rep.Restored.DBRestored, rep.Restored.RedisRestored)
	}
	if rep.Purity.Checked {
		fmt.Fprintf(e.stderr, "  purity: clean=%v (contain=%s, whole instance verified: %v)\n", rep.Purity.Clean, rep.Contain, rep.Purity.Instance)
	}
	for _, it := range rep.Residue {
		fmt.Fprintf(e.stderr, "  RESIDUE %s\n", it)
	}
	if len(rep.Outside) > 0 {
		verb := "discarded"
		if rep.OutsideApplied {
			verb = "applied"
		}
		fmt.Fprintf(e.stderr, "  writes outside --dir (%s): %d\n", verb, len(rep.Outside))
		for i, c := range rep.Outside {
			if i == 20 {
				fmt.Fprintf(e.stderr, "    … %d more\n", len(rep.Outside)-20)
				break
			}
			fmt.Fprintf(e.stderr, "    %-8s %8d  %s\n", c.Kind, c.Size, c.Path)
		}
	}
	for _, m := range rep.Uncontained {
		if !strings.HasPrefix(m.Reason, "pseudo") { // /dev, /dev/pts…: in the JSON report only
			fmt.Fprintf(e.stderr, "  written through: %s (%s)\n", m.Path, m.Reason)
		}
	}
	if rep.Forensics != "" {
		fmt.Fprintf(e.stderr, "  what it wrote: lockstep run show %s\n", filepath.Base(rep.Forensics))
	}
	fmt.Fprintf(e.stderr, "  total %.1f ms\n", rep.TotalMs)
}

// restoreSnapshot restores dir to snapshot id (fssnap.RestoreRecorded)
// and keeps dir's push stat cache valid across it: a btrfs restore gives
// dir a new device number and keeps inodes, mtimes and ctimes, so the
// cache's entries are moved to the new device rather than every file
// being hashed again by the next push.
func restoreSnapshot(ctx context.Context, e *env, drv fssnap.Driver, sf snapFlags, dir, id string, verify bool) (*fssnap.Residue, error) {
	var before, after unix.Stat_t
	devErr := unix.Stat(dir, &before)
	s, res, err := fssnap.RestoreRecorded(ctx, drv, fssnap.Options{StateRoot: sf.stateRoot, DataRoot: sf.dataRoot}, dir, id, verify)
	if err != nil || devErr != nil || unix.Stat(dir, &after) != nil || before.Dev == after.Dev {
		return res, err
	}
	cachePath := statCachePath(dir)
	if _, serr := os.Stat(cachePath); serr != nil {
		return res, nil
	}
	c, cerr := worktree.OpenStatCache(cachePath)
	if cerr == nil {
		c.Redevice(uint64(before.Dev), uint64(after.Dev), s.CreatedAt.Add(-20*time.Millisecond).UnixNano())
		cerr = c.Save()
	}
	if cerr != nil {
		fmt.Fprintf(e.stderr, "lockstep: restore %s: stat cache %s not carried over (the next push hashes every file): %v\n", id, cachePath, cerr)
	}
	return res, nil
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
