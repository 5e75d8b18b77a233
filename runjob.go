package lockstep

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// Runners and run jobs (issue 24): an agent that reaches the service only
// over HTTP asks for a command to be run on a workspace; a runner (the
// `lockstep runner --jobs` process, on a machine the operator provides)
// dials out, takes the job, runs it as a transactional run on a fresh
// checkout of the workspace's tip and posts its output and result. Jobs
// live in the metadata database, so every replica sees them; a job being
// run holds a lease its runner renews, and a runner that dies loses it.

// Run job states. A job is created queued, taken (running) by one runner,
// and ends done (the runner posted a result) or failed (no runner took it
// in time, or its runner lost the lease).
const (
	JobQueued  = "queued"
	JobRunning = "running"
	JobDone    = "done"
	JobFailed  = "failed"
)

// Runner is a registered runner: the key it authenticates with and the
// workspaces it takes jobs for (name prefixes; "*" is every workspace).
type Runner struct {
	ID         string    `json:"id"`
	KeyID      string    `json:"key_id"`
	Name       string    `json:"name"`
	Workspaces []string  `json:"workspaces"`
	CreatedAt  time.Time `json:"created_at"`
	LastSeen   time.Time `json:"last_seen"`
}

// Takes reports whether r takes jobs for workspace ws.
func (r *Runner) Takes(ws string) bool {
	for _, p := range r.Workspaces {
		if p == "*" || strings.HasPrefix(ws, p) {
			return true
		}
	}
	return false
}

// RunJobSpec is what to run.
type RunJobSpec struct {
	Command       []string `json:"command"`
	PushOnSuccess bool     `json:"push_on_success,omitempty"`
	// TimeoutSeconds kills the command after this long (0: the server's
	// run timeout).
	TimeoutSeconds int `json:"timeout_seconds,omitempty"`
}

// RunJob is one request to run a command on a workspace.
type RunJob struct {
	ID         string          `json:"id"`
	Workspace  string          `json:"workspace"`
	KeyID      string          `json:"key_id"`
	Spec       RunJobSpec      `json:"spec"`
	State      string          `json:"state"`
	RunnerID   string          `json:"runner_id,omitempty"`
	LeaseUntil *time.Time      `json:"lease_until,omitempty"`
	Result     json.RawMessage `json:"result,omitempty"`
	Error      string          `json:"error,omitempty"`
	CreatedAt  time.Time       `json:"created_at"`
	UpdatedAt  time.Time       `json:"updated_at"`
}

// RunJobLine is one line of a job's output.
type RunJobLine struct {
	Seq    int64  `json:"seq"`
	Stream string `json:"stream"` // stdout or stderr
	Text   string `json:"text"`
}

// RunJobStore keeps runners and run jobs (sqlstore implements it).
type RunJobStore interface {
	// PutRunner inserts r, or updates the runner with r's key and name
	// (a runner that registers again keeps its id: r.ID is set to it).
	PutRunner(ctx context.Context, r *Runner) error
	// RunnerByID returns not_found for an unknown id.
	RunnerByID(ctx context.Context, id string) (*Runner, error)
	// TouchRunner records that the runner is alive at at.
	TouchRunner(ctx context.Context, id string, at time.Time) error
	// Runners lists the runners seen at or after since.
	Runners(ctx context.Context, since time.Time) ([]*Runner, error)
	// CreateRunJob inserts a queued job.
	CreateRunJob(ctx context.Context, j *RunJob) error
	// CreateRunJobWithin is CreateRunJob bounded by the run quota: with
	// b.Max > 0 it answers rate_limited, inserting nothing, when j's key
	// already has b.Max jobs active (CountActiveRunJobs at b's times). The
	// count and the insert are one transaction serialized per key (on
	// PostgreSQL by an advisory lock, so across replicas too).
	CreateRunJobWithin(ctx context.Context, j *RunJob, b RunJobBound) error
	// RunJob returns not_found for an unknown id.
	RunJob(ctx context.Context, id string) (*RunJob, error)
	// ClaimRunJob moves the oldest queued job r takes to running, held by
	// r until leaseUntil; nil when there is none.
	ClaimRunJob(ctx context.Context, r *Runner, leaseUntil time.Time) (*RunJob, error)
	// RenewRunJob extends the lease of a job runnerID runs; ref_conflict
	// when the job is no longer running on it (its lease was lost).
	RenewRunJob(ctx context.Context, id, runnerID string, leaseUntil time.Time) error
	// AppendRunJobOutput adds lines to a job runnerID runs, renewing its
	// lease; ref_conflict as RenewRunJob. Once the job's lines hold
	// maxBytes of text (0: no limit) the rest of its output is dropped,
	// after one stderr line RunJobOutputCut(maxBytes).
	AppendRunJobOutput(ctx context.Context, id, runnerID string, lines []RunJobLine, leaseUntil time.Time, maxBytes int64) error
	// RunJobOutput returns the job's lines after seq, at most limit.
	RunJobOutput(ctx context.Context, id string, after int64, limit int) ([]RunJobLine, error)
	// FinishRunJob ends a job: done with result when runnerID is the
	// runner holding it (ref_conflict otherwise); with runnerID "" it
	// fails a queued or running job with errMsg (the server's own
	// verdict: no runner took it, the lease expired).
	FinishRunJob(ctx context.Context, id, runnerID string, result json.RawMessage, errMsg string) error
	// ExpireRunJobs fails running jobs whose lease ended before now.
	ExpireRunJobs(ctx context.Context, now time.Time) (int, error)
	// SetRunJobKey records the id of the key minted for a taken job.
	SetRunJobKey(ctx context.Context, id, keyID string) error
	// EndedRunJobKeys lists, at most limit, the jobs that have ended
	// (done or failed) and still name their minted key.
	EndedRunJobKeys(ctx context.Context, limit int) ([]RunJobKey, error)
	// ClearRunJobKey forgets a job's minted key once it is revoked.
	ClearRunJobKey(ctx context.Context, id, keyID string) error
	// CountActiveRunJobs counts keyID's jobs that still hold a place: the
	// queued ones created at or after queuedSince (older ones are failed
	// by the queue timeout, or were left by a server that died), and the
	// running ones whose lease has not ended before now (the
	// concurrent-runs quota).
	CountActiveRunJobs(ctx context.Context, keyID string, queuedSince, now time.Time) (int, error)
}

// RunJobKey names the key minted for a job.
type RunJobKey struct {
	JobID string
	KeyID string
}

// RunJobBound is the run quota at one moment: at most Max jobs queued
// since QueuedSince or running under a lease that ends at or after Now.
type RunJobBound struct {
	Max         int
	QueuedSince time.Time
	Now         time.Time
	// Message words the refusal (it names the limit's source); empty: a
	// plain one.
	Message func(active int) string
}

// RunJobOutputCut is the line a job's output ends with when it reached
// maxBytes (--run-job-max-output-bytes).
func RunJobOutputCut(maxBytes int64) string {
	return fmt.Sprintf("[lockstep: output cut at %d bytes (--run-job-max-output-bytes); the result's stdout_tail and stderr_tail keep the end]", maxBytes)
}
