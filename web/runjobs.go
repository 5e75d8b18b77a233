package web

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/api"
	"github.com/lockstep-hq/lockstep/auth"
)

// Runners and run jobs (README "Running code from an agent: runners"):
// an agent asks for a command to be run on its workspace (POST
// /repos/:repo/jobs), a runner that dialled out (POST /runners, then
// long-polls POST /runners/:id/jobs) takes it, runs it as `lockstep run`
// on a fresh checkout and posts its output and result; the agent's
// request streams both back. Everything goes through the metadata
// database, so the agent's replica and the runner's may differ.

// Defaults of the run-job settings (Config).
const (
	DefaultRunJobTimeout      = 10 * time.Minute
	DefaultRunnerLease        = 30 * time.Second
	DefaultRunnerPollWait     = 20 * time.Second
	DefaultRunJobQueueTimeout = 30 * time.Second
	// DefaultRunJobMaxOutputBytes bounds one job's stored output: a
	// command printing without end fills no metadata database.
	DefaultRunJobMaxOutputBytes = 16 << 20
	maxRunJobLines              = 1000     // lines in one output post
	maxRunJobLine               = 64 << 10 // bytes of one line (longer lines are cut)
	runJobPollEvery             = 200 * time.Millisecond
)

func (s *Server) runJobDefaults() {
	if s.Config.RunJobTimeout <= 0 {
		s.Config.RunJobTimeout = DefaultRunJobTimeout
	}
	if s.Config.RunnerLease <= 0 {
		s.Config.RunnerLease = DefaultRunnerLease
	}
	if s.Config.RunnerPollWait <= 0 {
		s.Config.RunnerPollWait = DefaultRunnerPollWait
	}
	if s.Config.RunJobQueueTimeout <= 0 {
		s.Config.RunJobQueueTimeout = DefaultRunJobQueueTimeout
	}
	if s.Config.RunJobMaxOutputBytes <= 0 {
		s.Config.RunJobMaxOutputBytes = DefaultRunJobMaxOutputBytes
	}
}

// runnerLiveness: a runner not seen for this long is not alive (it polls
// at least every poll wait, and renews its lease while it runs a job).
func (s *Server) runnerLiveness() time.Duration {
	return 2*s.Config.RunnerPollWait + s.Config.RunnerLease
}

func (s *Server) jobs() (lockstep.RunJobStore, error) {
	if s.Jobs == nil {
		return nil, lockstep.Errorf(lockstep.ENOTCONFIGURED, "run jobs are not configured on this server")
	}
	return s.Jobs, nil
}

// The runner routes (runner in routeTable) are the only ones a runner key
// may call (admit). The run-job routes take no Idempotency-Key (idemNone):
// a job is created once per request and its answer is a stream; a
// runner's calls are its own protocol (a take is not repeatable).

func (s *Server) handleRunnerRegister() gin.HandlerFunc {
	return func(c *gin.Context) {
		ctx := c.Request.Context()
		me := caller(c)
		st, err := s.jobs()
		if err != nil {
			writeError(c, err)
			return
		}
		var req api.RunnerRegistration
		if err := s.decodeJSON(c, &req); err != nil {
			writeError(c, err)
			return
		}
		if err := lockstep.ValidateName("runner name", req.Name); err != nil {
			writeError(c, err)
			return
		}
		if len(req.Workspaces) == 0 || len(req.Workspaces) > 100 {
			writeError(c, lockstep.Errorf(lockstep.EINVALID, "workspaces: give 1 to 100 workspace name prefixes (\"*\": every workspace)"))
			return
		}
		for _, p := range req.Workspaces {
			if p == "" || len(p) > 100 {
				writeError(c, lockstep.Errorf(lockstep.EINVALID, "workspaces: %q is not a workspace name prefix (1 to 100 characters, or \"*\")", p))
				return
			}
		}
		r := &lockstep.Runner{ID: lockstep.NewID("rnr_"), KeyID: me.ID, Name: req.Name, Workspaces: req.Workspaces}
		if err := st.PutRunner(ctx, r); err != nil {
			writeError(c, err)
			return
		}
		c.JSON(http.StatusOK, api.RunnerInfo{Runner: *r, LeaseSeconds: s.Config.RunnerLease.Seconds(), PollSeconds: s.Config.RunnerPollWait.Seconds()})
	}
}

