package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/lockstep-hq/lockstep"
)

// Outbox row statuses (effect_outbox.status).
const (
	outboxHeld      = "held"
	outboxPending   = "pending"
	outboxSucceeded = "succeeded"
	outboxFailed    = "failed"
	outboxDiscarded = "discarded"
)

// storedHTTP is an EffectHTTP as the request/compensation column keeps it
// (the body has its own column).
type storedHTTP struct {
	Method string `json:"method"`
	// URL is the target without its query and fragment when Query holds
	// them sealed; the whole URL otherwise (none, or stored without a
	// key).
	URL     string            `json:"url"`
	Query   string            `json:"query,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
	Secret  []string          `json:"secret,omitempty"`
}

// sealHTTP encodes h with the URL's query and its secret header values
// sealed; the additional data binds each ciphertext to the effect, the
// part and the header (the query: queryAD).
func (s *DB) sealHTTP(id, part string, h lockstep.EffectHTTP) (string, error) {
	st := storedHTTP{Method: h.Method, Secret: h.Secret}
	var err error
	if st.URL, st.Query, err = s.sealTarget(id+"/"+part, h.URL); err != nil {
		return "", err
	}
	if len(h.Headers) > 0 {
		st.Headers = make(map[string]string, len(h.Headers))
		for k, v := range h.Headers {
			st.Headers[k] = v
		}
		for _, k := range h.Secret {
			if v, ok := st.Headers[k]; ok {
				sealed, err := s.seal(id+"/"+part+"/"+k, v)
				if err != nil {
					return "", err
				}
				st.Headers[k] = sealed
			}
		}
	}
	b, err := json.Marshal(st)
	return string(b), err
}

func (s *DB) openHTTP(id, part, raw string, body []byte) (lockstep.EffectHTTP, error) {
	var st storedHTTP
	if err := json.Unmarshal([]byte(raw), &st); err != nil {
		return lockstep.EffectHTTP{}, fmt.Errorf("effect %s %s: %w", id, part, err)
	}
	h := lockstep.EffectHTTP{Method: st.Method, Headers: st.Headers, Secret: st.Secret, Body: body}
	var err error
	if h.URL, err = s.openTarget(id+"/"+part, st.URL, st.Query); err != nil {
		return h, err
	}
	for _, k := range st.Secret {
		if v, ok := h.Headers[k]; ok {
			plain, err := s.open(id+"/"+part+"/"+k, v)
			if err != nil {
				return h, err
			}
			h.Headers[k] = plain
		}
	}
	return h, nil
}

// StageEffect stores a staged effect with its log entry.
func (s *DB) StageEffect(ctx context.Context, e *lockstep.Effect, max int, entry *lockstep.OpEntry) (err error) {
	ctx, span := s.start(ctx, "StageEffect")
	defer func() { err = end(span, err) }()
	req, err := s.sealHTTP(e.ID, "request", e.Request)
	if err != nil {
		return err
	}
	comp := ""
	var compBody []byte
	if e.Compensation != nil {
		if comp, err = s.sealHTTP(e.ID, "compensation", *e.Compensation); err != nil {
			return err
		}
		compBody = e.Compensation.Body
	}
	now := lockstep.TruncateTime(s.now())
	return s.inTx(ctx, func(tx *sql.Tx) error {
		// The workspace's row first (a status change waits, or we see it),
		// then the log head: the order every writer takes them in.
		res, err := tx.ExecContext(ctx, `UPDATE repos SET status = status WHERE id = $1 AND status = $2`, e.RepoID, lockstep.StatusActive)
		if err != nil {
			return fmt.Errorf("lock repository %s: %w", e.Repo, err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			var cur string
			if err := tx.QueryRowContext(ctx, `SELECT status FROM repos WHERE id = $1`, e.RepoID).Scan(&cur); err != nil {
				if errors.Is(err, sql.ErrNoRows) {
					return because(err, lockstep.ENOTFOUND, "repository %s not found", e.Repo)
				}
				return fmt.Errorf("read status of %s: %w", e.Repo, err)
			}
			return lockstep.Errorf(lockstep.EINVALID, "workspace %s is %s: effects are staged only on active workspaces", e.Repo, cur)
		}
		if max > 0 {
			var n int
			if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM effects WHERE repo_id = $1 AND status = $2`, e.RepoID, lockstep.EffectStaged).Scan(&n); err != nil {
				return fmt.Errorf("count effects: %w", err)
			}
			if n >= max {
				return lockstep.Errorf(lockstep.ETOOLARGE, "workspace %s already has %d staged effects (--effect-max-staged %d)", e.Repo, n, max)
			}
		}
		// The effect's seq is its entry's: read the head under the lock
		// appendOp takes anyway, so the staged answer has it.
		lock := ""
		if s.dialect == "postgres" {
			lock = " FOR UPDATE"
		}
		var head int64
		if err := tx.QueryRowContext(ctx, `SELECT seq FROM oplog_head WHERE id = 1`+lock).Scan(&head); err != nil {
			return fmt.Errorf("read oplog head: %w", err)
		}
		e.Seq, e.Status, e.CreatedAt, e.UpdatedAt = head+1, lockstep.EffectStaged, now, now
		if _, err := tx.ExecContext(ctx, `INSERT INTO effects (id, seq, repo_id, status, request, body, compensation, comp_body, label, class, run_id, consuming, key_name, created_at, updated_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $14)`,
			e.ID, e.Seq, e.RepoID, e.Status, req, nonNilBytes(e.Request.Body), comp, nonNilBytes(compBody), e.Label, e.Class, e.RunID, e.Consuming, e.KeyName, micros(now)); err != nil {
			if isUnique(err) {
				return because(err, lockstep.ECONFLICT, "effect %s already exists", e.ID)
			}
			return fmt.Errorf("insert effect: %w", err)
		}
		if err := s.appendOp(ctx, tx, entry); err != nil {
			return err
		}
		if entry != nil && entry.Seq != e.Seq {
			return fmt.Errorf("effect seq %d but its entry got %d", e.Seq, entry.Seq)
		}
		return nil
	})
}

