package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/lockstep-hq/lockstep"
)

var _ lockstep.RunJobStore = (*DB)(nil)

// PutRunner inserts or re-registers a runner (one per key and name).
func (s *DB) PutRunner(ctx context.Context, r *lockstep.Runner) (err error) {
	ctx, span := s.start(ctx, "PutRunner")
	defer func() { err = end(span, err) }()
	ws, err := json.Marshal(r.Workspaces)
	if err != nil {
		return err
	}
	now := lockstep.TruncateTime(s.now())
	return s.inTx(ctx, func(tx *sql.Tx) error {
		var id string
		var created int64
		err := tx.QueryRowContext(ctx, `SELECT id, created_at FROM runners WHERE key_id = $1 AND name = $2`, r.KeyID, r.Name).Scan(&id, &created)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			r.CreatedAt, r.LastSeen = now, now
			_, err = tx.ExecContext(ctx, `INSERT INTO runners (id, key_id, name, workspaces, created_at, last_seen) VALUES ($1, $2, $3, $4, $5, $6)`,
				r.ID, r.KeyID, r.Name, string(ws), micros(now), micros(now))
			return err
		case err != nil:
			return err
		}
		r.ID, r.CreatedAt, r.LastSeen = id, fromMicros(created), now
		_, err = tx.ExecContext(ctx, `UPDATE runners SET workspaces = $1, last_seen = $2 WHERE id = $3`, string(ws), micros(now), id)
		return err
	})
}

func scanRunner(row interface{ Scan(...any) error }) (*lockstep.Runner, error) {
	var r lockstep.Runner
	var ws string
	var created, seen int64
	if err := row.Scan(&r.ID, &r.KeyID, &r.Name, &ws, &created, &seen); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(ws), &r.Workspaces); err != nil {
		return nil, fmt.Errorf("runner %s workspaces: %w", r.ID, err)
	}
	r.CreatedAt, r.LastSeen = fromMicros(created), fromMicros(seen)
	return &r, nil
}

const runnerCols = `id, key_id, name, workspaces, created_at, last_seen`

// RunnerByID returns one runner.
func (s *DB) RunnerByID(ctx context.Context, id string) (r *lockstep.Runner, err error) {
	ctx, span := s.start(ctx, "RunnerByID")
	defer func() { err = end(span, err) }()
	r, err = scanRunner(s.db.QueryRowContext(ctx, `SELECT `+runnerCols+` FROM runners WHERE id = $1`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, because(err, lockstep.ENOTFOUND, "runner %s not found: register again", id)
	}
	return r, err
}

// TouchRunner records a sign of life.
func (s *DB) TouchRunner(ctx context.Context, id string, at time.Time) (err error) {
	ctx, span := s.start(ctx, "TouchRunner")
	defer func() { err = end(span, err) }()
	_, err = s.db.ExecContext(ctx, `UPDATE runners SET last_seen = $1 WHERE id = $2`, micros(at), id)
	return err
}

// Runners lists the runners seen since since, oldest first.
func (s *DB) Runners(ctx context.Context, since time.Time) (rs []*lockstep.Runner, err error) {
	ctx, span := s.start(ctx, "Runners")
	defer func() { err = end(span, err) }()
	rows, err := s.db.QueryContext(ctx, `SELECT `+runnerCols+` FROM runners WHERE last_seen >= $1 ORDER BY created_at, id`, micros(since))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		r, err := scanRunner(rows)
		if err != nil {
			return nil, err
		}
		rs = append(rs, r)
	}
	return rs, rows.Err()
}

const (
	qInsertRunJob  = `INSERT INTO run_jobs (id, workspace, key_id, spec, state, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7)`
	qActiveRunJobs = `SELECT COUNT(*) FROM run_jobs WHERE key_id = $1 AND
		((state = $2 AND created_at >= $3) OR (state = $4 AND lease_until >= $5))`
	// qRunQuotaLock serializes one key's bounded creates across replicas
	// until the transaction ends (the namespace keeps the lock apart from
	// any other advisory lock).
	qRunQuotaLock = `SELECT pg_advisory_xact_lock(hashtextextended('lockstep.run_quota:' || $1, 0))`
)

// CreateRunJob inserts a queued job.
func (s *DB) CreateRunJob(ctx context.Context, j *lockstep.RunJob) (err error) {
	ctx, span := s.start(ctx, "CreateRunJob")
	defer func() { err = end(span, err) }()
	spec, err := s.newRunJob(j)
	if err != nil {
		return err
	}
	_, err = s.db.ExecContext(ctx, qInsertRunJob, j.ID, j.Workspace, j.KeyID, spec, j.State, micros(j.CreatedAt), micros(j.UpdatedAt))
	return err
}