// runnerRequest starts a runner's call on /runners/:id/...: the store,
// the runner :id if the caller registered it, and the body decoded into
// body (nil: none); false once an error was written.
func (s *Server) runnerRequest(c *gin.Context, body any) (lockstep.RunJobStore, *lockstep.Runner, bool) {
	st, err := s.jobs()
	if err != nil {
		writeError(c, err)
		return nil, nil, false
	}
	r, err := st.RunnerByID(c.Request.Context(), c.Param("id"))
	if err == nil && r.KeyID != caller(c).ID {
		err = lockstep.Errorf(lockstep.EFORBIDDEN, "runner %s was registered by another key", r.ID)
	}
	if err == nil && body != nil {
		err = s.decodeJSON(c, body)
	}
	if err != nil {
		writeError(c, err)
		return nil, nil, false
	}
	return st, r, true
}

// handleRunnerTake is the runner's long poll: it answers a job as soon as
// one the runner takes is queued (200), or 204 after ?wait= seconds
// (default and maximum: --runner-poll-wait).
func (s *Server) handleRunnerTake() gin.HandlerFunc {
	return func(c *gin.Context) {
		ctx := c.Request.Context()
		st, r, ok := s.runnerRequest(c, nil)
		if !ok {
			return
		}
		wait := s.Config.RunnerPollWait
		if v := c.Query("wait"); v != "" {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil || n < 0 {
				writeError(c, lockstep.Errorf(lockstep.EINVALID, "wait %q: seconds, 0 or more", v))
				return
			}
			wait = min(wait, time.Duration(n*float64(time.Second)))
		}
		deadline := time.Now().Add(wait)
		for {
			now := time.Now()
			// The runner's key is checked again before each claim: a key
			// revoked (or expired) while its poll waits takes no job.
			if err := s.Keys.Recheck(ctx, caller(c)); err != nil {
				writeError(c, err)
				return
			}
			if err := st.TouchRunner(ctx, r.ID, now); err != nil {
				writeError(c, err)
				return
			}
			if _, err := st.ExpireRunJobs(ctx, now); err != nil {
				writeError(c, err)
				return
			}
			s.revokeEndedJobKeys(ctx, st)
			j, err := st.ClaimRunJob(ctx, r, now.Add(s.Config.RunnerLease))
			if err != nil {
				writeError(c, err)
				return
			}
			if j != nil {
				if s.giveJob(c, st, r, j) {
					return
				}
				continue // failed without a key (its creator's is gone): the next one
			}
			if !now.Before(deadline) || !s.sleepCtx(ctx, min(runJobPollEvery*2, time.Until(deadline)+time.Millisecond)) {
				c.Status(http.StatusNoContent)
				return
			}
		}
	}
}

// revokeEndedJobKeys revokes the keys minted for jobs that have ended,
// however they ended (result posted, lease lost, abandoned), and forgets
// them. A failure leaves the job naming its key, so the next sweep (every
// runner poll) retries; the key's own expiry is the backstop.
func (s *Server) revokeEndedJobKeys(ctx context.Context, st lockstep.RunJobStore) {
	ctx = context.WithoutCancel(ctx)
	ks, err := st.EndedRunJobKeys(ctx, 100)
	if err != nil {
		return
	}
	for _, k := range ks {
		if err := s.Keys.Revoke(ctx, auth.System, k.KeyID); err != nil && lockstep.ErrorCode(err) != lockstep.ENOTFOUND {
			continue
		}
		_ = st.ClearRunJobKey(ctx, k.JobID, k.KeyID)
	}
}

