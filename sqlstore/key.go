package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/lockstep-hq/lockstep"
)

const keyCols = `id, name, role, prefix, hash, created_at, revoked_at, last_used_at, expires_at, parent_key_id, scope_workspace, scope_base, scope_task, scope_owner, quota_workspaces, quota_storage_bytes, quota_runs`

func scanKey(row interface{ Scan(...any) error }) (*lockstep.Key, error) {
	var k lockstep.Key
	var created int64
	var revoked, used, expires, quota, qbytes, qruns sql.NullInt64
	var parent, sw, sb, st, so sql.NullString
	if err := row.Scan(&k.ID, &k.Name, &k.Role, &k.Prefix, &k.Hash, &created, &revoked, &used,
		&expires, &parent, &sw, &sb, &st, &so, &quota, &qbytes, &qruns); err != nil {
		return nil, err
	}
	k.CreatedAt = fromMicros(created)
	k.RevokedAt = fromNullMicros(revoked)
	k.LastUsedAt = fromNullMicros(used)
	k.ExpiresAt = fromNullMicros(expires)
	k.ParentKeyID = parent.String
	if sw.String != "" || sb.String != "" {
		k.Scope = &lockstep.KeyScope{Workspace: sw.String, Base: sb.String, Task: st.String, Owner: so.String}
	}
	if quota.Valid {
		q := int(quota.Int64)
		k.QuotaWorkspaces = &q
	}
	if qbytes.Valid {
		b := qbytes.Int64
		k.QuotaStorageBytes = &b
	}
	if qruns.Valid {
		r := int(qruns.Int64)
		k.QuotaRuns = &r
	}
	return &k, nil
}

func nullStr(s string) sql.NullString { return sql.NullString{String: s, Valid: s != ""} }

func nullMicros(t *time.Time) sql.NullInt64 {
	if t == nil {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: micros(*t), Valid: true}
}

