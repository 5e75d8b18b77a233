package sqlstore

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/lockstep-hq/lockstep"
)

// NewOpID returns a random operation id.
func NewOpID() string {
	var b [12]byte
	rand.Read(b[:])
	return "op_" + hex.EncodeToString(b[:])
}

// AppendOp appends e to the chain in its own transaction.
func (s *DB) AppendOp(ctx context.Context, e *lockstep.OpEntry) (err error) {
	ctx, span := s.start(ctx, "AppendOp")
	defer func() { err = end(span, err) }()
	// The transaction holds the write lock from its BEGIN on: the
	// statements of the append cannot wait (unwaited).
	return s.inTx(ctx, func(tx *sql.Tx) error { return s.appendOp(s.unwaited(ctx), tx, e) })
}

// appendOp links e to the chain head inside tx. Locking the head row makes
// concurrent appenders queue, so the chain stays linear.
func (s *DB) appendOp(ctx context.Context, tx *sql.Tx, e *lockstep.OpEntry) error {
	if e == nil {
		return nil
	}
	lock := ""
	if s.dialect == "postgres" {
		lock = " FOR UPDATE"
	}
	var seq int64
	var prev string
	if err := s.txQueryRow(ctx, tx, qOplogHead+lock).Scan(&seq, &prev); err != nil {
		return fmt.Errorf("read oplog head: %w", err)
	}
	s.stampEntry(ctx, e)
	// A minted key's operations name the key that minted it too (issue
	// 28): in the details, so part of the hash like any detail.
	if strings.HasPrefix(e.KeyID, "key_") {
		parent, err := s.keyParent(ctx, tx, e.KeyID)
		if err != nil {
			return fmt.Errorf("read key parent: %w", err)
		}
		withParent(e, parent)
	}
	args := linkEntry(e, seq, prev)
	if s.dialect == "postgres" {
		// One statement for the insert, the head move and the key's
		// record (pgfast.go) where it can.
		if done, err := s.pgAppend(ctx, tx, e, args); done {
			if err != nil {
				return err
			}
			s.hooks.add(tx, e)
			return nil
		}
	}
	if _, err := s.txExec(ctx, tx, qOplogInsert, args...); err != nil {
		return fmt.Errorf("insert oplog entry: %w", err)
	}
	if _, err := s.txExec(ctx, tx, qOplogMoveHead, e.Seq, e.Hash); err != nil {
		return fmt.Errorf("move oplog head: %w", err)
	}
	if err := s.commitIdemRecord(ctx, tx, e); err != nil {
		return err
	}
	s.hooks.add(tx, e)
	return nil
}

// stampEntry fills e's id, time and result and tags it with the
// request's Idempotency-Key (after the head is read: times follow seq).
func (s *DB) stampEntry(ctx context.Context, e *lockstep.OpEntry) {
	if e.ID == "" {
		e.ID = NewOpID()
	}
	if e.Time.IsZero() {
		e.Time = s.now()
	}
	if e.Result == "" {
		e.Result = "ok"
	}
	e.Time = lockstep.TruncateTime(e.Time)
	s.commitIdem(ctx, e)
}

// withParent names the key that minted e's key in e's details.
func withParent(e *lockstep.OpEntry, parent string) {
	if _, set := e.Details["parent_key_id"]; parent != "" && !set {
		d := make(map[string]any, len(e.Details)+1)
		for k, v := range e.Details {
			d[k] = v
		}
		d["parent_key_id"] = parent
		e.Details = d
	}
}

// linkEntry links e after the head (seq, prev), hashes it and returns
// the arguments of qOplogInsert.
func linkEntry(e *lockstep.OpEntry, seq int64, prev string) []any {
	e.Seq = seq + 1
	e.PrevHash = prev
	details := lockstep.CanonicalDetails(e.Details)
	e.Hash = lockstep.EntryHash(e, details)
	refs, _ := json.Marshal(nonNilRefs(e.Refs))
	return []any{e.Seq, e.ID, micros(e.Time), e.KeyID, e.KeyName, e.Op, e.Result, e.ReadOnly, e.Repo, string(refs),
		e.Objects, e.Bytes, e.DurationUS, e.TraceID, e.Follows, string(details), e.PrevHash, e.Hash, e.IdempotencyKey}
}

func nonNilRefs(r []lockstep.RefMove) []lockstep.RefMove {
	if r == nil {
		return []lockstep.RefMove{}
	}
	return r
}

const opCols = `seq, id, time, key_id, key_name, op, result, read_only, repo, refs, objects, bytes, duration_us, trace_id, follows, details, prev_hash, hash, idem_key, replays`