func nonNilBytes(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

const effectCols = `e.id, e.seq, e.repo_id, r.name, e.status, e.request, e.body, e.compensation, e.comp_body, e.comp_status, e.label, e.class, e.run_id,
	e.consuming, e.discard_reason, COALESCE(b.name, ''), e.released_commit, e.attempts, e.last_status_code, e.last_error, e.key_name, e.created_at, e.updated_at`

const effectFrom = ` FROM effects e JOIN repos r ON r.id = e.repo_id LEFT JOIN repos b ON b.id = e.released_into`

func (s *DB) scanEffect(row interface{ Scan(...any) error }) (*lockstep.Effect, error) {
	var e lockstep.Effect
	var req, comp string
	var body, compBody []byte
	var c, u int64
	if err := row.Scan(&e.ID, &e.Seq, &e.RepoID, &e.Repo, &e.Status, &req, &body, &comp, &compBody, &e.CompensationStatus, &e.Label, &e.Class, &e.RunID,
		&e.Consuming, &e.DiscardReason, &e.ReleasedInto, &e.ReleasedCommit, &e.Attempts, &e.LastStatusCode, &e.LastError, &e.KeyName, &c, &u); err != nil {
		return nil, err
	}
	e.CreatedAt, e.UpdatedAt = fromMicros(c), fromMicros(u)
	var err error
	if e.Request, err = s.openHTTP(e.ID, "request", req, body); err != nil {
		return nil, err
	}
	if comp != "" {
		h, err := s.openHTTP(e.ID, "compensation", comp, compBody)
		if err != nil {
			return nil, err
		}
		e.Compensation = &h
	}
	return &e, nil
}

// Effect returns one effect with its attempts.
func (s *DB) Effect(ctx context.Context, id string) (e *lockstep.Effect, err error) {
	ctx, span := s.start(ctx, "Effect")
	defer func() { err = end(span, err) }()
	e, err = s.scanEffect(s.db.QueryRowContext(ctx, `SELECT `+effectCols+effectFrom+` WHERE e.id = $1`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, because(err, lockstep.ENOTFOUND, "effect %s not found", id)
	}
	if err != nil {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, `SELECT kind, attempt, status_code, duration_us, error, at FROM effect_attempts WHERE effect_id = $1 ORDER BY at, attempt`, id)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	e.History = []lockstep.EffectAttempt{}
	for rows.Next() {
		var a lockstep.EffectAttempt
		var dur, at int64
		if err := rows.Scan(&a.Kind, &a.Attempt, &a.StatusCode, &dur, &a.Error, &at); err != nil {
			return nil, err
		}
		a.DurationMS, a.At = float64(dur)/1000, fromMicros(at)
		e.History = append(e.History, a)
	}
	return e, rows.Err()
}

func (s *DB) effectList(ctx context.Context, q string, args ...any) ([]lockstep.Effect, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+effectCols+effectFrom+q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []lockstep.Effect{}
	for rows.Next() {
		e, err := s.scanEffect(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, *e)
	}
	return out, rows.Err()
}

// Effects lists a repository's effects after a seq.
func (s *DB) Effects(ctx context.Context, repoID, after int64, limit int) (out []lockstep.Effect, err error) {
	ctx, span := s.start(ctx, "Effects")
	defer func() { err = end(span, err) }()
	if limit <= 0 {
		limit = 100
	}
	return s.effectList(ctx, ` WHERE e.repo_id = $1 AND e.seq > $2 ORDER BY e.seq LIMIT $3`, repoID, after, limit)
}

// EffectsReleasedBy lists the effects a commit released into a base.
func (s *DB) EffectsReleasedBy(ctx context.Context, baseID int64, commit string) (out []lockstep.Effect, err error) {
	ctx, span := s.start(ctx, "EffectsReleasedBy")
	defer func() { err = end(span, err) }()
	return s.effectList(ctx, ` WHERE e.released_into = $1 AND e.released_commit = $2 ORDER BY e.seq`, baseID, commit)
}

// CompensableEffects lists the delivered effects released into a base
// (by some of commits when not nil) whose compensation was never queued,
// in one query on the effects_released index.
func (s *DB) CompensableEffects(ctx context.Context, baseID int64, commits []string, limit int) (out []lockstep.Effect, err error) {
	ctx, span := s.start(ctx, "CompensableEffects")
	defer func() { err = end(span, err) }()
	if commits != nil && len(commits) == 0 {
		return []lockstep.Effect{}, nil
	}
	if len(commits) > lockstep.MaxCompensableCommits {
		return nil, lockstep.Errorf(lockstep.EINVALID, "%d commits: at most %d", len(commits), lockstep.MaxCompensableCommits)
	}
	q := ` WHERE e.released_into = $1 AND e.status = $2 AND e.compensation <> '' AND e.comp_status = ''`
	args := []any{baseID, lockstep.EffectReleased}
	if commits != nil {
		ph := make([]string, len(commits))
		for i, c := range commits {
			args = append(args, c)
			ph[i] = fmt.Sprintf("$%d", len(args))
		}
		q += ` AND e.released_commit IN (` + strings.Join(ph, ", ") + `)`
	}
	q += ` ORDER BY e.seq`
	if limit > 0 {
		args = append(args, limit)
		q += fmt.Sprintf(" LIMIT $%d", len(args))
	}
	return s.effectList(ctx, q, args...)
}

// DiscardEffects discards staged effects in their own transaction.
func (s *DB) DiscardEffects(ctx context.Context, f lockstep.EffectFilter, entry *lockstep.OpEntry) (ids []string, err error) {
	ctx, span := s.start(ctx, "DiscardEffects")
	defer func() { err = end(span, err) }()
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		ids, err = s.discardTx(ctx, tx, f, entry)
		return err
	})
	return ids, err
}