// CreateKey inserts k and appends entry in one transaction.
func (s *DB) CreateKey(ctx context.Context, k *lockstep.Key, entry *lockstep.OpEntry) (err error) {
	ctx, span := s.start(ctx, "CreateKey")
	defer func() { err = end(span, err) }()
	return s.inTx(ctx, func(tx *sql.Tx) error {
		if k.ParentKeyID != "" {
			// A revoked (or revoking) parent mints nothing: checked in the
			// insert's transaction, so the cascade never misses a child.
			var revoked sql.NullInt64
			err := tx.QueryRowContext(ctx, `SELECT revoked_at FROM keys WHERE id = $1`+s.forUpdate(), k.ParentKeyID).Scan(&revoked)
			if errors.Is(err, sql.ErrNoRows) || (err == nil && revoked.Valid) {
				return lockstep.Errorf(lockstep.EUNAUTH, "parent key %s is revoked or unknown", k.ParentKeyID)
			}
			if err != nil {
				return fmt.Errorf("read parent key: %w", err)
			}
		}
		var sw, sb, st, so string
		if k.Scope != nil {
			sw, sb, st, so = k.Scope.Workspace, k.Scope.Base, k.Scope.Task, k.Scope.Owner
		}
		var quota sql.NullInt64
		if k.QuotaWorkspaces != nil {
			quota = sql.NullInt64{Int64: int64(*k.QuotaWorkspaces), Valid: true}
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO keys (id, name, role, prefix, hash, created_at, expires_at, parent_key_id, scope_workspace, scope_base, scope_task, scope_owner, quota_workspaces)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)`,
			k.ID, k.Name, k.Role, k.Prefix, k.Hash, micros(k.CreatedAt), nullMicros(k.ExpiresAt), nullStr(k.ParentKeyID),
			nullStr(sw), nullStr(sb), nullStr(st), nullStr(so), quota)
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
	k, err = scanKey(s.queryRow(ctx, qKeyByPrefix, prefix))
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

// RevokeKey marks a key and every key it minted (transitively) revoked
// and appends entry, whose details name the descendants revoked with it
// ("children").
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
		rows, err := tx.QueryContext(ctx, `WITH RECURSIVE d(id) AS (
				SELECT id FROM keys WHERE parent_key_id = $1
				UNION SELECT k.id FROM keys k JOIN d ON k.parent_key_id = d.id)
			SELECT id FROM d ORDER BY id`, id)
		if err != nil {
			return fmt.Errorf("find minted keys: %w", err)
		}
		var children []string
		for rows.Next() {
			var c string
			if err := rows.Scan(&c); err != nil {
				rows.Close()
				return err
			}
			children = append(children, c)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, c := range children {
			if _, err := tx.ExecContext(ctx, `UPDATE keys SET revoked_at = COALESCE(revoked_at, $1) WHERE id = $2`, micros(at), c); err != nil {
				return fmt.Errorf("revoke minted key: %w", err)
			}
		}
		if entry != nil && len(children) > 0 {
			d := map[string]any{}
			for k, v := range entry.Details {
				d[k] = v
			}
			d["children"] = children
			entry.Details = d
		}
		return s.appendOp(ctx, tx, entry)
	})
}

// SetKeyQuota sets (nil: clears) a key's workspace, storage and runs quotas and
// appends entry. Returns not_found for an unknown key.
func (s *DB) SetKeyQuota(ctx context.Context, id string, q lockstep.KeyQuota, entry *lockstep.OpEntry) (err error) {
	ctx, span := s.start(ctx, "SetKeyQuota")
	defer func() { err = end(span, err) }()
	return s.inTx(ctx, func(tx *sql.Tx) error {
		var ws, bytes, runs sql.NullInt64
		if q.Workspaces != nil {
			ws = sql.NullInt64{Int64: int64(*q.Workspaces), Valid: true}
		}
		if q.StorageBytes != nil {
			bytes = sql.NullInt64{Int64: *q.StorageBytes, Valid: true}
		}
		if q.Runs != nil {
			runs = sql.NullInt64{Int64: int64(*q.Runs), Valid: true}
		}
		res, err := tx.ExecContext(ctx, `UPDATE keys SET quota_workspaces = $1, quota_storage_bytes = $2, quota_runs = $3 WHERE id = $4`, ws, bytes, runs, id)
		if err != nil {
			return fmt.Errorf("set key quota: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return lockstep.Errorf(lockstep.ENOTFOUND, "key %s not found", id)
		}
		return s.appendOp(ctx, tx, entry)
	})
}

// KeyParent returns the id of the key that minted id ("" for none or an
// unknown key). Parents never change, so answers are cached.
func (s *DB) keyParent(ctx context.Context, tx *sql.Tx, id string) (string, error) {
	if v, ok := s.parents.Load(id); ok {
		return v.(string), nil
	}
	var p sql.NullString
	err := tx.QueryRowContext(ctx, `SELECT parent_key_id FROM keys WHERE id = $1`, id).Scan(&p)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	s.parents.Store(id, p.String)
	return p.String, nil
}

// CountOwnedWorkspaces counts the active workspaces a key owns.
func (s *DB) CountOwnedWorkspaces(ctx context.Context, keyID string) (n int, err error) {
	ctx, span := s.start(ctx, "CountOwnedWorkspaces")
	defer func() { err = end(span, err) }()
	err = s.db.QueryRowContext(ctx, qCountOwned, keyID).Scan(&n)
	return n, err
}

// KeyStorageBytes sums the oplog bytes of the successful entries of the
// active workspaces keyID owns (by the index oplog_repo).
func (s *DB) KeyStorageBytes(ctx context.Context, keyID string) (n int64, err error) {
	ctx, span := s.start(ctx, "KeyStorageBytes")
	defer func() { err = end(span, err) }()
	// IN (subquery) rather than a join: SQLite then walks oplog_repo per
	// workspace instead of scanning the whole log (16 ms → see
	// BenchmarkQuotaCheck in docs/benchmarks.md).
	err = s.db.QueryRowContext(ctx, `SELECT COALESCE(SUM(bytes), 0) FROM oplog WHERE result = 'ok' AND repo IN
		(SELECT name FROM repos WHERE owner_key_id = $1 AND fork_of <> '' AND status = 'active')`, keyID).Scan(&n)
	return n, err
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

func (s *DB) forUpdate() string {
	if s.dialect == "postgres" {
		return " FOR UPDATE"
	}
	return ""
}

// PurgeRepo deletes a non-active workspace's refs and checkpoint records
// and appends entry (issue 28: DELETE /repos/{ws}?purge=true).
func (s *DB) PurgeRepo(ctx context.Context, repoID int64, entry *lockstep.OpEntry) (refs []lockstep.Ref, err error) {
	ctx, span := s.start(ctx, "PurgeRepo")
	defer func() { err = end(span, err) }()
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		refs = nil
		var name, status string
		err := tx.QueryRowContext(ctx, `SELECT name, status FROM repos WHERE id = $1`+s.forUpdate(), repoID).Scan(&name, &status)
		if errors.Is(err, sql.ErrNoRows) {
			return lockstep.Errorf(lockstep.ENOTFOUND, "repository %d not found", repoID)
		}
		if err != nil {
			return err
		}
		if lockstep.Status(status) == lockstep.StatusActive {
			return lockstep.Errorf(lockstep.EINVALID, "workspace %s is active: abandon it before deleting its refs", name)
		}
		rows, err := tx.QueryContext(ctx, `SELECT name, oid FROM refs WHERE repo_id = $1 ORDER BY name`, repoID)
		if err != nil {
			return err
		}
		for rows.Next() {
			var r lockstep.Ref
			if err := rows.Scan(&r.Name, &r.OID); err != nil {
				rows.Close()
				return err
			}
			refs = append(refs, r)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM refs WHERE repo_id = $1`, repoID); err != nil {
			return fmt.Errorf("delete refs: %w", err)
		}
		res, err := tx.ExecContext(ctx, `DELETE FROM checkpoints WHERE repo_id = $1`, repoID)
		if err != nil {
			return fmt.Errorf("delete checkpoints: %w", err)
		}
		if entry != nil {
			n, _ := res.RowsAffected()
			for _, r := range refs {
				entry.Refs = append(entry.Refs, lockstep.RefMove{Repo: name, Ref: r.Name, Old: r.OID, New: lockstep.ZeroOID})
			}
			d := map[string]any{}
			for k, v := range entry.Details {
				d[k] = v
			}
			d["checkpoints"] = n
			entry.Details = d
		}
		return s.appendOp(ctx, tx, entry)
	})
	return refs, err
}
