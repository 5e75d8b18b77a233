package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/lockstep-hq/lockstep"
)

var _ lockstep.IdempotencyStore = (*DB)(nil)

// The two statements of every keyed one-transaction write (the read
// before it runs, the upsert in its commit) are prepared once per store:
// parsing them each time cost SQLite a measurable part of the key's
// budget (docs/idempotency.md).
type idemStmts struct {
	once          sync.Once
	byKey, upsert *sql.Stmt
	err           error
	ready         atomic.Bool // both prepared (set inside once)
}

// preparedIdem holds them by a weak pointer to the store, dropped (and
// closed) when the store is garbage: the store's own struct is not this
// file's to extend.
var preparedIdem sync.Map // weak.Pointer[DB] → *idemStmts

func (s *DB) idemStmts(ctx context.Context) (*idemStmts, error) {
	k := weak.Make(s)
	v, loaded := preparedIdem.LoadOrStore(k, &idemStmts{})
	st := v.(*idemStmts)
	if !loaded {
		runtime.AddCleanup(s, func(k weak.Pointer[DB]) {
			if v, ok := preparedIdem.LoadAndDelete(k); ok {
				v.(*idemStmts).close()
			}
		}, k)
	}
	st.once.Do(func() {
		if st.byKey, st.err = s.db.PrepareContext(context.WithoutCancel(ctx), idemByKeySQL); st.err != nil {
			return
		}
		st.upsert, st.err = s.db.PrepareContext(context.WithoutCancel(ctx), idemUpsertSQL)
		st.ready.Store(st.err == nil)
	})
	if st.err != nil {
		preparedIdem.CompareAndDelete(k, st) // prepare again next time
		return nil, fmt.Errorf("prepare idempotency statements: %w", st.err)
	}
	return st, nil
}

// idemStmtsReady returns the prepared statements if they are ready, and
// never prepares (safe inside a transaction).
func (s *DB) idemStmtsReady() *idemStmts {
	v, ok := preparedIdem.Load(weak.Make(s))
	if !ok || !v.(*idemStmts).ready.Load() {
		return nil
	}
	return v.(*idemStmts)
}

func (st *idemStmts) close() {
	if st.byKey != nil {
		st.byKey.Close()
	}
	if st.upsert != nil {
		st.upsert.Close()
	}
}

const idemByKeySQL = `SELECT ` + idemCols + ` FROM idempotency_keys WHERE owner_key_id = $1 AND idem_key = $2`

const idemCols = `owner_key_id, idem_key, fingerprint, method, path, state, token, lease_until, op_id, status, header, body, replays, created_at, expires_at`

func scanIdem(row interface{ Scan(...any) error }) (*lockstep.IdemRecord, error) {
	var r lockstep.IdemRecord
	var lease, created, expires int64
	var header string
	var body []byte
	if err := row.Scan(&r.Owner, &r.Key, &r.Fingerprint, &r.Method, &r.Path, &r.State, &r.Token, &lease, &r.OpID,
		&r.Status, &header, &body, &r.Replays, &created, &expires); err != nil {
		return nil, err
	}
	r.LeaseUntil, r.CreatedAt, r.ExpiresAt = fromMicros(lease), fromMicros(created), fromMicros(expires)
	r.Body = body
	if header != "" && header != "{}" {
		_ = json.Unmarshal([]byte(header), &r.Header)
	}
	return &r, nil
}