// discardTx discards the staged effects f selects inside tx and appends
// entry (with their ids) when there were any.
func (s *DB) discardTx(ctx context.Context, tx *sql.Tx, f lockstep.EffectFilter, entry *lockstep.OpEntry) ([]string, error) {
	// The workspace's row first (held already when a status change or a
	// restore's ref move calls this), then the effects, then the log head:
	// the order a promote takes them in, so the two never deadlock.
	if _, err := tx.ExecContext(ctx, `UPDATE repos SET status = status WHERE id = $1`, f.RepoID); err != nil {
		return nil, fmt.Errorf("lock repository: %w", err)
	}
	after := f.AfterSeq
	if f.AfterOp != "" {
		var seq int64
		err := tx.QueryRowContext(ctx, `SELECT seq FROM oplog WHERE id = $1`, f.AfterOp).Scan(&seq)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, because(err, lockstep.ENOTFOUND, "operation %s not found", f.AfterOp)
		}
		if err != nil {
			return nil, fmt.Errorf("read operation %s: %w", f.AfterOp, err)
		}
		if seq > after {
			after = seq
		}
	}
	q := `SELECT id FROM effects WHERE repo_id = $1 AND status = $2 AND seq > $3`
	args := []any{f.RepoID, lockstep.EffectStaged, after}
	if f.RunID != "" {
		q += ` AND run_id = $4`
		args = append(args, f.RunID)
	}
	rows, err := tx.QueryContext(ctx, q+` ORDER BY seq`, args...)
	if err != nil {
		return nil, fmt.Errorf("find effects: %w", err)
	}
	ids := []string{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return nil, err
		}
		ids = append(ids, id)
	}
	err = rows.Err()
	rows.Close()
	if err != nil {
		return nil, fmt.Errorf("find effects: %w", err)
	}
	now := micros(s.now())
	for _, id := range ids {
		if _, err := tx.ExecContext(ctx, `UPDATE effects SET status = $1, discard_reason = $2, updated_at = $3 WHERE id = $4 AND status = $5`,
			lockstep.EffectDiscarded, f.Reason, now, id, lockstep.EffectStaged); err != nil {
			return nil, fmt.Errorf("discard effect %s: %w", id, err)
		}
	}
	if len(ids) == 0 || entry == nil {
		return ids, nil
	}
	d := make(map[string]any, len(entry.Details)+3)
	for k, v := range entry.Details {
		d[k] = v
	}
	d["effects"], d["count"], d["reason"] = ids, len(ids), f.Reason
	entry.Details = d
	return ids, s.appendOp(ctx, tx, entry)
}