// newRunJob stamps j as queued now and returns its spec's JSON.
func (s *DB) newRunJob(j *lockstep.RunJob) (string, error) {
	spec, err := json.Marshal(j.Spec)
	if err != nil {
		return "", err
	}
	now := lockstep.TruncateTime(s.now())
	j.State, j.CreatedAt, j.UpdatedAt = lockstep.JobQueued, now, now
	return string(spec), nil
}

// CreateRunJobWithin inserts a queued job if its key is under b
// (lockstep.RunJobStore).
func (s *DB) CreateRunJobWithin(ctx context.Context, j *lockstep.RunJob, b lockstep.RunJobBound) (err error) {
	if b.Max <= 0 {
		return s.CreateRunJob(ctx, j)
	}
	ctx, span := s.start(ctx, "CreateRunJobWithin")
	defer func() { err = end(span, err) }()
	spec, err := s.newRunJob(j)
	if err != nil {
		return err
	}
	return s.inTx(ctx, func(tx *sql.Tx) error {
		if s.dialect == "postgres" { // SQLite: BEGIN IMMEDIATE already serializes
			if _, err := tx.ExecContext(ctx, qRunQuotaLock, j.KeyID); err != nil {
				return fmt.Errorf("run quota lock: %w", err)
			}
		}
		var n int
		if err := s.txQueryRow(ctx, tx, qActiveRunJobs, j.KeyID, lockstep.JobQueued, micros(b.QueuedSince), lockstep.JobRunning, micros(b.Now)).Scan(&n); err != nil {
			return fmt.Errorf("count active run jobs: %w", err)
		}
		if n >= b.Max {
			msg := fmt.Sprintf("run quota: %d run jobs queued or running, the limit is %d: retry when one ends", n, b.Max)
			if b.Message != nil {
				msg = b.Message(n)
			}
			return lockstep.Errorf(lockstep.ERATELIMITED, "%s", msg)
		}
		_, err := tx.ExecContext(ctx, qInsertRunJob, j.ID, j.Workspace, j.KeyID, spec, j.State, micros(j.CreatedAt), micros(j.UpdatedAt))
		return err
	})
}

const runJobCols = `id, workspace, key_id, spec, state, runner_id, lease_until, result, error, created_at, updated_at`

func scanRunJob(row interface{ Scan(...any) error }) (*lockstep.RunJob, error) {
	var j lockstep.RunJob
	var spec, result string
	var lease sql.NullInt64
	var created, updated int64
	if err := row.Scan(&j.ID, &j.Workspace, &j.KeyID, &spec, &j.State, &j.RunnerID, &lease, &result, &j.Error, &created, &updated); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(spec), &j.Spec); err != nil {
		return nil, fmt.Errorf("run job %s spec: %w", j.ID, err)
	}
	if result != "" {
		j.Result = json.RawMessage(result)
	}
	j.LeaseUntil = fromNullMicros(lease)
	j.CreatedAt, j.UpdatedAt = fromMicros(created), fromMicros(updated)
	return &j, nil
}