func scanOp(row interface{ Scan(...any) error }) (*lockstep.OpEntry, json.RawMessage, error) {
	var e lockstep.OpEntry
	var t int64
	var refs, details string
	if err := row.Scan(&e.Seq, &e.ID, &t, &e.KeyID, &e.KeyName, &e.Op, &e.Result, &e.ReadOnly, &e.Repo, &refs,
		&e.Objects, &e.Bytes, &e.DurationUS, &e.TraceID, &e.Follows, &details, &e.PrevHash, &e.Hash, &e.IdempotencyKey, &e.Replays); err != nil {
		return nil, nil, err
	}
	e.Time = fromMicros(t)
	if err := json.Unmarshal([]byte(refs), &e.Refs); err != nil {
		return nil, nil, fmt.Errorf("entry %d: refs: %w", e.Seq, err)
	}
	if len(e.Refs) == 0 {
		e.Refs = nil
	}
	raw := json.RawMessage(details)
	if details != "{}" {
		_ = json.Unmarshal(raw, &e.Details)
	}
	return &e, raw, nil
}

// ListOps returns entries matching f, oldest first (newest first with
// f.Newest).
func (s *DB) ListOps(ctx context.Context, f lockstep.OpFilter) (out []*lockstep.OpEntry, err error) {
	ctx, span := s.start(ctx, "ListOps")
	defer func() { err = end(span, err) }()
	var where []string
	var args []any
	add := func(cond string, v any) {
		args = append(args, v)
		where = append(where, fmt.Sprintf(cond, len(args)))
	}
	order := "seq"
	switch {
	case !f.Newest:
		add("seq > $%d", f.After)
	case f.After > 0:
		add("seq < $%d", f.After)
		order = "seq DESC"
	default:
		order = "seq DESC"
		where = append(where, "1 = 1")
	}
	if f.Repo != "" {
		add("repo = $%d", f.Repo)
	}
	if f.Repos != nil {
		if len(f.Repos) == 0 {
			return nil, nil
		}
		in := make([]string, len(f.Repos))
		for i, r := range f.Repos {
			args = append(args, r)
			in[i] = fmt.Sprintf("$%d", len(args))
		}
		where = append(where, "repo IN ("+strings.Join(in, ", ")+")")
	}
	if f.KeyID != "" {
		add("key_id = $%d", f.KeyID)
	}
	if f.Op != "" {
		add("op = $%d", f.Op)
	}
	limit := f.Limit
	if limit <= 0 || limit > 1000 {
		limit = 100
	}
	args = append(args, limit)
	q := fmt.Sprintf(`SELECT %s FROM oplog WHERE %s ORDER BY %s LIMIT $%d`, opCols, strings.Join(where, " AND "), order, len(args))
	rows, err := s.db.QueryContext(ctx, q, args...)
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

// VerifyOps walks the whole chain in order, recomputing every hash from the
// stored columns and checking every link and the head row.
func (s *DB) VerifyOps(ctx context.Context) (res lockstep.VerifyResult, err error) {
	ctx, span := s.start(ctx, "VerifyOps")
	defer func() { err = end(span, err) }()
	rows, err := s.db.QueryContext(ctx, `SELECT `+opCols+` FROM oplog ORDER BY seq`)
	if err != nil {
		return res, err
	}
	defer rows.Close()
	prev := ""
	var want int64 = 1
	bad := func(seq int64, why string) {
		if res.FirstBad == nil {
			s := seq
			res.FirstBad = &s
			res.Reason = why
		}
	}
	for rows.Next() {
		e, raw, err := scanOp(rows)
		if err != nil {
			return res, err
		}
		res.Entries++
		if res.FirstBad != nil {
			continue
		}
		switch {
		case e.Seq != want:
			bad(want, fmt.Sprintf("entry %d is missing", want))
		case e.PrevHash != prev:
			bad(e.Seq, "prev_hash does not match the previous entry's hash")
		case lockstep.EntryHash(e, raw) != e.Hash:
			bad(e.Seq, "stored fields do not match the entry's hash")
		}
		prev = e.Hash
		want = e.Seq + 1
	}
	if err := rows.Err(); err != nil {
		return res, err
	}
	if res.FirstBad == nil {
		var seq int64
		var hash string
		if err := s.db.QueryRowContext(ctx, `SELECT seq, hash FROM oplog_head WHERE id = 1`).Scan(&seq, &hash); err != nil {
			return res, err
		}
		if seq != want-1 || hash != prev {
			bad(want, "the chain head does not match the last entry (entries removed from the end?)")
		}
	}
	res.OK = res.FirstBad == nil
	return res, nil
}
