// Package txrun runs one agent tool call as a transaction over the
// machine's state: `lockstep run --workspace WS --dir DIR -- COMMAND...`.
//
// Order (each step timed in the Report):
//
//  1. snapshot: the fssnap driver snapshots DIR;
//  2. manifest: the manifest of DIR is built (reusing hashes of the previous
//     snapshot's manifest for files whose stat did not change) and stored
//     with the snapshot;
//  3. checkpoint: the Checkpointer (the server) records code, database and
//     the filesystem snapshot id;
//  4. run: the command runs under fssnap/proc; whatever happens, every
//     process it started is killed when the main process ends;
//  5. on success: Commit when asked; on failure (non-zero exit, signal,
//     timeout, cancellation): restore_fs then verify (the manifest must
//     match and no process of the run may be alive), while
//     restore_checkpoint runs concurrently on the server (it touches
//     nothing on this machine). The report lists restore_checkpoint last.
//
// A residue after a rollback is an error (ErrResidue), never a warning: the
// retry would not start from the initial state. Steps after a failed restore
// still run, so that the report says everything that is known.
package txrun

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/fssnap"
	"github.com/lockstep-hq/lockstep/fssnap/contain"
	"github.com/lockstep-hq/lockstep/fssnap/instance"
	"github.com/lockstep-hq/lockstep/fssnap/proc"
)

// Checkpointer is the server side of a transaction (an HTTP client in the
// CLI).
type Checkpointer interface {
	// Checkpoint pushes the worktree and records a checkpoint (commit,
	// database snapshot, fsSnapshotID); it returns the checkpoint id.
	Checkpoint(ctx context.Context, fsSnapshotID string) (checkpointID string, err error)
	// Restore rolls code and database back to checkpointID, recording why
	// the run failed.
	Restore(ctx context.Context, checkpointID string, f *Failure) (RestoreReport, error)
	// Commit makes the run's result permanent (--commit-on-success).
	Commit(ctx context.Context) error
}

// CheckpointPreparer is implemented by a Checkpointer whose checkpoint
// has a part that only reads Dir (the CLI's: pushing the worktree). Run
// starts it while the filesystem snapshot is taken (both only read Dir);
// Checkpoint, called after both, then only records the checkpoint.
type CheckpointPreparer interface {
	PrepareCheckpoint(ctx context.Context) error
}

// Evidencer is implemented by a Checkpointer that keeps a failed run's
// worktree (as a commit on the server) before anything is restored: the
// damage is undone, the evidence kept. A failure to keep it does not stop
// the rollback.
type Evidencer interface {
	// Evidence keeps the failed worktree and returns the commit it made.
	Evidence(ctx context.Context, f *Failure) (commit string, err error)
}

// Failure is why a run failed, as the server records it with the restore.
type Failure struct {
	Command    []string
	Status     proc.Status
	StdoutTail string
	StderrTail string
	// Evidence is the commit keeping the failed worktree ("" if none).
	Evidence string
}

// RestoreReport is what the server restored.
type RestoreReport struct {
	Commit     string  `json:"commit,omitempty"`
	Tree       string  `json:"tree,omitempty"`
	DBRestored bool    `json:"db_restored"`
	FSSnapshot string  `json:"fs_snapshot,omitempty"`
	DurationMs float64 `json:"duration_ms,omitempty"`

	RedisRestored bool `json:"redis_restored"`
}