// ClaimIdem inserts rec as running, or returns the live record holding
// (owner, key). An expired record is replaced.
func (s *DB) ClaimIdem(ctx context.Context, rec *lockstep.IdemRecord) (existing *lockstep.IdemRecord, err error) {
	ctx, span := s.start(ctx, "ClaimIdem")
	defer func() { err = end(span, err) }()
	now := micros(s.now())
	if rec.CreatedAt.IsZero() {
		rec.CreatedAt = lockstep.TruncateTime(s.now())
	}
	rec.State = lockstep.IdemRunning
	for try := 0; try < 3; try++ {
		res, err := s.db.ExecContext(ctx, `INSERT INTO idempotency_keys (owner_key_id, idem_key, fingerprint, method, path, state, token, lease_until, created_at, expires_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) ON CONFLICT DO NOTHING`,
			rec.Owner, rec.Key, rec.Fingerprint, rec.Method, rec.Path, rec.State, rec.Token, micros(rec.LeaseUntil), micros(rec.CreatedAt), micros(rec.ExpiresAt))
		if err != nil {
			return nil, fmt.Errorf("insert idempotency key: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 1 {
			return nil, nil
		}
		cur, err := scanIdem(s.db.QueryRowContext(ctx, `SELECT `+idemCols+` FROM idempotency_keys WHERE owner_key_id = $1 AND idem_key = $2`, rec.Owner, rec.Key))
		if errors.Is(err, sql.ErrNoRows) {
			continue // purged meanwhile
		}
		if err != nil {
			return nil, err
		}
		if micros(cur.ExpiresAt) >= now || (cur.State == lockstep.IdemRunning && micros(cur.LeaseUntil) >= now) {
			return cur, nil
		}
		// Expired: drop it (only that version of it) and claim again.
		if _, err := s.db.ExecContext(ctx, `DELETE FROM idempotency_keys WHERE owner_key_id = $1 AND idem_key = $2 AND token = $3`, rec.Owner, rec.Key, cur.Token); err != nil {
			return nil, err
		}
	}
	return nil, lockstep.Errorf(lockstep.EINPROGRESS, "idempotency key %q is contended: retry", rec.Key)
}

// IdemByKey returns one record.
func (s *DB) IdemByKey(ctx context.Context, owner, key string) (r *lockstep.IdemRecord, err error) {
	ctx, span := s.start(ctx, "IdemByKey")
	defer func() { err = end(span, err) }()
	st, err := s.idemStmts(ctx)
	if err != nil {
		return nil, err
	}
	r, err = scanIdem(st.byKey.QueryRowContext(ctx, owner, key))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, lockstep.Errorf(lockstep.ENOTFOUND, "idempotency key %q not found", key)
	}
	return r, err
}

// The entries committed under an Idempotency-Key, found by the index
// oplog_idem (key_id, idem_key), partial on a non-empty idem_key. A
// planner uses a partial index only when the query's WHERE implies the
// index's, and `idem_key = $2` with a parameter does not: without the
// non-empty term SQLite read every entry of the API key (oplog_key), on
// every replay, and oplog_idem was written by every keyed append but
// never read. A key is never empty, so the term changes no answer.
const (
	qIdemOpsCount  = `SELECT COUNT(*) FROM oplog WHERE key_id = $1 AND idem_key = $2 AND idem_key <> ''`
	qIdemOpsReplay = `UPDATE oplog SET replays = replays + 1 WHERE key_id = $1 AND idem_key = $2 AND idem_key <> ''`
	qIdemOps       = `SELECT ` + opCols + ` FROM oplog WHERE key_id = $1 AND idem_key = $2 AND idem_key <> '' ORDER BY seq`
)

// TakeOverIdem re-claims a running record whose holder died, only when no
// operations-log entry carries the key.
func (s *DB) TakeOverIdem(ctx context.Context, owner, key, oldToken, newToken string, leaseUntil time.Time) (ok bool, err error) {
	ctx, span := s.start(ctx, "TakeOverIdem")
	defer func() { err = end(span, err) }()
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		var n int
		if err := tx.QueryRowContext(ctx, qIdemOpsCount, owner, key).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return nil
		}
		res, err := tx.ExecContext(ctx, `UPDATE idempotency_keys SET token = $1, lease_until = $2 WHERE owner_key_id = $3 AND idem_key = $4 AND token = $5 AND state = $6 AND lease_until < $7`,
			newToken, micros(leaseUntil), owner, key, oldToken, lockstep.IdemRunning, micros(s.now()))
		if err != nil {
			return err
		}
		rows, _ := res.RowsAffected()
		ok = rows == 1
		return nil
	})
	return ok, err
}

// ExtendIdem moves a held claim's lease.
func (s *DB) ExtendIdem(ctx context.Context, owner, key, token string, leaseUntil time.Time) (err error) {
	ctx, span := s.start(ctx, "ExtendIdem")
	defer func() { err = end(span, err) }()
	_, err = s.db.ExecContext(ctx, `UPDATE idempotency_keys SET lease_until = $1 WHERE owner_key_id = $2 AND idem_key = $3 AND token = $4`,
		micros(leaseUntil), owner, key, token)
	return err
}

// FinishIdem stores the final answer of a held claim.
func (s *DB) FinishIdem(ctx context.Context, owner, key, token string, status int, header map[string]string, body []byte) (err error) {
	ctx, span := s.start(ctx, "FinishIdem")
	defer func() { err = end(span, err) }()
	h, _ := json.Marshal(header)
	if body == nil {
		body = []byte{}
	}
	res, err := s.db.ExecContext(ctx, `UPDATE idempotency_keys SET state = $1, status = $2, header = $3, body = $4 WHERE owner_key_id = $5 AND idem_key = $6 AND token = $7`,
		lockstep.IdemDone, status, string(h), body, owner, key, token)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return lockstep.Errorf(lockstep.EINPROGRESS, "idempotency key %q is no longer held by this request", key)
	}
	return nil
}

