package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/api"
	"github.com/lockstep-hq/lockstep/client"
	"github.com/lockstep-hq/lockstep/internal/procenv"
	"github.com/lockstep-hq/lockstep/runner"
)

// cmdRunner parses `lockstep runner`'s flags and runs package runner: a
// small CI that receives gate hooks, tests each commit and posts a check.
func cmdRunner(ctx context.Context, e *env, args []string) error {
	// The commands a runner starts run as its user: its key (in its
	// environment) must not be readable from /proc/<runner>/environ.
	if err := procenv.Hide(); err != nil {
		return fmt.Errorf("runner: hide this process's environment from its commands: %w", err)
	}
	if jobs, rest := hasJobsFlag(args); jobs {
		return cmdRunnerJobs(ctx, e, rest)
	}
	var o runner.Options
	var secretFile string
	var events multiFlag
	cf, c, rest, err := setup("runner", e, args, func(f *flagger) {
		f.fs.StringVar(&o.Repo, "repo", "", "base repository whose workspaces to test (required)")
		f.fs.StringVar(&o.Check, "check", "", "check name to post (required)")
		f.fs.StringVar(&o.Listen, "listen", "127.0.0.1:0", "address the hook receiver listens on")
		f.fs.StringVar(&o.PublicURL, "public-url", "", "URL the server reaches the receiver at (default: http://<listen>/hook)")
		f.fs.DurationVar(&o.Timeout, "timeout", 10*time.Minute, "kill the command after this long (the check fails)")
		f.fs.IntVar(&o.Parallel, "parallel", 1, "commits tested at once")
		f.fs.Var(&events, "event", "events to test on (default push)")
		f.fs.StringVar(&secretFile, "secret-file", "", "file with the hook secret (first line; more lines: further secrets accepted, for a rotation); default: a random one")
		f.fs.DurationVar(&o.Tolerance, "tolerance", client.DefaultWebhookTolerance, "refuse deliveries whose webhook-timestamp is further than this from now")
	})
	if err != nil {
		return err
	}
	if o.Repo == "" || o.Check == "" || len(rest) == 0 {
		return lockstep.Errorf(lockstep.EINVALID, "usage: lockstep runner --repo R --check NAME -- COMMAND [ARGS...]")
	}
	if secretFile != "" {
		b, err := os.ReadFile(secretFile)
		if err != nil {
			return fmt.Errorf("--secret-file: %w", err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			if l = strings.TrimSpace(l); l != "" {
				o.Secrets = append(o.Secrets, l)
			}
		}
		if len(o.Secrets) == 0 {
			return lockstep.Errorf(lockstep.EINVALID, "--secret-file %s is empty", secretFile)
		}
	}
	o.Client, o.Command, o.Events, o.Quiet = c, rest, events, cf.json
	o.Stdout, o.Stderr = e.stdout, e.stderr
	return runner.Run(ctx, o)
}

// hasJobsFlag reports whether args (before a "--") ask for the jobs mode,
// and returns them without the flag.
func hasJobsFlag(args []string) (bool, []string) {
	for i, a := range args {
		if a == "--" {
			break
		}
		if a == "--jobs" || a == "-jobs" {
			return true, append(append([]string{}, args[:i]...), args[i+1:]...)
		}
	}
	return false, args
}

// cmdRunnerJobs is `lockstep runner --jobs`: register with the server
// (runner key), long-poll for run jobs of the workspaces given, and run
// each as `lockstep run` (transactionalRun, the same code) on a fresh
// checkout of the workspace's tip, streaming its output back and posting
// its result. The runner dials out: nothing listens.
func cmdRunnerJobs(ctx context.Context, e *env, args []string) error {
	var name, wsList, workDir string
	var sf snapFlags
	var pol retention
	var inst instanceFlags
	var eg egressFlags
	host, _ := os.Hostname()
	cf, c, _, err := setup("runner --jobs", e, args, func(f *flagger) {
		f.str(&name, "name", "LOCKSTEP_RUNNER_NAME", strings.ToLower(host), "runner name (a runner registering again with its key and name keeps its id)")
		f.str(&wsList, "workspaces", "LOCKSTEP_RUNNER_WORKSPACES", "", "comma-separated workspace name prefixes this runner takes jobs for (\"*\": every workspace) (required)")
		f.str(&workDir, "work-dir", "LOCKSTEP_RUNNER_WORK_DIR", "", "where each job's fresh checkout is made (default: the system temp dir)")
		sf.declare(f)
		pol.declare(f)
		inst.declare(f)
		eg.declare(f)
	})
	if err != nil {
		return err
	}
	var prefixes []string
	for _, p := range strings.Split(wsList, ",") {
		if p = strings.TrimSpace(p); p != "" {
			prefixes = append(prefixes, p)
		}
	}
	if len(prefixes) == 0 {
		return lockstep.Errorf(lockstep.EINVALID, "usage: lockstep runner --jobs --workspaces PREFIX[,PREFIX...] [--name N] [--work-dir D] [lockstep run's --contain, --driver... flags]")
	}
	if err := inst.check(); err != nil {
		return err
	}
	reg := api.RunnerRegistration{Name: name, Workspaces: prefixes}
	var info *api.RunnerInfo
	for info == nil {
		if info, err = c.RegisterRunner(ctx, reg); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if code := lockstep.ErrorCode(err); code == lockstep.EFORBIDDEN || code == lockstep.EUNAUTH || code == lockstep.EINVALID {
				return err
			}
			fmt.Fprintf(e.stderr, "lockstep runner: register: %v (retrying)\n", err)
			info = nil
			sleepCtx(ctx, time.Second)
		}
	}
	fmt.Fprintf(e.stderr, "lockstep runner: registered as %s (%s) for workspaces %s\n", info.ID, info.Name, strings.Join(prefixes, ","))
	tmpl := runSpec{sf: sf, pol: pol, inst: inst, eg: eg, jobEnv: true}
	for ctx.Err() == nil {
		tj, err := c.TakeRunJob(ctx, info.ID, info.PollSeconds)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if lockstep.ErrorCode(err) == lockstep.ENOTFOUND { // the server lost the registration
				if again, rerr := c.RegisterRunner(ctx, reg); rerr == nil {
					info = again
				}
			}
			fmt.Fprintf(e.stderr, "lockstep runner: taking a job: %v (retrying)\n", err)
			sleepCtx(ctx, time.Second)
			continue
		}
		if tj == nil {
			continue
		}
		fmt.Fprintf(e.stderr, "lockstep runner: job %s on %s: %s\n", tj.Job.ID, tj.Job.Workspace, strings.Join(tj.Job.Command, " "))
		res := runOneJob(ctx, e, c, cf, info, tj, tmpl, workDir)
		if err := c.FinishRunJob(context.WithoutCancel(ctx), info.ID, tj.Job.ID, res); err != nil {
			fmt.Fprintf(e.stderr, "lockstep runner: job %s: posting the result: %v\n", tj.Job.ID, err)
		}
	}
	return nil
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// runOneJob checks the job's workspace out at its tip into a fresh
// directory and runs the command there with the job's key, streaming the
// output; losing the lease (the server gave the job up) stops the run.
func runOneJob(ctx context.Context, e *env, c *client.Client, cf *clientFlags, info *api.RunnerInfo, tj *api.TakenJob, sp runSpec, workDir string) api.RunJobResult {
	job := tj.Job
	var res api.RunJobResult
	jctx, cancel := context.WithCancel(ctx)
	defer cancel()
	jcf := *cf
	jcf.key, jcf.keyFile, jcf.json = tj.Key, "", true
	jc, err := jcf.client()
	if err != nil {
		res.Error = err.Error()
		return res
	}
	dir, err := os.MkdirTemp(workDir, "lockstep-job-")
	if err != nil {
		res.Error = err.Error()
		return res
	}
	defer os.RemoveAll(dir)
	commit, _, err := jc.Checkout(jctx, job.Workspace, "HEAD", dir, nil)
	if err != nil {
		res.Error = "checkout: " + lockstep.ErrorMessage(err)
		return res
	}
	res.CheckedOut = commit
	out := newJobOutput(jctx, c, info.ID, job.ID, time.Duration(tj.LeaseSeconds*float64(time.Second))/3, cancel)
	defer out.close()
	outW, errW, err := out.pipes()
	if err != nil {
		res.Error = err.Error()
		return res
	}
	sp.ws, sp.dir, sp.args, sp.commit, sp.expect = job.Workspace, dir, job.Command, job.Push, commit
	sp.timeout = time.Duration(tj.TimeoutMS) * time.Millisecond
	sp.stdout, sp.stderr = outW, errW
	rep, pushed, err := transactionalRun(jctx, e, jc, &jcf, sp)
	outW.Close()
	errW.Close()
	out.close()
	if rep != nil {
		res.RunID, res.ExitCode, res.Signal, res.TimedOut = rep.RunID, rep.Status.ExitCode, rep.Status.Signal, rep.Status.TimedOut
		res.Succeeded, res.RolledBack, res.Evidence, res.DurationMS = rep.Succeeded, rep.RolledBack, rep.Evidence, rep.Status.DurationMs
		res.StdoutTail, res.StderrTail = rep.StdoutTail, rep.StderrTail
		for _, it := range rep.Residue {
			res.Residue = append(res.Residue, it.String())
		}
	}
	res.PushedCommit = pushed
	if err != nil {
		res.Error = lockstep.ErrorMessage(err)
		if out.lost.Load() {
			res.Error = "the server gave the job up (lease lost): " + res.Error
		}
	}
	return res
}

