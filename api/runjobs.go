package api

import (
	"time"

	"github.com/lockstep-hq/lockstep"
)

// RunJobRequest is the body of POST /repos/{workspace}/jobs: run Command
// on a runner, as a transactional run on a fresh checkout of the
// workspace's tip.
type RunJobRequest struct {
	Command []string `json:"command"`
	// PushOnSuccess pushes the result when the command succeeds, with
	// compare-and-swap on the tip the runner checked out.
	PushOnSuccess bool `json:"push_on_success,omitempty"`
	// TimeoutSeconds kills the command after this long (0: the server's
	// --run-job-timeout; at most that).
	TimeoutSeconds int `json:"timeout_seconds,omitempty"`
}

// RunJobResult is how a job's run ended, as its runner reports it.
type RunJobResult struct {
	RunID      string `json:"run_id,omitempty"`
	CheckedOut string `json:"checked_out"` // the tip the run started from
	ExitCode   int    `json:"exit_code"`
	Signal     string `json:"signal,omitempty"`
	TimedOut   bool   `json:"timed_out,omitempty"`
	Succeeded  bool   `json:"succeeded"`
	RolledBack bool   `json:"rolled_back"`
	// PushedCommit is the commit pushed after a successful run with
	// push_on_success ("" otherwise).
	PushedCommit string `json:"pushed_commit,omitempty"`
	// Evidence is the commit keeping a failed run's worktree.
	Evidence string `json:"evidence,omitempty"`
	// Residue is what a rollback left behind (empty: verified clean).
	Residue    []string `json:"residue,omitempty"`
	DurationMS float64  `json:"duration_ms"`
	StdoutTail string   `json:"stdout_tail,omitempty"`
	StderrTail string   `json:"stderr_tail,omitempty"`
	// Error is set when the run could not be done (checkout, snapshot,
	// push refused...).
	Error string `json:"error,omitempty"`
}

// RunJob is a run job as the API shows it.
type RunJob struct {
	ID        string                `json:"id"`
	Workspace string                `json:"workspace"`
	Command   []string              `json:"command"`
	Push      bool                  `json:"push_on_success"`
	State     string                `json:"state"` // queued, running, done, failed
	RunnerID  string                `json:"runner_id,omitempty"`
	Result    *RunJobResult         `json:"result,omitempty"`
	Error     string                `json:"error,omitempty"`
	Output    []lockstep.RunJobLine `json:"output,omitempty"`
	CreatedAt time.Time             `json:"created_at"`
	UpdatedAt time.Time             `json:"updated_at"`
}

// RunnerRegistration is the body of POST /runners.
type RunnerRegistration struct {
	Name string `json:"name"`
	// Workspaces are the workspace name prefixes the runner takes jobs
	// for ("*": every workspace).
	Workspaces []string `json:"workspaces"`
}

// RunnerInfo answers a registration: the runner's id and the server's
// timings (renew the lease at least every lease_seconds).
type RunnerInfo struct {
	lockstep.Runner
	LeaseSeconds float64 `json:"lease_seconds"`
	PollSeconds  float64 `json:"poll_seconds"`
}

// TakenJob answers POST /runners/{id}/jobs when a job was taken: the job
// and a key scoped to its workspace (agent role, expiring after the
// job's timeout) the runner acts with for this job only.
type TakenJob struct {
	Job          RunJob  `json:"job"`
	Key          string  `json:"key"`
	TimeoutMS    int64   `json:"timeout_ms"`
	LeaseSeconds float64 `json:"lease_seconds"`
}

// RunJobOutput is the body of POST /runners/{id}/jobs/{job}/output
// (an empty list only renews the lease).
type RunJobOutput struct {
	Lines []lockstep.RunJobLine `json:"lines"`
}