// giveJob answers a taken job with the key the runner acts with: an
// agent key scoped to the job's workspace, minted by the key that created
// the job (so that its revocation, or expiry, ends the job's key too) and
// expiring after the job could have ended. A job whose creator's key is
// revoked or expired is failed instead, and false returned (nothing was
// written: the runner's poll goes on).
func (s *Server) giveJob(c *gin.Context, st lockstep.RunJobStore, r *lockstep.Runner, j *lockstep.RunJob) bool {
	ctx := c.Request.Context()
	timeout := s.Config.RunJobTimeout
	if t := time.Duration(j.Spec.TimeoutSeconds) * time.Second; t > 0 && t < timeout {
		timeout = t
	}
	creator, err := s.Keys.Live(ctx, j.KeyID)
	if code := lockstep.ErrorCode(err); code == lockstep.EUNAUTH || code == lockstep.ENOTFOUND {
		_ = st.FinishRunJob(context.WithoutCancel(ctx), j.ID, "", nil, "the key that created the job was revoked or expired before a runner took it: "+lockstep.ErrorMessage(err))
		return false
	}
	var k *lockstep.Key
	var secret string
	if err == nil {
		ttl := timeout + 2*s.Config.RunnerLease + time.Minute
		if creator.Role != lockstep.RoleAdmin {
			ttl = min(ttl, auth.MaxAgentTTL) // what an agent key may mint
		}
		k, secret, err = s.Keys.Mint(ctx, creator, auth.MintRequest{Name: "runner-job", Role: lockstep.RoleAgent,
			TTL: ttl, Scope: &lockstep.KeyScope{Workspace: j.Workspace}})
	}
	if err == nil {
		if err = st.SetRunJobKey(ctx, j.ID, k.ID); err != nil {
			_ = s.Keys.Revoke(context.WithoutCancel(ctx), auth.System, k.ID)
		}
	}
	if err != nil {
		_ = st.FinishRunJob(context.WithoutCancel(ctx), j.ID, "", nil, "the server could not issue the job's key: "+lockstep.ErrorMessage(err))
		writeError(c, err)
		return true
	}
	c.JSON(http.StatusOK, api.TakenJob{Job: apiJob(j, nil), Key: secret, TimeoutMS: timeout.Milliseconds(), LeaseSeconds: s.Config.RunnerLease.Seconds()})
	return true
}

func (s *Server) handleRunnerOutput() gin.HandlerFunc {
	return func(c *gin.Context) {
		ctx := c.Request.Context()
		var req api.RunJobOutput
		st, r, ok := s.runnerRequest(c, &req)
		if !ok {
			return
		}
		if len(req.Lines) > maxRunJobLines {
			writeError(c, lockstep.Errorf(lockstep.EINVALID, "lines: at most %d in one post, got %d", maxRunJobLines, len(req.Lines)))
			return
		}
		for i, l := range req.Lines {
			if l.Stream != "stdout" && l.Stream != "stderr" {
				writeError(c, lockstep.Errorf(lockstep.EINVALID, "lines[%d].stream %q: stdout or stderr", i, l.Stream))
				return
			}
			if len(l.Text) > maxRunJobLine {
				l.Text = l.Text[:maxRunJobLine]
			}
			// A command's output is bytes: a NUL or invalid UTF-8 (which
			// the metadata database refuses, failing the whole batch of
			// lines) is stored as U+FFFD.
			req.Lines[i].Text = strings.ToValidUTF8(strings.ReplaceAll(l.Text, "\x00", "\uFFFD"), "\uFFFD")
		}
		now := time.Now()
		if err := st.AppendRunJobOutput(ctx, c.Param("job"), r.ID, req.Lines, now.Add(s.Config.RunnerLease), s.Config.RunJobMaxOutputBytes); err != nil {
			writeError(c, err)
			return
		}
		_ = st.TouchRunner(ctx, r.ID, now)
		c.JSON(http.StatusOK, gin.H{"lease_until": now.Add(s.Config.RunnerLease).UTC()})
	}
}

func (s *Server) handleRunnerResult() gin.HandlerFunc {
	return func(c *gin.Context) {
		ctx := c.Request.Context()
		var res api.RunJobResult
		st, r, ok := s.runnerRequest(c, &res)
		if !ok {
			return
		}
		raw, _ := json.Marshal(res)
		if err := st.FinishRunJob(ctx, c.Param("job"), r.ID, raw, ""); err != nil {
			writeError(c, err)
			return
		}
		s.revokeEndedJobKeys(ctx, st)
		_ = st.TouchRunner(ctx, r.ID, time.Now())
		c.JSON(http.StatusOK, gin.H{"ok": true})
	}
}