// jobOutput streams a job's output lines to the server in batches, and
// renews the job's lease while it runs (a post, lines or not, at least
// every renew); a refused post (the lease is lost) stops the job.
type jobOutput struct {
	ctx         context.Context
	c           *client.Client
	runner, job string
	renew       time.Duration
	stop        func()
	lines       chan lockstep.RunJobLine
	readers     sync.WaitGroup
	done        chan struct{}
	closeOnce   sync.Once
	lost        atomic.Bool
	files       []*os.File
}

func newJobOutput(ctx context.Context, c *client.Client, runner, job string, renew time.Duration, stop func()) *jobOutput {
	if renew <= 0 {
		renew = 5 * time.Second
	}
	o := &jobOutput{ctx: ctx, c: c, runner: runner, job: job, renew: renew, stop: stop, lines: make(chan lockstep.RunJobLine, 1024), done: make(chan struct{})}
	go o.send()
	return o
}

// pipes returns the command's stdout and stderr: pipes read line by line.
func (o *jobOutput) pipes() (*os.File, *os.File, error) {
	var ws []*os.File
	for _, stream := range []string{"stdout", "stderr"} {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, nil, err
		}
		o.files = append(o.files, r)
		ws = append(ws, w)
		o.readers.Add(1)
		go func() {
			defer o.readers.Done()
			sc := bufio.NewScanner(r)
			sc.Buffer(make([]byte, 64<<10), 1<<20)
			for sc.Scan() {
				o.lines <- lockstep.RunJobLine{Stream: stream, Text: sc.Text()}
			}
			io.Copy(io.Discard, r) // a line over 1 MiB: drain the rest
		}()
	}
	return ws[0], ws[1], nil
}

func (o *jobOutput) send() {
	defer close(o.done)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	var batch []lockstep.RunJobLine
	last := time.Now()
	post := func() {
		if err := o.c.PostRunJobOutput(context.WithoutCancel(o.ctx), o.runner, o.job, batch); err != nil {
			if lockstep.ErrorCode(err) == lockstep.EREFCONFLICT {
				o.lost.Store(true)
				o.stop()
			}
		}
		batch, last = nil, time.Now()
	}
	for {
		select {
		case l, ok := <-o.lines:
			if !ok {
				if len(batch) > 0 {
					post()
				}
				return
			}
			batch = append(batch, l)
			if len(batch) >= 500 {
				post()
			}
		case <-tick.C:
			if len(batch) > 0 || time.Since(last) >= o.renew {
				post()
			}
		}
	}
}

// close waits for the readers (after the command's pipes were closed),
// then for the last post.
func (o *jobOutput) close() {
	o.closeOnce.Do(func() {
		o.readers.Wait()
		close(o.lines)
		<-o.done
		for _, f := range o.files {
			f.Close()
		}
	})
}
