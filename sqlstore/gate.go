package sqlstore

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/lockstep-hq/lockstep"
)

// SetPolicy upserts a branch policy.
func (s *DB) SetPolicy(ctx context.Context, repoID int64, p lockstep.Policy, entry *lockstep.OpEntry) (err error) {
	ctx, span := s.start(ctx, "SetPolicy")
	defer func() { err = end(span, err) }()
	b, _ := json.Marshal(p)
	return s.inTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO gates (repo_id, branch, policy, updated_at) VALUES ($1, $2, $3, $4)
			ON CONFLICT (repo_id, branch) DO UPDATE SET policy = excluded.policy, updated_at = excluded.updated_at`,
			repoID, p.Branch, string(b), micros(s.now()))
		if err != nil {
			return fmt.Errorf("store policy: %w", err)
		}
		return s.appendOp(ctx, tx, entry)
	})
}

// Policy returns a branch's policy.
func (s *DB) Policy(ctx context.Context, repoID int64, branch string) (p lockstep.Policy, err error) {
	ctx, span := s.start(ctx, "Policy")
	defer func() { err = end(span, err) }()
	var raw string
	err = s.db.QueryRowContext(ctx, `SELECT policy FROM gates WHERE repo_id = $1 AND branch = $2`, repoID, branch).Scan(&raw)
	if errors.Is(err, sql.ErrNoRows) {
		return p, because(err, lockstep.ENOTFOUND, "no gate policy for branch %s", branch)
	}
	if err != nil {
		return p, err
	}
	return p, json.Unmarshal([]byte(raw), &p)
}

// AddCheck stores a check result.
func (s *DB) AddCheck(ctx context.Context, network string, c *lockstep.Check, entry *lockstep.OpEntry) (err error) {
	ctx, span := s.start(ctx, "AddCheck")
	defer func() { err = end(span, err) }()
	if c.CreatedAt.IsZero() {
		c.CreatedAt = lockstep.TruncateTime(s.now())
	}
	return s.inTx(ctx, func(tx *sql.Tx) error {
		err := tx.QueryRowContext(ctx, `INSERT INTO checks (network, commit_oid, name, status, summary, details_url, key_name, created_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id`,
			network, c.Commit, c.Name, c.Status, c.Summary, c.DetailsURL, c.KeyName, micros(c.CreatedAt)).Scan(&c.ID)
		if err != nil {
			return fmt.Errorf("insert check: %w", err)
		}
		return s.appendOp(ctx, tx, entry)
	})
}

// Checks lists a commit's results, oldest first.
func (s *DB) Checks(ctx context.Context, network, commit string) (out []lockstep.Check, err error) {
	ctx, span := s.start(ctx, "Checks")
	defer func() { err = end(span, err) }()
	rows, err := s.db.QueryContext(ctx, `SELECT id, commit_oid, name, status, summary, details_url, key_name, created_at
		FROM checks WHERE network = $1 AND commit_oid = $2 ORDER BY id`, network, commit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var c lockstep.Check
		var t int64
		if err := rows.Scan(&c.ID, &c.Commit, &c.Name, &c.Status, &c.Summary, &c.DetailsURL, &c.KeyName, &t); err != nil {
			return nil, err
		}
		c.CreatedAt = fromMicros(t)
		out = append(out, c)
	}
	return out, rows.Err()
}

// CreateHook stores a hook, its secret and its URL's query sealed.
func (s *DB) CreateHook(ctx context.Context, h *lockstep.Hook, entry *lockstep.OpEntry) (err error) {
	ctx, span := s.start(ctx, "CreateHook")
	defer func() { err = end(span, err) }()
	if h.CreatedAt.IsZero() {
		h.CreatedAt = lockstep.TruncateTime(s.now())
	}
	ev, _ := json.Marshal(h.Events)
	sealed, err := s.seal(h.ID, h.Secret)
	if err != nil {
		return err
	}
	sealedURL, err := s.sealHookURL(h.ID, h.URL)
	if err != nil {
		return err
	}
	return s.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO hooks (id, repo_id, url, secret, events, active, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
			h.ID, h.RepoID, sealedURL, sealed, string(ev), h.Active, micros(h.CreatedAt)); err != nil {
			return fmt.Errorf("insert hook: %w", err)
		}
		return s.appendOp(ctx, tx, entry)
	})
}

const hookCols = `h.id, r.name, h.repo_id, h.url, h.secret, h.events, h.active, h.created_at, h.prev_secret, h.prev_secret_until`

// scanHook reads a hook row and decrypts its secrets and its URL's query.
func (s *DB) scanHook(row interface{ Scan(...any) error }) (*lockstep.Hook, error) {
	var h lockstep.Hook
	var ev string
	var t, until int64
	if err := row.Scan(&h.ID, &h.Repo, &h.RepoID, &h.URL, &h.Secret, &ev, &h.Active, &t, &h.PrevSecret, &until); err != nil {
		return nil, err
	}
	h.CreatedAt = fromMicros(t)
	json.Unmarshal([]byte(ev), &h.Events)
	var err error
	if h.URL, err = s.openHookURL(h.ID, h.URL); err != nil {
		return nil, err
	}
	if h.Secret, err = s.open(h.ID, h.Secret); err != nil {
		return nil, err
	}
	if h.PrevSecret != "" && until > 0 {
		if h.PrevSecret, err = s.open(h.ID, h.PrevSecret); err != nil {
			return nil, err
		}
		u := fromMicros(until)
		h.PrevSecretUntil = &u
	} else {
		h.PrevSecret = ""
	}
	return &h, nil
}

// RotateHookSecret replaces a hook's secret, keeping prev until prevUntil.
func (s *DB) RotateHookSecret(ctx context.Context, id, secret, prev string, prevUntil time.Time, entry *lockstep.OpEntry) (err error) {
	ctx, span := s.start(ctx, "RotateHookSecret")
	defer func() { err = end(span, err) }()
	sealed, err := s.seal(id, secret)
	if err != nil {
		return err
	}
	var sealedPrev string
	var until int64
	if prev != "" {
		if sealedPrev, err = s.seal(id, prev); err != nil {
			return err
		}
		until = micros(prevUntil)
	}
	return s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE hooks SET secret = $1, prev_secret = $2, prev_secret_until = $3 WHERE id = $4`, sealed, sealedPrev, until, id)
		if err != nil {
			return fmt.Errorf("rotate hook secret: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return lockstep.Errorf(lockstep.ENOTFOUND, "hook %s not found", id)
		}
		return s.appendOp(ctx, tx, entry)
	})
}

