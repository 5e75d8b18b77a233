package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/lockstep-hq/lockstep"
)

var _ lockstep.RetentionStore = (*DB)(nil)

// SetRetention sets (or, for the zero policy, removes) repoID's retention
// policy and appends entry, in one transaction.
func (s *DB) SetRetention(ctx context.Context, repoID int64, p lockstep.RetentionPolicy, entry *lockstep.OpEntry) (err error) {
	ctx, span := s.start(ctx, "SetRetention")
	defer func() { err = end(span, err) }()
	return s.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM retention_policies WHERE repo_id = $1`, repoID); err != nil {
			return fmt.Errorf("set retention: %w", err)
		}
		if p.AbandonAfter > 0 || p.DeleteAfter > 0 || p.ArchiveFailed {
			archive := 0
			if p.ArchiveFailed {
				archive = 1
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO retention_policies (repo_id, abandon_after_s, delete_after_s, archive_failed, updated_at)
				VALUES ($1, $2, $3, $4, $5)`, repoID, int64(p.AbandonAfter/time.Second), int64(p.DeleteAfter/time.Second), archive, micros(s.now())); err != nil {
				return fmt.Errorf("set retention: %w", err)
			}
		}
		if entry == nil {
			return nil
		}
		return s.appendOp(ctx, tx, entry)
	})
}

// Retention returns repoID's policy (the zero policy when none is set).
func (s *DB) Retention(ctx context.Context, repoID int64) (p lockstep.RetentionPolicy, err error) {
	ctx, span := s.start(ctx, "Retention")
	defer func() { err = end(span, err) }()
	var ab, del, archive, at int64
	err = s.db.QueryRowContext(ctx, `SELECT abandon_after_s, delete_after_s, archive_failed, updated_at FROM retention_policies WHERE repo_id = $1`, repoID).
		Scan(&ab, &del, &archive, &at)
	if errors.Is(err, sql.ErrNoRows) {
		return p, nil
	}
	if err != nil {
		return p, fmt.Errorf("read retention: %w", err)
	}
	return policy(ab, del, archive, at), nil
}

// RetentionPolicies lists every set policy with its repository's name.
func (s *DB) RetentionPolicies(ctx context.Context) (out []lockstep.RepoRetention, err error) {
	ctx, span := s.start(ctx, "RetentionPolicies")
	defer func() { err = end(span, err) }()
	rows, err := s.db.QueryContext(ctx, `SELECT p.repo_id, r.name, p.abandon_after_s, p.delete_after_s, p.archive_failed, p.updated_at
		FROM retention_policies p JOIN repos r ON r.id = p.repo_id ORDER BY r.name`)
	if err != nil {
		return nil, fmt.Errorf("list retention policies: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var rr lockstep.RepoRetention
		var ab, del, archive, at int64
		if err := rows.Scan(&rr.RepoID, &rr.Repo, &ab, &del, &archive, &at); err != nil {
			return nil, err
		}
		rr.Policy = policy(ab, del, archive, at)
		out = append(out, rr)
	}
	return out, rows.Err()
}

func policy(ab, del, archive, at int64) lockstep.RetentionPolicy {
	return lockstep.RetentionPolicy{AbandonAfter: time.Duration(ab) * time.Second, DeleteAfter: time.Duration(del) * time.Second,
		ArchiveFailed: archive != 0, UpdatedAt: fromMicros(at)}
}