// Options describe one transactional run.
type Options struct {
	Workspace       string
	Dir             string
	Args            []string      // the command
	Timeout         time.Duration // 0: none
	CommitOnSuccess bool
	// Driver snapshots Dir; nil: fssnap.Detect(Dir, Snap).
	Driver fssnap.Driver
	Snap   fssnap.Options
	// Checkpointer is the server; nil runs a filesystem-only transaction.
	Checkpointer Checkpointer
	Env          []string // nil: os.Environ()
	// EnvWait, when set, is the command's environment instead of Env,
	// called once the snapshot and checkpoint are done, just before the
	// command starts (a proxy started beside the snapshot is awaited
	// there); an error ends the run before the command.
	EnvWait    func() ([]string, error)
	Stdin      *os.File
	Stdout     *os.File
	Stderr     *os.File
	KillGrace  time.Duration
	CgroupRoot string // see proc.Spec
	Now        func() time.Time
	// OutputTail keeps the last bytes of the command's standard output
	// and error (each) for the report and the server's failure record
	// (default 4 KiB; negative: none). The command then writes to pipes
	// that are copied to Stdout and Stderr as it runs.
	OutputTail int

	// Contain runs the command in its own mount namespace with every
	// writable local filesystem behind a copy-on-write overlay
	// (ContainInstance); ContainDir (or "") protects only Dir. When
	// containment is asked for but unavailable, the run goes on with Dir
	// only and the report says so (Report.ContainNote).
	Contain string
	// Share are paths written through under containment (Dir always is).
	Share []string
	// Outside says what a successful contained run's writes outside Dir
	// become: OutsideKeep (applied, the default) or OutsideDiscard.
	Outside string
	// Helper is the binary started as the namespace's helper (default:
	// this executable; it must call contain.MaybeHelper first thing).
	Helper string
	// Instance configures the whole-instance verification after a
	// rollback; nil skips it (only Dir and the run's processes are
	// checked).
	Instance *instance.Config
	// ContainTmpfsSize bounds the tmpfs holding the run's writes (see
	// contain.Options.TmpfsSize).
	ContainTmpfsSize string
	// ContainMechanism is how the namespace is made: contain.MechanismAuto
	// (or ""; root when root, else an unprivileged user namespace),
	// MechanismRoot or MechanismUserns (see contain.Detect).
	ContainMechanism string
	// ContainLayerRoot holds a userns run's layers ("": see
	// contain.UserLayerRoot).
	ContainLayerRoot string
	// Forensics, when set, is the directory a failed run's record is kept
	// in (<Forensics>/<run id>/): what it wrote inside and outside Dir,
	// the overlay upper directories.
	Forensics string
}

// Containment modes and --outside choices.
const (
	ContainInstance = "instance"
	ContainDir      = "dir"
	OutsideKeep     = "keep"
	OutsideDiscard  = "discard"
)

// UsernsNote begins the ContainNote of a run contained with
// contain.MechanismUserns.
const UsernsNote = "contained by the userns mechanism"

// DefaultOutputTail is what Options.OutputTail 0 keeps of each stream.
const DefaultOutputTail = 4 << 10

// Step is one timed step.
type Step struct {
	Name       string  `json:"name"`
	DurationMs float64 `json:"duration_ms"`
	Error      string  `json:"error,omitempty"`
}

// Purity is the proof that a rollback left nothing behind.
type Purity struct {
	Checked   bool           `json:"checked"`
	Clean     bool           `json:"clean"`
	Files     fssnap.Residue `json:"files"`
	Processes []proc.Process `json:"processes,omitempty"`
	// Instance is true when the whole instance was verified (not only
	// Dir): processes, sockets, crontabs, at jobs, user units, files.
	Instance bool `json:"instance"`
	// Scanned and Truncated describe the bounded file walk of a
	// dir-only run.
	Scanned   int  `json:"scanned,omitempty"`
	Truncated bool `json:"truncated,omitempty"`
}

// Report describes a run.
type Report struct {
	Workspace  string   `json:"workspace,omitempty"`
	Dir        string   `json:"dir"`
	Command    []string `json:"command"`
	RunID      string   `json:"run_id"`
	Driver     string   `json:"driver"`
	FSSnapshot string   `json:"fs_snapshot"`
	// TreeBytes is the size of Dir's regular files when the snapshot was
	// taken (from its manifest; 0 when unknown).
	TreeBytes  int64          `json:"tree_bytes,omitempty"`
	Checkpoint string         `json:"checkpoint,omitempty"`
	Status     proc.Status    `json:"status"`
	Succeeded  bool           `json:"succeeded"`
	RolledBack bool           `json:"rolled_back"`
	Restored   *RestoreReport `json:"restored,omitempty"`
	Committed  bool           `json:"committed"`
	Purity     Purity         `json:"purity"`
	Steps      []Step         `json:"steps"`
	StdoutTail string         `json:"stdout_tail,omitempty"`
	StderrTail string         `json:"stderr_tail,omitempty"`
	Evidence   string         `json:"evidence,omitempty"` // the commit keeping a failed run's worktree
	StartedAt  time.Time      `json:"started_at"`
	TotalMs    float64        `json:"total_ms"`

	// Contain is "instance" or "dir": what was contained.
	Contain string `json:"contain"`
	// ContainNote says why a run asked to contain the instance protects
	// only Dir (no root, no overlayfs): verification is then the only
	// guard outside Dir. A run contained in an unprivileged user
	// namespace says so here too (it begins with UsernsNote).
	ContainNote string `json:"contain_note,omitempty"`
	// Uncontained lists what a contained run could write through: shared
	// paths, read-only/pseudo/remote mounts, overlays the kernel refused.
	Uncontained []contain.Mount `json:"uncontained,omitempty"`
	// Outside is what the run wrote outside Dir (contained runs): applied
	// or discarded (OutsideApplied says which).
	Outside        []contain.Change `json:"outside,omitempty"`
	OutsideApplied bool             `json:"outside_applied"`
	// Residue names everything a rollback left behind; not empty means
	// Purity.Clean is false.
	Residue []instance.Item `json:"residue,omitempty"`
	// Forensics is the directory keeping a failed run's record.
	Forensics string `json:"forensics,omitempty"`
}