// RunJob returns one job.
func (s *DB) RunJob(ctx context.Context, id string) (j *lockstep.RunJob, err error) {
	ctx, span := s.start(ctx, "RunJob")
	defer func() { err = end(span, err) }()
	j, err = scanRunJob(s.db.QueryRowContext(ctx, `SELECT `+runJobCols+` FROM run_jobs WHERE id = $1`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, because(err, lockstep.ENOTFOUND, "run job %s not found", id)
	}
	return j, err
}

// ClaimRunJob takes the oldest queued job r takes: a compare-and-swap
// from queued, so two runners (on any replica) never take the same job.
func (s *DB) ClaimRunJob(ctx context.Context, r *lockstep.Runner, leaseUntil time.Time) (j *lockstep.RunJob, err error) {
	ctx, span := s.start(ctx, "ClaimRunJob")
	defer func() { err = end(span, err) }()
	rows, err := s.db.QueryContext(ctx, `SELECT id, workspace FROM run_jobs WHERE state = $1 ORDER BY created_at, id LIMIT 200`, lockstep.JobQueued)
	if err != nil {
		return nil, err
	}
	var ids []string
	for rows.Next() {
		var id, ws string
		if err := rows.Scan(&id, &ws); err != nil {
			rows.Close()
			return nil, err
		}
		if r.Takes(ws) {
			ids = append(ids, id)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	now := lockstep.TruncateTime(s.now())
	for _, id := range ids {
		res, err := s.db.ExecContext(ctx, `UPDATE run_jobs SET state = $1, runner_id = $2, lease_until = $3, updated_at = $4 WHERE id = $5 AND state = $6`,
			lockstep.JobRunning, r.ID, micros(leaseUntil), micros(now), id, lockstep.JobQueued)
		if err != nil {
			return nil, err
		}
		if n, _ := res.RowsAffected(); n == 1 {
			return scanRunJob(s.db.QueryRowContext(ctx, `SELECT `+runJobCols+` FROM run_jobs WHERE id = $1`, id))
		}
	}
	return nil, nil
}

func lostLease(id string) error {
	return lockstep.Errorf(lockstep.EREFCONFLICT, "run job %s is no longer running on this runner (its lease ended or it was finished)", id)
}

// RenewRunJob extends a running job's lease.
func (s *DB) RenewRunJob(ctx context.Context, id, runnerID string, leaseUntil time.Time) (err error) {
	ctx, span := s.start(ctx, "RenewRunJob")
	defer func() { err = end(span, err) }()
	return s.renew(ctx, s.db, id, runnerID, leaseUntil)
}

func (s *DB) renew(ctx context.Context, q interface {
	ExecContext(context.Context, string, ...any) (sql.Result, error)
}, id, runnerID string, leaseUntil time.Time) error {
	res, err := q.ExecContext(ctx, `UPDATE run_jobs SET lease_until = $1, updated_at = $2 WHERE id = $3 AND runner_id = $4 AND state = $5`,
		micros(leaseUntil), micros(s.now()), id, runnerID, lockstep.JobRunning)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return lostLease(id)
	}
	return nil
}

// AppendRunJobOutput stores output lines and renews the lease; past
// maxBytes of text (0: no limit) the rest is dropped, after one line
// saying so (lockstep.RunJobOutputCut).
func (s *DB) AppendRunJobOutput(ctx context.Context, id, runnerID string, lines []lockstep.RunJobLine, leaseUntil time.Time, maxBytes int64) (err error) {
	ctx, span := s.start(ctx, "AppendRunJobOutput")
	defer func() { err = end(span, err) }()
	return s.inTx(ctx, func(tx *sql.Tx) error {
		if err := s.renew(ctx, tx, id, runnerID, leaseUntil); err != nil {
			return err
		}
		var last, used int64
		if err := tx.QueryRowContext(ctx, `SELECT output_bytes FROM run_jobs WHERE id = $1`, id).Scan(&used); err != nil {
			return err
		}
		if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(seq), 0) FROM run_job_output WHERE job_id = $1`, id).Scan(&last); err != nil {
			return err
		}
		keep := lines
		if maxBytes > 0 {
			keep = nil
			for _, l := range lines {
				if used >= maxBytes {
					break // cut before: the marker is stored already
				}
				if used+int64(len(l.Text)) > maxBytes {
					keep = append(keep, lockstep.RunJobLine{Stream: "stderr", Text: lockstep.RunJobOutputCut(maxBytes)})
					used = maxBytes
					break
				}
				keep = append(keep, l)
				used += int64(len(l.Text))
			}
		}
		for i := range keep {
			last++
			keep[i].Seq = last
			if _, err := tx.ExecContext(ctx, `INSERT INTO run_job_output (job_id, seq, stream, line) VALUES ($1, $2, $3, $4)`, id, last, keep[i].Stream, keep[i].Text); err != nil {
				return err
			}
		}
		if maxBytes > 0 && len(keep) > 0 {
			if _, err := tx.ExecContext(ctx, `UPDATE run_jobs SET output_bytes = $1 WHERE id = $2`, used, id); err != nil {
				return err
			}
		}
		return nil
	})
}

// RunJobOutput returns lines after seq.
func (s *DB) RunJobOutput(ctx context.Context, id string, after int64, limit int) (ls []lockstep.RunJobLine, err error) {
	ctx, span := s.start(ctx, "RunJobOutput")
	defer func() { err = end(span, err) }()
	if limit <= 0 {
		limit = 1000
	}
	rows, err := s.db.QueryContext(ctx, `SELECT seq, stream, line FROM run_job_output WHERE job_id = $1 AND seq > $2 ORDER BY seq LIMIT $3`, id, after, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var l lockstep.RunJobLine
		if err := rows.Scan(&l.Seq, &l.Stream, &l.Text); err != nil {
			return nil, err
		}
		ls = append(ls, l)
	}
	return ls, rows.Err()
}

// FinishRunJob ends a job (see lockstep.RunJobStore).
func (s *DB) FinishRunJob(ctx context.Context, id, runnerID string, result json.RawMessage, errMsg string) (err error) {
	ctx, span := s.start(ctx, "FinishRunJob")
	defer func() { err = end(span, err) }()
	now := micros(s.now())
	var res sql.Result
	if runnerID != "" {
		res, err = s.db.ExecContext(ctx, `UPDATE run_jobs SET state = $1, result = $2, error = $3, lease_until = NULL, updated_at = $4 WHERE id = $5 AND runner_id = $6 AND state = $7`,
			lockstep.JobDone, string(result), errMsg, now, id, runnerID, lockstep.JobRunning)
	} else {
		res, err = s.db.ExecContext(ctx, `UPDATE run_jobs SET state = $1, error = $2, lease_until = NULL, updated_at = $3 WHERE id = $4 AND state IN ($5, $6)`,
			lockstep.JobFailed, errMsg, now, id, lockstep.JobQueued, lockstep.JobRunning)
	}
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return lostLease(id)
	}
	return nil
}

// ExpireRunJobs fails running jobs whose lease has ended.
func (s *DB) ExpireRunJobs(ctx context.Context, now time.Time) (n int, err error) {
	ctx, span := s.start(ctx, "ExpireRunJobs")
	defer func() { err = end(span, err) }()
	res, err := s.db.ExecContext(ctx, `UPDATE run_jobs SET state = $1, error = 'the runner stopped renewing its lease (it died or lost the server): the job was abandoned', lease_until = NULL, updated_at = $2
		WHERE state = $3 AND lease_until < $4`, lockstep.JobFailed, micros(now), lockstep.JobRunning, micros(now))
	if err != nil {
		return 0, err
	}
	m, _ := res.RowsAffected()
	return int(m), nil
}

// SetRunJobKey records a taken job's minted key (see lockstep.RunJobStore).
func (s *DB) SetRunJobKey(ctx context.Context, id, keyID string) (err error) {
	ctx, span := s.start(ctx, "SetRunJobKey")
	defer func() { err = end(span, err) }()
	res, err := s.db.ExecContext(ctx, `UPDATE run_jobs SET job_key_id = $1 WHERE id = $2`, keyID, id)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return lockstep.Errorf(lockstep.ENOTFOUND, "run job %s not found", id)
	}
	return nil
}

// EndedRunJobKeys lists ended jobs that still name a minted key.
func (s *DB) EndedRunJobKeys(ctx context.Context, limit int) (ks []lockstep.RunJobKey, err error) {
	ctx, span := s.start(ctx, "EndedRunJobKeys")
	defer func() { err = end(span, err) }()
	rows, err := s.db.QueryContext(ctx, `SELECT id, job_key_id FROM run_jobs WHERE job_key_id <> '' AND state IN ($1, $2) ORDER BY updated_at, id LIMIT $3`,
		lockstep.JobDone, lockstep.JobFailed, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var k lockstep.RunJobKey
		if err := rows.Scan(&k.JobID, &k.KeyID); err != nil {
			return nil, err
		}
		ks = append(ks, k)
	}
	return ks, rows.Err()
}

// ClearRunJobKey forgets a job's minted key once revoked.
func (s *DB) ClearRunJobKey(ctx context.Context, id, keyID string) (err error) {
	ctx, span := s.start(ctx, "ClearRunJobKey")
	defer func() { err = end(span, err) }()
	_, err = s.db.ExecContext(ctx, `UPDATE run_jobs SET job_key_id = '' WHERE id = $1 AND job_key_id = $2`, id, keyID)
	return err
}

// CountActiveRunJobs counts keyID's queued jobs created at or after
// queuedSince and its running jobs whose lease lasts until now or later.
func (s *DB) CountActiveRunJobs(ctx context.Context, keyID string, queuedSince, now time.Time) (n int, err error) {
	ctx, span := s.start(ctx, "CountActiveRunJobs")
	defer func() { err = end(span, err) }()
	err = s.db.QueryRowContext(ctx, qActiveRunJobs, keyID, lockstep.JobQueued, micros(queuedSince), lockstep.JobRunning, micros(now)).Scan(&n)
	return n, err
}