// releaseTx puts a promoted workspace's staged effects in the outbox
// (held for the classes in rel.Hold) inside the promote's transaction and
// returns how many were released and held.
func (s *DB) releaseTx(ctx context.Context, tx *sql.Tx, wsID int64, rel *lockstep.EffectRelease, commit string) (released, held int, err error) {
	rows, err := tx.QueryContext(ctx, `SELECT id, seq, class FROM effects WHERE repo_id = $1 AND status = $2 ORDER BY seq`, wsID, lockstep.EffectStaged)
	if err != nil {
		return 0, 0, fmt.Errorf("find staged effects: %w", err)
	}
	type staged struct {
		id    string
		seq   int64
		class string
	}
	var list []staged
	for rows.Next() {
		var st staged
		if err := rows.Scan(&st.id, &st.seq, &st.class); err != nil {
			rows.Close()
			return 0, 0, err
		}
		list = append(list, st)
	}
	err = rows.Err()
	rows.Close()
	if err != nil {
		return 0, 0, fmt.Errorf("find staged effects: %w", err)
	}
	if rel.IntoWorkspace && len(list) > 0 {
		return 0, 0, lockstep.Errorf(lockstep.EINVALID, "the workspace has %d staged effects and %s is a workspace: effects are released only by a promote into a base repository, through its gate; discard them (POST …/effects/discard) or promote into the base", len(list), rel.Into)
	}
	hold := map[string]bool{}
	for _, c := range rel.Hold {
		hold[c] = true
	}
	now := micros(s.now())
	lane := "e" + strconv.FormatInt(wsID, 10)
	for _, st := range list {
		status, ob := lockstep.EffectReleasing, outboxPending
		if st.class != "" && hold[st.class] {
			status, ob = lockstep.EffectHeld, outboxHeld
			held++
		} else {
			released++
		}
		if _, err := tx.ExecContext(ctx, `UPDATE effects SET status = $1, released_into = $2, released_commit = $3, updated_at = $4 WHERE id = $5`,
			status, rel.IntoID, commit, now, st.id); err != nil {
			return 0, 0, fmt.Errorf("release effect %s: %w", st.id, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO effect_outbox (id, effect_id, kind, lane, ord, status, attempts, next_attempt_at, locked_until, created_at, updated_at)
			VALUES ($1, $2, $3, $4, $5, $6, 0, $7, 0, $7, $7)`, NewID("eob_"), st.id, lockstep.EffectKindRequest, lane, st.seq, ob, now); err != nil {
			return 0, 0, fmt.Errorf("enqueue effect %s: %w", st.id, err)
		}
	}
	return released, held, nil
}

// DecideEffect approves or rejects a held effect.
func (s *DB) DecideEffect(ctx context.Context, id string, approve bool, entry *lockstep.OpEntry) (e *lockstep.Effect, err error) {
	ctx, span := s.start(ctx, "DecideEffect")
	defer func() { err = end(span, err) }()
	to, ob, reason := lockstep.EffectReleasing, outboxPending, ""
	if !approve {
		to, ob, reason = lockstep.EffectDiscarded, outboxDiscarded, "rejected by a reviewer"
	}
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		now := micros(s.now())
		res, err := tx.ExecContext(ctx, `UPDATE effects SET status = $1, discard_reason = $2, updated_at = $3 WHERE id = $4 AND status = $5`,
			to, reason, now, id, lockstep.EffectHeld)
		if err != nil {
			return fmt.Errorf("decide effect %s: %w", id, err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			var cur string
			if err := tx.QueryRowContext(ctx, `SELECT status FROM effects WHERE id = $1`, id).Scan(&cur); err != nil {
				if errors.Is(err, sql.ErrNoRows) {
					return because(err, lockstep.ENOTFOUND, "effect %s not found", id)
				}
				return err
			}
			return lockstep.Errorf(lockstep.EINVALID, "effect %s is %s, not held: only held effects are approved or rejected", id, cur)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE effect_outbox SET status = $1, next_attempt_at = $2, updated_at = $2 WHERE effect_id = $3 AND kind = $4 AND status = $5`,
			ob, now, id, lockstep.EffectKindRequest, outboxHeld); err != nil {
			return fmt.Errorf("decide effect %s: %w", id, err)
		}
		return s.appendOp(ctx, tx, entry)
	})
	if err != nil {
		return nil, err
	}
	return s.Effect(ctx, id)
}