// ErrResidue is wrapped by the error Run returns when a rollback left files
// or processes behind.
var ErrResidue = errors.New("residue after rollback")

// background runs f as a step on its own goroutine; the returned wait
// gives its error and records the step (call it from Run's goroutine).
func (r *Report) background(name string, f func() error) (wait func() error) {
	t := time.Now()
	done := make(chan Step, 1)
	var err error
	go func() {
		err = f()
		s := Step{Name: name, DurationMs: ms(time.Since(t))}
		if err != nil {
			s.Error = err.Error()
		}
		done <- s
	}()
	var waited bool
	return func() error {
		if !waited {
			waited = true
			r.Steps = append(r.Steps, <-done)
		}
		return err
	}
}

func (r *Report) step(name string, f func() error) error {
	t := time.Now()
	err := f()
	s := Step{Name: name, DurationMs: ms(time.Since(t))}
	if err != nil {
		s.Error = err.Error()
	}
	r.Steps = append(r.Steps, s)
	return err
}

// Run executes opts as a transaction. The command's failure is not an
// error: it is in the report (Succeeded false, RolledBack true). Errors:
// invalid_argument for bad options; whatever the snapshot, checkpoint or
// restore steps return; ErrResidue (internal) when the rollback is impure.
// The report is returned even with an error.
func Run(ctx context.Context, opts Options) (*Report, error) {
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	rep := &Report{Workspace: opts.Workspace, Dir: opts.Dir, Command: opts.Args, StartedAt: now()}
	start := time.Now()
	defer func() { rep.TotalMs = ms(time.Since(start)) }()
	if opts.Dir == "" || len(opts.Args) == 0 {
		return rep, lockstep.Errorf(lockstep.EINVALID, "run needs a directory and a command")
	}
	drv := opts.Driver
	if drv == nil {
		var err error
		if drv, err = fssnap.Detect(opts.Dir, opts.Snap); err != nil {
			return rep, err
		}
	}
	rep.Driver = drv.Name()
	rep.Contain = ContainDir
	stateRoot := opts.Snap.StateRoot
	if stateRoot == "" {
		stateRoot = fssnap.DefaultStateRoot(os.Getenv)
	}
	var icfg instance.Config
	var pre *instance.State
	// The capture of the instance only reads it (and makes this process
	// a subreaper): it runs beside the containment's preparation, the
	// snapshot and the checkpoint, and is waited for before the command
	// starts. The processes those steps start are waited for by them, so
	// that one captured alive is gone before the check after the run.
	captured := func() error { return nil }
	if opts.Instance != nil {
		icfg = *opts.Instance
		icfg.Exclude = append(append(append(icfg.Exclude, opts.Dir, stateRoot), opts.Share...), nonEmpty(opts.Snap.DataRoot)...)
		captured = rep.background("capture_instance", func() error {
			pre = instance.Capture(icfg)
			// Orphans of the run come to us, not init: attributable.
			return proc.EnableSubreaper()
		})
		defer captured() // every return below: the capture is over before Run returns
	}
	args := opts.Args
	var uids, gids []syscall.SysProcIDMap
	var caps []uintptr
	var clone uintptr
	var sess *contain.Session
	if opts.Contain == ContainInstance {
		mech, err := contain.Detect(opts.ContainMechanism)
		if err != nil && lockstep.ErrorCode(err) == lockstep.EINVALID {
			return rep, err
		}
		if err != nil {
			rep.ContainNote = "only --dir is contained (" + err.Error() + "): writes elsewhere are not undone, verification is the only guard"
		} else {
			if _, err := exec.LookPath(opts.Args[0]); err != nil {
				return rep, lockstep.Errorf(lockstep.EINVALID, "command %q: %v", opts.Args[0], err)
			}
			helper := opts.Helper
			if helper == "" {
				var err error
				if helper, err = os.Executable(); err != nil {
					return rep, err
				}
			}
			if err := rep.step("contain", func() (err error) {
				sess, err = contain.Prepare(contain.Options{StateRoot: stateRoot, Share: append([]string{opts.Dir}, opts.Share...),
					Exclude: nonEmpty(opts.Snap.DataRoot), Cwd: opts.Dir, TmpfsSize: opts.ContainTmpfsSize,
					Mechanism: mech, Writable: contain.WritableDirs(getenvOf(opts.Env)), LayerRoot: opts.ContainLayerRoot})
				return err
			}); err != nil {
				return rep, err
			}
			defer sess.Discard() // idempotent; every path below discards itself first
			args, clone = sess.Wrap(helper, opts.Args), sess.Cloneflags()
			uids, gids, caps = sess.IDMaps()
			rep.Contain = ContainInstance
			if mech == contain.MechanismUserns {
				rep.ContainNote = fmt.Sprintf("%s (an unprivileged user and mount namespace, uid %d and gid %d mapped to themselves): "+
					"files of other users appear owned by nobody, a write the user could not make outside fails, and so does one "+
					"that needs another user's directory copied up (EOVERFLOW) or an entry made directly in a directory with a mount below it (EROFS)",
					UsernsNote, sess.UID, sess.GID)
			}
		}
	}

	// The checkpoint's first part (the CLI pushes the worktree) reads Dir
	// as the snapshot does: both at once.
	prepared := func() error { return nil }
	if p, ok := opts.Checkpointer.(CheckpointPreparer); ok {
		prepared = rep.background("checkpoint_push", func() error { return p.PrepareCheckpoint(ctx) })
		defer prepared() // every return below: the push is over before Run returns
	}
	var snap fssnap.Snapshot
	if err := rep.step("snapshot", func() (err error) {
		snap, err = drv.Take(ctx, opts.Dir)
		return err
	}); err != nil {
		return rep, err
	}
	rep.FSSnapshot = snap.ID
	m := snap.Manifest
	if err := rep.step("manifest", func() (err error) {
		if m != nil {
			return nil
		}
		if m, err = fssnap.BuildManifest(opts.Dir, previousManifest(drv, opts)); err != nil {
			return err
		}
		return fssnap.SaveManifest(opts.Snap, opts.Dir, snap.ID, m)
	}); err != nil {
		return rep, err
	}
	_, rep.TreeBytes = m.Files()
	if opts.Checkpointer != nil {
		if err := prepared(); err != nil {
			return rep, err
		}
		if err := rep.step("checkpoint", func() (err error) {
			rep.Checkpoint, err = opts.Checkpointer.Checkpoint(ctx, snap.ID)
			return err
		}); err != nil {
			return rep, err
		}
	}

	if opts.EnvWait != nil {
		if err := rep.step("env", func() (err error) {
			opts.Env, err = opts.EnvWait()
			return err
		}); err != nil {
			return rep, err
		}
	}

	var run *proc.Run
	var runErr error
	stdout, stderr := opts.Stdout, opts.Stderr
	var outTail, errTail *tailWriter
	if n := opts.OutputTail; n >= 0 {
		if n == 0 {
			n = DefaultOutputTail
		}
		var err error
		if outTail, err = newTailWriter(opts.Stdout, n); err != nil {
			return rep, err
		}
		if errTail, err = newTailWriter(opts.Stderr, n); err != nil {
			outTail.close()
			return rep, err
		}
		stdout, stderr = outTail.w, errTail.w
	}
	captured() // a failed capture or subreaper is not fatal (as before): the check says what it can
	rep.step("run", func() error {
		run, runErr = proc.Start(ctx, proc.Spec{
			Args: args, Dir: opts.Dir, Env: opts.Env, Cloneflags: clone, UidMappings: uids, GidMappings: gids, AmbientCaps: caps,
			Stdin: opts.Stdin, Stdout: stdout, Stderr: stderr,
			Timeout: opts.Timeout, KillGrace: opts.KillGrace, CgroupRoot: opts.CgroupRoot,
		})
		if outTail != nil {
			outTail.started()
			errTail.started()
		}
		if runErr != nil {
			return runErr
		}
		rep.RunID = run.ID
		rep.Status, runErr = run.Wait(ctx)
		return runErr
	})
	if outTail != nil {
		rep.StdoutTail, rep.StderrTail = outTail.finish(), errTail.finish()
	}
	if run != nil {
		defer run.Close()
	}
	rep.Succeeded = runErr == nil && rep.Status.Success()

	// From here on, cancellation of ctx must not stop the rollback.
	ctx = context.WithoutCancel(ctx)
	mntns := ""
	if run != nil {
		mntns = run.MountNS()
	}
	if sess != nil {
		for _, m := range sess.Uncontained() {
			if m.Path != opts.Dir { // Dir has its own driver
				rep.Uncontained = append(rep.Uncontained, m)
			}
		}
	}
	if rep.Succeeded {
		var errs []error
		if sess != nil {
			if err := rep.step("outside", func() (err error) {
				if opts.Outside == OutsideDiscard {
					rep.Outside, err = sess.Changes()
				} else {
					rep.Outside, err = sess.Apply()
					rep.OutsideApplied = err == nil
				}
				if derr := sess.Discard(); err == nil {
					err = derr
				}
				return err
			}); err != nil {
				errs = append(errs, err)
			}
		}
		if res := run.Residue(); len(res) > 0 {
			rep.Purity.Processes = res
			errs = append(errs, fmt.Errorf("%w: %w", ErrResidue, lockstep.Errorf(lockstep.EINTERNAL, "%d processes of the run survived it", len(res))))
		}
		if opts.CommitOnSuccess && opts.Checkpointer != nil {
			if err := rep.step("commit", func() error { return opts.Checkpointer.Commit(ctx) }); err != nil {
				errs = append(errs, err)
			} else {
				rep.Committed = true
			}
		}
		return rep, errors.Join(errs...)
	}

	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	addErr := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	if runErr != nil {
		addErr(runErr)
	}
	rep.RolledBack = true
	failure := &Failure{Command: opts.Args, Status: rep.Status, StdoutTail: rep.StdoutTail, StderrTail: rep.StderrTail}
	// Keep the failed worktree as evidence before anything is restored
	// (it reads Dir, as the forensics below do, at the same time; the
	// restore of Dir waits for both); then the server's restore (code,
	// database), which records the evidence commit and touches nothing on
	// this machine, runs while Dir is restored and verified.
	var evStep, serverStep Step
	evidenceKept := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		if ev, ok := opts.Checkpointer.(Evidencer); ok && rep.Checkpoint != "" {
			t := time.Now()
			commit, err := ev.Evidence(ctx, failure)
			evStep = Step{Name: "evidence", DurationMs: ms(time.Since(t))}
			if err != nil {
				evStep.Error = err.Error()
				addErr(err)
			}
			failure.Evidence = commit
		}
		close(evidenceKept)
		if opts.Checkpointer == nil || rep.Checkpoint == "" {
			return
		}
		t := time.Now()
		rr, err := opts.Checkpointer.Restore(ctx, rep.Checkpoint, failure)
		serverStep = Step{Name: "restore_checkpoint", DurationMs: ms(time.Since(t))}
		if err != nil {
			serverStep.Error = err.Error()
			addErr(err)
			return
		}
		rep.Restored = &rr
	}()
	// before is Dir compared with m by the forensics, before the restore.
	var before *fssnap.Residue
	if opts.Forensics != "" {
		// A record that cannot be kept is said in the step, but does not
		// stop or fail the rollback.
		rep.step("forensics", func() error { return keepForensics(opts, rep, m, sess, &before) })
	}
	if sess != nil {
		if rep.Outside == nil {
			// A listing that fails is said in its step but fails nothing:
			// the listing is forensics, the discard below the guarantee.
			rep.step("list_outside", func() (err error) {
				rep.Outside, err = sess.Changes()
				return err
			})
		}
		if err := rep.step("discard_layers", func() error { return sess.Discard() }); err != nil {
			addErr(err)
		}
	}
	<-evidenceKept
	rep.Evidence = failure.Evidence
	if evStep.Name != "" {
		rep.Steps = append(rep.Steps, evStep)
	}
	if err := rep.step("restore_fs", func() error {
		// The copy drivers' restore is that same comparison and a repair:
		// reuse the forensics' comparison (Dir is unchanged since: the
		// run's processes are gone, the layers discarded are outside
		// Dir); the verify below is the guard either way.
		if rr, ok := drv.(fssnap.ResidueRestorer); ok && before != nil {
			return rr.RestoreResidue(ctx, opts.Dir, snap.ID, m, *before)
		}
		return drv.Restore(ctx, opts.Dir, snap.ID)
	}); err != nil {
		addErr(err)
	}
	rep.step("verify", func() error {
		rep.Purity.Checked = true
		// The three checks only read (Dir, /proc, the instance): at
		// once, the file walk's waits beside the /proc scans.
		var (
			procs []proc.Process
			ir    instance.Report
			cw    sync.WaitGroup
		)
		if run != nil {
			cw.Go(func() { procs = run.Residue() })
		}
		if pre != nil {
			cw.Go(func() { ir = instance.Check(pre, icfg, mntns, sess == nil) })
		}
		// The guard: every path of m is lstat'ed and compared; a
		// directory is read unless its stat says its names are m's (any
		// entry the restore, or anything else, created there moved its
		// ctime: fssnap.VerifyKnownDirs).
		res, err := fssnap.VerifyKnownDirs(opts.Dir, m)
		cw.Wait()
		if err != nil {
			addErr(err)
			return err
		}
		rep.Purity.Files = res
		rep.Purity.Processes = procs
		if sess != nil {
			if err := sess.Discarded(); err != nil {
				rep.Residue = append(rep.Residue, instance.Item{Kind: instance.KindLayer, Path: sess.Base, Detail: err.Error()})
			}
		}
		if pre != nil {
			rep.Residue = append(rep.Residue, ir.Items...)
			rep.Purity.Instance, rep.Purity.Scanned, rep.Purity.Truncated = true, ir.Scanned, ir.Truncated
		}
		rep.Purity.Clean = res.Clean() && len(rep.Purity.Processes) == 0 && len(rep.Residue) == 0
		if !rep.Purity.Clean {
			err := lockstep.Errorf(lockstep.EINTERNAL, "rollback of %s left %s, %d processes of the run and %d residue items on the instance", opts.Dir, res, len(rep.Purity.Processes), len(rep.Residue)).
				WithDetails(map[string]any{"files": res, "processes": rep.Purity.Processes, "residue": rep.Residue})
			addErr(fmt.Errorf("%w: %w", ErrResidue, err))
			return err
		}
		return nil
	})
	wg.Wait()
	if serverStep.Name != "" {
		rep.Steps = append(rep.Steps, serverStep)
	}
	return rep, errors.Join(errs...)
}

// previousManifest finds the stored manifest of the newest earlier snapshot,
// so that only files whose stat changed are hashed again.
func previousManifest(drv fssnap.Driver, opts Options) *fssnap.Manifest {
	snaps, err := drv.List(opts.Dir)
	if err != nil {
		return nil
	}
	for i := len(snaps) - 2; i >= 0; i-- { // the last one is the snapshot just taken
		if m, err := fssnap.LoadManifest(opts.Snap, opts.Dir, snaps[i].ID); err == nil {
			return m
		}
	}
	return nil
}

func nonEmpty(ss ...string) []string {
	var out []string
	for _, s := range ss {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

// getenvOf looks names up in env (nil: this process's environment).
func getenvOf(env []string) func(string) string {
	if env == nil {
		return os.Getenv
	}
	return func(k string) string {
		v := ""
		for _, kv := range env {
			if strings.HasPrefix(kv, k+"=") {
				v = kv[len(k)+1:] // the last one wins, as for exec
			}
		}
		return v
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