// handleJobCreate creates a job on a workspace and follows it to its end:
// as server-sent events (Accept: text/event-stream; events "job" once,
// "output" per line, "result" last) or as one JSON answer (the job with
// its result and the last lines of output).
func (s *Server) handleJobCreate() gin.HandlerFunc {
	return func(c *gin.Context) {
		ctx := c.Request.Context()
		me := caller(c)
		st, err := s.jobs()
		if err != nil {
			writeError(c, err)
			return
		}
		ws, err := s.Repos.Repo(ctx, c.Param("repo"))
		if err != nil {
			writeError(c, err)
			return
		}
		if !ws.IsWorkspace() {
			writeError(c, lockstep.Errorf(lockstep.EINVALID, "%s is a base repository: commands run on workspaces", ws.Name))
			return
		}
		if ws.Status != lockstep.StatusActive {
			writeError(c, lockstep.Errorf(lockstep.EINVALID, "workspace %s is %s: commands run on active workspaces", ws.Name, ws.Status))
			return
		}
		var req api.RunJobRequest
		if err := s.decodeJSON(c, &req); err != nil {
			writeError(c, err)
			return
		}
		if len(req.Command) == 0 || len(req.Command) > maxRunArgs || req.Command[0] == "" {
			writeError(c, lockstep.Errorf(lockstep.EINVALID, "command: the program and its arguments (1 to %d)", maxRunArgs))
			return
		}
		if req.TimeoutSeconds < 0 || time.Duration(req.TimeoutSeconds)*time.Second > s.Config.RunJobTimeout {
			writeError(c, lockstep.Errorf(lockstep.EINVALID, "timeout_seconds %d: 0 (the server's %s) up to %d", req.TimeoutSeconds, s.Config.RunJobTimeout, int(s.Config.RunJobTimeout.Seconds())))
			return
		}
		live, err := st.Runners(ctx, time.Now().Add(-s.runnerLiveness()))
		if err != nil {
			writeError(c, err)
			return
		}
		found := false
		for _, r := range live {
			found = found || r.Takes(ws.Name)
		}
		if !found {
			writeError(c, lockstep.Errorf(lockstep.ENORUNNER, "no runner is registered and alive for workspace %s: start `lockstep runner --jobs` with a runner key (its --workspaces must cover %s)", ws.Name, ws.Name))
			return
		}
		if err := s.checkRunQuota(ctx, c, me); err != nil {
			writeError(c, err)
			return
		}
		j := &lockstep.RunJob{ID: lockstep.NewID("job_"), Workspace: ws.Name, KeyID: me.ID,
			Spec: lockstep.RunJobSpec{Command: req.Command, PushOnSuccess: req.PushOnSuccess, TimeoutSeconds: req.TimeoutSeconds}}
		if err := st.CreateRunJobWithin(ctx, j, s.runBound(me)); err != nil {
			if lockstep.ErrorCode(err) == lockstep.ERATELIMITED {
				c.Header("Retry-After", "5")
			}
			writeError(c, err)
			return
		}
		s.followJob(c, st, j, strings.Contains(c.GetHeader("Accept"), "text/event-stream"))
	}
}

// handleJobGet shows a job with its output (after ?after=SEQ).
func (s *Server) handleJobGet() gin.HandlerFunc {
	return func(c *gin.Context) {
		ctx := c.Request.Context()
		st, err := s.jobs()
		if err != nil {
			writeError(c, err)
			return
		}
		j, err := st.RunJob(ctx, c.Param("id"))
		if err == nil && j.Workspace != c.Param("repo") {
			err = lockstep.Errorf(lockstep.ENOTFOUND, "run job %s not found on %s", c.Param("id"), c.Param("repo"))
		}
		if err != nil {
			writeError(c, err)
			return
		}
		after, _ := strconv.ParseInt(c.Query("after"), 10, 64)
		lines, err := st.RunJobOutput(ctx, j.ID, after, maxRunJobLines)
		if err != nil {
			writeError(c, err)
			return
		}
		c.JSON(http.StatusOK, apiJob(j, lines))
	}
}

func apiJob(j *lockstep.RunJob, lines []lockstep.RunJobLine) api.RunJob {
	out := api.RunJob{ID: j.ID, Workspace: j.Workspace, Command: j.Spec.Command, Push: j.Spec.PushOnSuccess, State: j.State,
		RunnerID: j.RunnerID, Error: j.Error, Output: lines, CreatedAt: j.CreatedAt, UpdatedAt: j.UpdatedAt}
	if len(j.Result) > 0 {
		var r api.RunJobResult
		if json.Unmarshal(j.Result, &r) == nil {
			out.Result = &r
		}
	}
	return out
}