// ReleaseIdem deletes a held claim (nothing committed under it).
func (s *DB) ReleaseIdem(ctx context.Context, owner, key, token string) (err error) {
	ctx, span := s.start(ctx, "ReleaseIdem")
	defer func() { err = end(span, err) }()
	_, err = s.db.ExecContext(ctx, `DELETE FROM idempotency_keys WHERE owner_key_id = $1 AND idem_key = $2 AND token = $3 AND state = $4`,
		owner, key, token, lockstep.IdemRunning)
	return err
}

// CountIdemReplay counts a replay on the record and its log entries.
func (s *DB) CountIdemReplay(ctx context.Context, owner, key string) (err error) {
	ctx, span := s.start(ctx, "CountIdemReplay")
	defer func() { err = end(span, err) }()
	return s.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `UPDATE idempotency_keys SET replays = replays + 1 WHERE owner_key_id = $1 AND idem_key = $2`, owner, key); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, qIdemOpsReplay, owner, key)
		return err
	})
}

// PurgeIdem deletes expired records.
func (s *DB) PurgeIdem(ctx context.Context, t time.Time) (n int64, err error) {
	ctx, span := s.start(ctx, "PurgeIdem")
	defer func() { err = end(span, err) }()
	res, err := s.db.ExecContext(ctx, `DELETE FROM idempotency_keys WHERE expires_at < $1 AND NOT (state = $2 AND lease_until >= $1)`, micros(t), lockstep.IdemRunning)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// OpsByIdemKey returns the entries committed under a key, oldest first.
func (s *DB) OpsByIdemKey(ctx context.Context, owner, key string) (out []*lockstep.OpEntry, err error) {
	ctx, span := s.start(ctx, "OpsByIdemKey")
	defer func() { err = end(span, err) }()
	rows, err := s.db.QueryContext(ctx, qIdemOps, owner, key)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		e, _, err := scanOp(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// commitIdem runs inside the transaction that appends e: it tags e with the
// request's Idempotency-Key and marks the claimed record committed with the
// answer e carries (OpEntry.Answer). A claim taken over by another request fails the
// transaction, so one key never commits two executions.
func (s *DB) commitIdem(ctx context.Context, e *lockstep.OpEntry) {
	c := lockstep.IdemClaimFrom(ctx)
	if c == nil || e.KeyID != c.Owner {
		return
	}
	e.IdempotencyKey = c.Key
}

// commitIdemRecord is commitIdem's second half, after e has its id.
func (s *DB) commitIdemRecord(ctx context.Context, tx *sql.Tx, e *lockstep.OpEntry) error {
	c := lockstep.IdemClaimFrom(ctx)
	if c == nil || e.IdempotencyKey == "" {
		return nil
	}
	if c.Deferred != nil {
		return s.insertIdemAtCommit(ctx, tx, c, e)
	}
	var res sql.Result
	var err error
	ic, ok := c.Answer(e.Answer)
	if ok {
		h, _ := json.Marshal(ic.Header)
		body := ic.Body
		if body == nil {
			body = []byte{}
		}
		res, err = tx.ExecContext(ctx, `UPDATE idempotency_keys SET state = $1, op_id = CASE WHEN op_id = '' THEN $2 ELSE op_id END, status = $3, header = $4, body = $5
			WHERE owner_key_id = $6 AND idem_key = $7 AND token = $8`,
			lockstep.IdemCommitted, e.ID, ic.Status, string(h), body, c.Owner, c.Key, c.Token)
	} else {
		// The entry carries no answer (a later step of the operation):
		// the record keeps the one an earlier commit stored.
		ic = lockstep.IdemCommit{}
		res, err = tx.ExecContext(ctx, `UPDATE idempotency_keys SET state = $1, op_id = CASE WHEN op_id = '' THEN $2 ELSE op_id END
			WHERE owner_key_id = $3 AND idem_key = $4 AND token = $5`,
			lockstep.IdemCommitted, e.ID, c.Owner, c.Key, c.Token)
	}
	if err != nil {
		return fmt.Errorf("record idempotency key: %w", err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		c.MarkLost()
		return lockstep.Errorf(lockstep.EINPROGRESS, "idempotency key %q was taken over by another request: this one did not commit", c.Key)
	}
	ic.State = lockstep.IdemCommitted
	c.NoteCommit(ic)
	return nil
}

const idemUpsertSQL = `INSERT INTO idempotency_keys (owner_key_id, idem_key, fingerprint, method, path, state, token, lease_until, op_id, status, header, body, created_at, expires_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
		ON CONFLICT (owner_key_id, idem_key) DO UPDATE SET
			fingerprint = excluded.fingerprint, method = excluded.method, path = excluded.path, state = excluded.state,
			token = excluded.token, lease_until = excluded.lease_until,
			op_id = CASE WHEN idempotency_keys.token = excluded.token AND idempotency_keys.op_id <> '' THEN idempotency_keys.op_id ELSE excluded.op_id END,
			status = excluded.status, header = excluded.header, body = excluded.body,
			replays = CASE WHEN idempotency_keys.token = excluded.token THEN idempotency_keys.replays ELSE 0 END,
			created_at = CASE WHEN idempotency_keys.token = excluded.token THEN idempotency_keys.created_at ELSE excluded.created_at END,
			expires_at = excluded.expires_at
		WHERE idempotency_keys.token = excluded.token
			OR (idempotency_keys.expires_at < $15 AND NOT (idempotency_keys.state = $16 AND idempotency_keys.lease_until >= $15))`

// insertIdemAtCommit claims a deferred key inside the effect's own
// transaction: one upsert that inserts the record (done with the carried
// answer when that is a success, else committed), updates it when this
// request already holds it (a second commit), replaces an expired record,
// and changes nothing when another request holds the key. In that last
// case the transaction fails and the claim is marked lost. Appenders are
// serialized (the oplog head row is locked first; SQLite has one writer),
// so a duplicate racing on another replica finds the first one's record
// committed here and never commits a second effect.
func (s *DB) insertIdemAtCommit(ctx context.Context, tx *sql.Tx, c *lockstep.IdemClaim, e *lockstep.OpEntry) error {
	ic, ok := c.Answer(e.Answer)
	if !ok && len(c.Commits()) > 0 {
		// A later entry of the same request that carries no answer: the
		// record is ours already and keeps the answer stored with it. (If
		// it is not there after all, the commit noted rolled back: the
		// upsert below decides as for a first commit.)
		res, err := tx.ExecContext(ctx, `UPDATE idempotency_keys SET op_id = CASE WHEN op_id = '' THEN $1 ELSE op_id END
			WHERE owner_key_id = $2 AND idem_key = $3 AND token = $4`, e.ID, c.Owner, c.Key, c.Token)
		if err != nil {
			return fmt.Errorf("record idempotency key: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 1 {
			return nil
		}
	}
	args, ic := s.idemUpsertArgs(c, e, ic, ok)
	// Never prepare here: preparing takes a second pooled connection
	// while tx holds one (and, on SQLite, the write lock), so a pool
	// full of requests waiting for that lock deadlocked the first keyed
	// commit after a start until the busy timeout. Open prepares them;
	// if that failed, the statement runs unprepared on tx.
	var res sql.Result
	var err error
	if st := s.idemStmtsReady(); st != nil {
		res, err = tx.StmtContext(ctx, st.upsert).ExecContext(ctx, args...)
	} else {
		res, err = tx.ExecContext(ctx, idemUpsertSQL, args...)
	}
	if err != nil {
		return fmt.Errorf("record idempotency key: %w", err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		c.MarkLost()
		return lockstep.Errorf(lockstep.EINPROGRESS, "idempotency key %q is held by another request: this one did not commit", c.Key)
	}
	c.NoteCommit(ic)
	return nil
}

// idemUpsertArgs returns the arguments of idemUpsertSQL that claim the
// deferred key of c at e's commit, with the commit noted when it
// succeeds. ic, ok: the answer e carries (IdemClaim.Answer).
func (s *DB) idemUpsertArgs(c *lockstep.IdemClaim, e *lockstep.OpEntry, ic lockstep.IdemCommit, ok bool) ([]any, lockstep.IdemCommit) {
	d := c.Deferred
	now := s.now()
	if d.CreatedAt.IsZero() {
		d.CreatedAt = lockstep.TruncateTime(now)
	}
	switch {
	case !ok:
		ic = lockstep.IdemCommit{State: lockstep.IdemCommitted}
	case ic.Refusal():
		ic.State = lockstep.IdemCommitted // a forced push may follow it with a success
	default:
		ic.State = lockstep.IdemDone
	}
	h := "{}"
	if len(ic.Header) > 0 {
		b, _ := json.Marshal(ic.Header)
		h = string(b)
	}
	body := ic.Body
	if body == nil {
		body = []byte{}
	}
	return []any{d.Owner, d.Key, d.Fingerprint, d.Method, d.Path, ic.State, c.Token, micros(d.LeaseUntil), e.ID, ic.Status, h, body,
		micros(d.CreatedAt), micros(d.ExpiresAt), micros(now), lockstep.IdemRunning}, ic
}