// Hooks lists a repository's hooks.
func (s *DB) Hooks(ctx context.Context, repoID int64) (out []lockstep.Hook, err error) {
	ctx, span := s.start(ctx, "Hooks")
	defer func() { err = end(span, err) }()
	rows, err := s.db.QueryContext(ctx, `SELECT `+hookCols+` FROM hooks h JOIN repos r ON r.id = h.repo_id WHERE h.repo_id = $1 ORDER BY h.created_at, h.id`, repoID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		h, err := s.scanHook(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, *h)
	}
	return out, rows.Err()
}

// Hook returns one hook.
func (s *DB) Hook(ctx context.Context, id string) (h *lockstep.Hook, err error) {
	ctx, span := s.start(ctx, "Hook")
	defer func() { err = end(span, err) }()
	h, err = s.scanHook(s.db.QueryRowContext(ctx, `SELECT `+hookCols+` FROM hooks h JOIN repos r ON r.id = h.repo_id WHERE h.id = $1`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, because(err, lockstep.ENOTFOUND, "hook %s not found", id)
	}
	return h, err
}

// NewID returns a random id with a prefix.
func NewID(prefix string) string {
	var b [10]byte
	rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// enqueue inserts one delivery per matching active hook, inside tx. The
// hooks of a set of repositories are read once per call: the events of
// one move (a push of many refs: one per branch) name the same ones.
func (s *DB) enqueue(ctx context.Context, tx *sql.Tx, events []lockstep.HookEvent) error {
	now := micros(s.now())
	type hook struct {
		id     string
		events []string
	}
	read := map[string][]hook{} // by the repositories' names, joined
	for _, ev := range events {
		if len(ev.Repos) == 0 {
			continue
		}
		key := strings.Join(ev.Repos, "\x00")
		hooks, ok := read[key]
		if !ok {
			var ph []string
			args := []any{}
			for _, r := range ev.Repos {
				args = append(args, r)
				ph = append(ph, fmt.Sprintf("$%d", len(args)))
			}
			rows, err := tx.QueryContext(ctx, `SELECT h.id, h.events FROM hooks h JOIN repos r ON r.id = h.repo_id
			WHERE h.active AND r.name IN (`+strings.Join(ph, ", ")+`)`, args...)
			if err != nil {
				return fmt.Errorf("find hooks: %w", err)
			}
			for rows.Next() {
				var h hook
				var evs string
				if err := rows.Scan(&h.id, &evs); err != nil {
					rows.Close()
					return err
				}
				json.Unmarshal([]byte(evs), &h.events)
				hooks = append(hooks, h)
			}
			// A failure half-way through the hooks (a lost connection, a read
			// error) must fail the transaction: committing the ref move with
			// the deliveries read so far would lose the others for good.
			err = rows.Err()
			rows.Close()
			if err != nil {
				return fmt.Errorf("find hooks: %w", err)
			}
			read[key] = hooks
		}
		var ids []string
		for _, h := range hooks {
			for _, e := range h.events {
				if e == ev.Event || e == "*" {
					ids = append(ids, h.id)
					break
				}
			}
		}
		if len(ids) == 0 {
			continue
		}
		payload, _ := json.Marshal(ev.Payload)
		for _, id := range ids {
			if _, err := tx.ExecContext(ctx, `INSERT INTO deliveries (id, hook_id, event, payload, status, attempts, next_attempt_at, locked_until, created_at, updated_at)
				VALUES ($1, $2, $3, $4, $5, 0, $6, 0, $6, $6)`, NewID("dlv_"), id, ev.Event, string(payload), lockstep.DeliveryPending, now); err != nil {
				return fmt.Errorf("enqueue delivery: %w", err)
			}
		}
	}
	return nil
}

// EnqueueEvents writes deliveries in their own transaction.
func (s *DB) EnqueueEvents(ctx context.Context, events []lockstep.HookEvent) (err error) {
	ctx, span := s.start(ctx, "EnqueueEvents")
	defer func() { err = end(span, err) }()
	return s.inTx(ctx, func(tx *sql.Tx) error { return s.enqueue(ctx, tx, events) })
}

const deliveryCols = `id, hook_id, event, payload, status, attempts, next_attempt_at, created_at, updated_at`

func scanDelivery(row interface{ Scan(...any) error }) (*lockstep.Delivery, error) {
	var d lockstep.Delivery
	var next, c, u int64
	if err := row.Scan(&d.ID, &d.HookID, &d.Event, &d.Payload, &d.Status, &d.Attempts, &next, &c, &u); err != nil {
		return nil, err
	}
	d.NextAttemptAt, d.CreatedAt, d.UpdatedAt = fromMicros(next), fromMicros(c), fromMicros(u)
	return &d, nil
}

// ClaimDeliveries leases due deliveries. The lease is taken by a
// conditional UPDATE per row, so two workers (or replicas) never hold the
// same delivery; an expired lease (a worker that died) is taken over.
func (s *DB) ClaimDeliveries(ctx context.Context, now time.Time, lease time.Duration, n int) (out []lockstep.Delivery, err error) {
	ctx, span := s.start(ctx, "ClaimDeliveries")
	defer func() { err = end(span, err) }()
	nowUS := micros(now)
	rows, err := s.db.QueryContext(ctx, `SELECT `+deliveryCols+`, locked_until FROM deliveries
		WHERE status = $1 AND next_attempt_at <= $2 AND locked_until < $2 ORDER BY next_attempt_at LIMIT $3`, lockstep.DeliveryPending, nowUS, n)
	if err != nil {
		return nil, err
	}
	type cand struct {
		d      *lockstep.Delivery
		locked int64
	}
	var cands []cand
	for rows.Next() {
		var d lockstep.Delivery
		var next, c, u, locked int64
		if err := rows.Scan(&d.ID, &d.HookID, &d.Event, &d.Payload, &d.Status, &d.Attempts, &next, &c, &u, &locked); err != nil {
			rows.Close()
			return nil, err
		}
		d.NextAttemptAt, d.CreatedAt, d.UpdatedAt = fromMicros(next), fromMicros(c), fromMicros(u)
		cands = append(cands, cand{&d, locked})
	}
	err = rows.Err()
	rows.Close()
	if err != nil {
		return nil, fmt.Errorf("read due deliveries: %w", err)
	}
	for _, cd := range cands {
		// attempts is part of the condition: locked_until returns to 0 after
		// every attempt, so without it a worker holding a stale snapshot
		// (another worker claimed, sent and recorded meanwhile) would claim
		// the row again and send before its backoff, with a stale attempt
		// number.
		res, err := s.db.ExecContext(ctx, `UPDATE deliveries SET locked_until = $1 WHERE id = $2 AND locked_until = $3 AND status = $4 AND attempts = $5`,
			micros(now.Add(lease)), cd.d.ID, cd.locked, lockstep.DeliveryPending, cd.d.Attempts)
		if err != nil {
			return nil, err
		}
		if k, _ := res.RowsAffected(); k == 1 {
			out = append(out, *cd.d)
		}
	}
	return out, nil
}

// RecordAttempt stores an attempt and moves the delivery on; a delivery
// that stopped being pending meanwhile (its hook was deleted) is not
// revived by a failed attempt.
func (s *DB) RecordAttempt(ctx context.Context, deliveryID string, a lockstep.DeliveryAttempt, status string, next time.Time) (err error) {
	ctx, span := s.start(ctx, "RecordAttempt")
	defer func() { err = end(span, err) }()
	var nextRetry int64
	if a.NextRetryAt != nil {
		nextRetry = micros(*a.NextRetryAt)
	}
	return s.inTx(ctx, func(tx *sql.Tx) error {
		// A hook deleted while this attempt was in flight has had its
		// pending deliveries marked failed: a failed attempt must not
		// bring the delivery back to pending (and retry a deleted hook).
		lock := ""
		if s.dialect == "postgres" {
			lock = " FOR UPDATE" // DeactivateHook waits, or we see its update
		}
		var cur string
		if err := tx.QueryRowContext(ctx, `SELECT status FROM deliveries WHERE id = $1`+lock, deliveryID).Scan(&cur); err != nil {
			return fmt.Errorf("read delivery: %w", err)
		}
		if cur != lockstep.DeliveryPending && status != lockstep.DeliverySucceeded {
			status, a.NextRetryAt, nextRetry = cur, nil, 0
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO delivery_attempts (delivery_id, attempt, status_code, duration_us, error, next_retry_at, at)
			VALUES ($1, $2, $3, $4, $5, $6, $7)`, deliveryID, a.Attempt, a.StatusCode, int64(a.DurationMS*1000), a.Error, nextRetry, micros(a.At)); err != nil {
			return fmt.Errorf("insert attempt: %w", err)
		}
		_, err := tx.ExecContext(ctx, `UPDATE deliveries SET status = $1, attempts = $2, next_attempt_at = $3, locked_until = 0, updated_at = $4 WHERE id = $5`,
			status, a.Attempt, micros(next), micros(a.At), deliveryID)
		return err
	})
}

// Deliveries lists a hook's deliveries with their attempts.
func (s *DB) Deliveries(ctx context.Context, hookID string, limit int) (out []lockstep.Delivery, err error) {
	ctx, span := s.start(ctx, "Deliveries")
	defer func() { err = end(span, err) }()
	if limit <= 0 || limit > 500 {
		limit = 100
	}
	rows, err := s.db.QueryContext(ctx, `SELECT `+deliveryCols+` FROM deliveries WHERE hook_id = $1 ORDER BY created_at DESC, id LIMIT $2`, hookID, limit)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		d, err := scanDelivery(rows)
		if err != nil {
			rows.Close()
			return nil, err
		}
		out = append(out, *d)
	}
	err = rows.Err()
	rows.Close()
	if err != nil {
		return nil, fmt.Errorf("read deliveries: %w", err)
	}
	for i := range out {
		arows, err := s.db.QueryContext(ctx, `SELECT attempt, status_code, duration_us, error, next_retry_at, at FROM delivery_attempts WHERE delivery_id = $1 ORDER BY attempt`, out[i].ID)
		if err != nil {
			return nil, err
		}
		out[i].History = []lockstep.DeliveryAttempt{}
		for arows.Next() {
			var a lockstep.DeliveryAttempt
			var dur, next, at int64
			if err := arows.Scan(&a.Attempt, &a.StatusCode, &dur, &a.Error, &next, &at); err != nil {
				arows.Close()
				return nil, err
			}
			a.DurationMS = float64(dur) / 1000
			a.At = fromMicros(at)
			if next > 0 {
				t := fromMicros(next)
				a.NextRetryAt = &t
			}
			out[i].History = append(out[i].History, a)
		}
		err = arows.Err()
		arows.Close()
		if err != nil {
			return nil, fmt.Errorf("read delivery attempts: %w", err)
		}
	}
	return out, nil
}

// DeactivateHook marks a hook inactive and drops its pending deliveries.
func (s *DB) DeactivateHook(ctx context.Context, id string, entry *lockstep.OpEntry) (err error) {
	ctx, span := s.start(ctx, "DeactivateHook")
	defer func() { err = end(span, err) }()
	return s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE hooks SET active = FALSE WHERE id = $1`, id)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return lockstep.Errorf(lockstep.ENOTFOUND, "hook %s not found", id)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE deliveries SET status = $1 WHERE hook_id = $2 AND status = $3`, lockstep.DeliveryFailed, id, lockstep.DeliveryPending); err != nil {
			return err
		}
		return s.appendOp(ctx, tx, entry)
	})
}