// followJob waits for j to end, streaming its output when sse. A job no
// runner takes within --run-job-queue-timeout fails (no_runner in its
// error); a running job whose runner stops renewing its lease fails.
// The caller going away leaves the job running (GET /jobs/:id shows it).
func (s *Server) followJob(c *gin.Context, st lockstep.RunJobStore, j *lockstep.RunJob, sse bool) {
	ctx := c.Request.Context()
	w := c.Writer
	emit := func(event string, v any) {
		b, _ := json.Marshal(v)
		w.WriteString("event: " + event + "\ndata: ")
		w.Write(b)
		w.WriteString("\n\n")
		w.Flush()
	}
	if sse {
		h := w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-store")
		h.Set("X-Accel-Buffering", "no")
		w.WriteHeader(http.StatusOK)
		emit("job", apiJob(j, nil))
	}
	var seq int64
	var tail []lockstep.RunJobLine
	lastBeat := time.Now()
	var checked time.Time
	for {
		// The caller's key is checked again (at most once a second, as
		// an open UI event stream does): following a job ends once the
		// key is revoked or expires.
		if k := caller(c); k != nil && time.Since(checked) >= liveRecheck {
			if err := s.Keys.Recheck(ctx, k); err != nil {
				if !sse {
					writeError(c, err)
				}
				return
			}
			checked = time.Now()
		}
		lines, err := st.RunJobOutput(ctx, j.ID, seq, maxRunJobLines)
		if err == nil {
			for _, l := range lines {
				seq = l.Seq
				if sse {
					emit("output", l)
				} else {
					tail = append(tail, l)
					if len(tail) > maxRunJobLines {
						tail = tail[len(tail)-maxRunJobLines:]
					}
				}
			}
			if len(lines) == maxRunJobLines {
				continue // more waiting
			}
		}
		now := time.Now()
		cur, err := st.RunJob(ctx, j.ID)
		if err == nil {
			switch {
			case cur.State == lockstep.JobQueued && now.Sub(cur.CreatedAt) > s.Config.RunJobQueueTimeout:
				_ = st.FinishRunJob(ctx, j.ID, "", nil, "no_runner: no runner took the job within "+s.Config.RunJobQueueTimeout.String())
				continue
			case cur.State == lockstep.JobRunning && cur.LeaseUntil != nil && now.After(*cur.LeaseUntil):
				_, _ = st.ExpireRunJobs(ctx, now)
				s.revokeEndedJobKeys(ctx, st)
				continue
			case cur.State == lockstep.JobDone || cur.State == lockstep.JobFailed:
				if lines, err := st.RunJobOutput(ctx, j.ID, seq, maxRunJobLines); err == nil && len(lines) > 0 {
					continue // the last lines first
				}
				if sse {
					emit("result", apiJob(cur, nil))
				} else {
					c.JSON(http.StatusOK, apiJob(cur, tail))
				}
				return
			}
		}
		if sse && now.Sub(lastBeat) > 15*time.Second {
			w.WriteString(": keep-alive\n\n")
			w.Flush()
			lastBeat = now
		}
		if !s.sleepCtx(ctx, runJobPollEvery) {
			if !sse && ctx.Err() == nil { // draining: the job as it is now
				if cur, err := st.RunJob(context.WithoutCancel(ctx), j.ID); err == nil {
					c.JSON(http.StatusOK, apiJob(cur, tail))
				}
			}
			return
		}
	}
}

// Drain ends the runners' long polls (204 at once) and the streams of
// jobs being followed (the job goes on; GET /repos/{ws}/jobs/{id} shows
// it), so that a graceful stop does not wait for them. serve calls it when
// the HTTP server starts shutting down.
func (s *Server) Drain() {
	s.drainOnce.Do(func() {
		if s.drain != nil {
			close(s.drain)
		}
	})
}

// sleepCtx sleeps d; false when ctx ended or the server drains first.
func (s *Server) sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-s.drain:
		return false
	case <-t.C:
		return true
	}
}
