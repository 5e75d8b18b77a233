package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/lockstep-hq/lockstep"
)

const keyCols = `id, name, role, prefix, hash, created_at, revoked_at, last_used_at`

func scanKey(row interface{ Scan(...any) error }) (*lockstep.Key, error) {
	var k lockstep.Key
	var created int64
	var revoked, used sql.NullInt64
	if err := row.Scan(&k.ID, &k.Name, &k.Role, &k.Prefix, &k.Hash, &created, &revoked, &used); err != nil {
		return nil, err
	}
	k.CreatedAt = fromMicros(created)
	k.RevokedAt = fromNullMicros(revoked)
	k.LastUsedAt = fromNullMicros(used)
	return &k, nil
}

// CreateKey inserts k and appends entry in one transaction.
func (s *DB) CreateKey(ctx context.Context, k *lockstep.Key, entry *lockstep.OpEntry) (err error) {
	ctx, span := s.start(ctx, "CreateKey")
	defer func() { err = end(span, err) }()
	return s.inTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO keys (id, name, role, prefix, hash, created_at) VALUES ($1, $2, $3, $4, $5, $6)`,
			k.ID, k.Name, k.Role, k.Prefix, k.Hash, micros(k.CreatedAt))
		if isUnique(err) {
			return because(err, lockstep.ECONFLICT, "key prefix %s already exists", k.Prefix)
		}
		if err != nil {
			return fmt.Errorf("insert key: %w", err)
		}
		return s.appendOp(ctx, tx, entry)
	})
}

// KeyByPrefix finds a key by its visible prefix.
func (s *DB) KeyByPrefix(ctx context.Context, prefix string) (k *lockstep.Key, err error) {
	ctx, span := s.start(ctx, "KeyByPrefix")
	defer func() { err = end(span, err) }()
	k, err = scanKey(s.db.QueryRowContext(ctx, `SELECT `+keyCols+` FROM keys WHERE prefix = $1`, prefix))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, because(err, lockstep.ENOTFOUND, "key not found")
	}
	return k, err
}

// ListKeys returns every key, oldest first.
func (s *DB) ListKeys(ctx context.Context) (keys []*lockstep.Key, err error) {
	ctx, span := s.start(ctx, "ListKeys")
	defer func() { err = end(span, err) }()
	rows, err := s.db.QueryContext(ctx, `SELECT `+keyCols+` FROM keys ORDER BY created_at, id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		k, err := scanKey(rows)
		if err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	return keys, rows.Err()
}

// RevokeKey marks a key revoked and appends entry.
func (s *DB) RevokeKey(ctx context.Context, id string, at time.Time, entry *lockstep.OpEntry) (err error) {
	ctx, span := s.start(ctx, "RevokeKey")
	defer func() { err = end(span, err) }()
	return s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE keys SET revoked_at = COALESCE(revoked_at, $1) WHERE id = $2`, micros(at), id)
		if err != nil {
			return fmt.Errorf("revoke key: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return lockstep.Errorf(lockstep.ENOTFOUND, "key %s not found", id)
		}
		return s.appendOp(ctx, tx, entry)
	})
}

// TouchKey records a key's last use.
func (s *DB) TouchKey(ctx context.Context, id string, at time.Time) (err error) {
	ctx, span := s.start(ctx, "TouchKey")
	defer func() { err = end(span, err) }()
	_, err = s.db.ExecContext(ctx, `UPDATE keys SET last_used_at = $1 WHERE id = $2`, micros(at), id)
	return err
}

// CountKeys counts keys that are not revoked.
func (s *DB) CountKeys(ctx context.Context) (n int, err error) {
	ctx, span := s.start(ctx, "CountKeys")
	defer func() { err = end(span, err) }()
	err = s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM keys WHERE revoked_at IS NULL`).Scan(&n)
	return n, err
}