// QueueCompensations puts compensations in the outbox.
func (s *DB) QueueCompensations(ctx context.Context, ids []string, entry *lockstep.OpEntry) (queued []string, err error) {
	ctx, span := s.start(ctx, "QueueCompensations")
	defer func() { err = end(span, err) }()
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		queued = []string{}
		now := micros(s.now())
		for _, id := range ids {
			res, err := tx.ExecContext(ctx, `UPDATE effects SET comp_status = $1, updated_at = $2 WHERE id = $3 AND status = $4 AND compensation <> '' AND comp_status = ''`,
				lockstep.CompensationPending, now, id, lockstep.EffectReleased)
			if err != nil {
				return fmt.Errorf("queue compensation of %s: %w", id, err)
			}
			if n, _ := res.RowsAffected(); n != 1 {
				continue
			}
			var repoID, seq int64
			if err := tx.QueryRowContext(ctx, `SELECT repo_id, seq FROM effects WHERE id = $1`, id).Scan(&repoID, &seq); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO effect_outbox (id, effect_id, kind, lane, ord, status, attempts, next_attempt_at, locked_until, created_at, updated_at)
				VALUES ($1, $2, $3, $4, $5, $6, 0, $7, 0, $7, $7)`, NewID("eob_"), id, lockstep.EffectKindCompensation, "c"+strconv.FormatInt(repoID, 10), -seq, outboxPending, now); err != nil {
				return fmt.Errorf("enqueue compensation of %s: %w", id, err)
			}
			queued = append(queued, id)
		}
		if len(queued) == 0 || entry == nil {
			return nil
		}
		d := make(map[string]any, len(entry.Details)+1)
		for k, v := range entry.Details {
			d[k] = v
		}
		d["effects"] = queued
		entry.Details = d
		return s.appendOp(ctx, tx, entry)
	})
	return queued, err
}

// ClaimEffectDeliveries leases due outbox rows, first of their lane, by a
// conditional UPDATE per row (as ClaimDeliveries): two workers, on one
// server or two, never hold the same row; an expired lease (a worker that
// died) is taken over.
func (s *DB) ClaimEffectDeliveries(ctx context.Context, now time.Time, lease time.Duration, n int) (out []lockstep.EffectDelivery, err error) {
	ctx, span := s.start(ctx, "ClaimEffectDeliveries")
	defer func() { err = end(span, err) }()
	nowUS := micros(now)
	rows, err := s.db.QueryContext(ctx, `SELECT o.id, o.kind, o.attempts, o.locked_until, o.effect_id FROM effect_outbox o
		WHERE o.status = $1 AND o.next_attempt_at <= $2 AND o.locked_until < $2
		AND NOT EXISTS (SELECT 1 FROM effect_outbox p WHERE p.lane = o.lane AND p.ord < o.ord AND p.status IN ($1, $3))
		ORDER BY o.next_attempt_at, o.ord LIMIT $4`, outboxPending, nowUS, outboxHeld, n)
	if err != nil {
		return nil, err
	}
	type cand struct {
		id, kind, effect string
		attempts         int
		locked           int64
	}
	var cands []cand
	for rows.Next() {
		var c cand
		if err := rows.Scan(&c.id, &c.kind, &c.attempts, &c.locked, &c.effect); err != nil {
			rows.Close()
			return nil, err
		}
		cands = append(cands, c)
	}
	err = rows.Err()
	rows.Close()
	if err != nil {
		return nil, fmt.Errorf("read due effects: %w", err)
	}
	for _, c := range cands {
		res, err := s.db.ExecContext(ctx, `UPDATE effect_outbox SET locked_until = $1 WHERE id = $2 AND locked_until = $3 AND status = $4 AND attempts = $5`,
			micros(now.Add(lease)), c.id, c.locked, outboxPending, c.attempts)
		if err != nil {
			return nil, err
		}
		if k, _ := res.RowsAffected(); k != 1 {
			continue
		}
		e, err := s.scanEffect(s.db.QueryRowContext(ctx, `SELECT `+effectCols+effectFrom+` WHERE e.id = $1`, c.effect))
		if err != nil {
			return nil, fmt.Errorf("read effect %s: %w", c.effect, err)
		}
		out = append(out, lockstep.EffectDelivery{ID: c.id, Kind: c.kind, Attempts: c.attempts, Effect: *e})
	}
	return out, nil
}

// RecordEffectAttempt stores an attempt and moves the row and its effect
// on.
func (s *DB) RecordEffectAttempt(ctx context.Context, d lockstep.EffectDelivery, a lockstep.EffectAttempt, status string, next time.Time) (err error) {
	ctx, span := s.start(ctx, "RecordEffectAttempt")
	defer func() { err = end(span, err) }()
	switch status {
	case outboxPending, outboxSucceeded, outboxFailed:
	default:
		return lockstep.Errorf(lockstep.EINVALID, "outbox status %q: want pending, succeeded or failed", status)
	}
	return s.inTx(ctx, func(tx *sql.Tx) error {
		at := micros(a.At)
		if _, err := tx.ExecContext(ctx, `INSERT INTO effect_attempts (outbox_id, effect_id, kind, attempt, status_code, duration_us, error, at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
			d.ID, d.Effect.ID, d.Kind, a.Attempt, a.StatusCode, int64(a.DurationMS*1000), a.Error, at); err != nil {
			return fmt.Errorf("insert effect attempt: %w", err)
		}
		res, err := tx.ExecContext(ctx, `UPDATE effect_outbox SET status = $1, attempts = $2, next_attempt_at = $3, locked_until = 0, updated_at = $4 WHERE id = $5 AND status = $6`,
			status, a.Attempt, micros(next), at, d.ID, outboxPending)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return nil // no longer pending: the attempt is history only
		}
		if d.Kind == lockstep.EffectKindCompensation {
			cs := ""
			switch status {
			case outboxSucceeded:
				cs = lockstep.CompensationDone
			case outboxFailed:
				cs = lockstep.CompensationFailed
			}
			if cs != "" {
				_, err = tx.ExecContext(ctx, `UPDATE effects SET comp_status = $1, updated_at = $2 WHERE id = $3`, cs, at, d.Effect.ID)
			}
			return err
		}
		es := lockstep.EffectReleasing
		switch status {
		case outboxSucceeded:
			es = lockstep.EffectReleased
		case outboxFailed:
			es = lockstep.EffectFailed
		}
		_, err = tx.ExecContext(ctx, `UPDATE effects SET status = $1, attempts = $2, last_status_code = $3, last_error = $4, updated_at = $5 WHERE id = $6`,
			es, a.Attempt, a.StatusCode, a.Error, at, d.Effect.ID)
		return err
	})
}
