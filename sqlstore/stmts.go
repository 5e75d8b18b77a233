package sqlstore

import (
	"context"
	"database/sql"
)

// The hot statements (every operations-log append, the reads every request
// makes) are prepared once per connection on SQLite: the modernc driver
// parses each statement it runs, which was about half of a read-only
// operation's store time (the oplog entry of a preflight). pgx caches its
// statements itself, so on PostgreSQL these run as before.

// Hot statements, prepared at Open on SQLite (prepareHot). Preparing
// later would take a second connection from the pool inside a
// transaction: with every connection in a transaction that waits for the
// write lock, that deadlocks.
const (
	qOplogHead   = `SELECT seq, hash FROM oplog_head WHERE id = 1`
	qOplogInsert = `INSERT INTO oplog (seq, id, time, key_id, key_name, op, result, read_only, repo, refs,
		objects, bytes, duration_us, trace_id, follows, details, prev_hash, hash, idem_key)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19)`
	qOplogMoveHead = `UPDATE oplog_head SET seq = $1, hash = $2 WHERE id = 1`
	qKeyByPrefix   = `SELECT ` + keyCols + ` FROM keys WHERE prefix = $1`
	qRepoByName    = `SELECT ` + repoCols + ` FROM repos WHERE name = $1`
	qRef           = `SELECT name, oid, updated_at FROM refs WHERE repo_id = $1 AND name = $2`
	qRepoRef       = `SELECT r.id, r.name, r.network, r.fork_of, r.default_branch, r.status, r.owner_key_id, r.owner_name, r.base_commit, r.task,
		r.created_at, r.updated_at, f.oid, f.updated_at FROM repos r LEFT JOIN refs f ON f.repo_id = r.id AND f.name = $2 WHERE r.name = $1`
)

// prepareHot prepares the hot statements (SQLite only). A statement that
// fails to prepare runs unprepared, as before.
func (s *DB) prepareHot(ctx context.Context) {
	if s.dialect != "sqlite" {
		return
	}
	for _, q := range []string{qOplogHead, qOplogInsert, qOplogMoveHead, qKeyByPrefix, qRepoByName, qRef, qForkRepo, qForkRefs, qRepoRef} {
		if st, err := s.db.PrepareContext(ctx, q); err == nil {
			s.stmts.Store(q, st)
		}
	}
}

// prepared returns the statement of q prepared by prepareHot, or nil
// (PostgreSQL, or q is not one of them): the callers then run q
// unprepared.
func (s *DB) prepared(q string) *sql.Stmt {
	if st, ok := s.stmts.Load(q); ok {
		return st.(*sql.Stmt)
	}
	return nil
}

// txExec runs q in tx, prepared when it can be.
func (s *DB) txExec(ctx context.Context, tx *sql.Tx, q string, args ...any) (sql.Result, error) {
	if st := s.prepared(q); st != nil {
		return tx.StmtContext(ctx, st).ExecContext(ctx, args...)
	}
	return tx.ExecContext(ctx, q, args...)
}

// txQueryRow runs q in tx, prepared when it can be.
func (s *DB) txQueryRow(ctx context.Context, tx *sql.Tx, q string, args ...any) *sql.Row {
	if st := s.prepared(q); st != nil {
		return tx.StmtContext(ctx, st).QueryRowContext(ctx, args...)
	}
	return tx.QueryRowContext(ctx, q, args...)
}

// txQuery runs q in tx, prepared when it can be.
func (s *DB) txQuery(ctx context.Context, tx *sql.Tx, q string, args ...any) (*sql.Rows, error) {
	if st := s.prepared(q); st != nil {
		return tx.StmtContext(ctx, st).QueryContext(ctx, args...)
	}
	return tx.QueryContext(ctx, q, args...)
}

// queryRow runs q outside a transaction, prepared when it can be. Its
// statements are the hot single-row lookups by a unique key: on SQLite
// they run without ctx's cancellation (see unwaited).
func (s *DB) queryRow(ctx context.Context, q string, args ...any) *sql.Row {
	if st := s.prepared(q); st != nil {
		return st.QueryRowContext(s.unwaited(ctx), args...)
	}
	return s.db.QueryRowContext(ctx, q, args...)
}

// closeStmts closes the prepared statements (Close).
func (s *DB) closeStmts() {
	s.stmts.Range(func(k, v any) bool {
		v.(*sql.Stmt).Close()
		s.stmts.Delete(k)
		return true
	})
}

// unwaited is ctx, without its cancellation, for SQLite statements that
// cannot wait: a lookup by a unique key outside a transaction (a WAL
// reader takes no lock another connection holds), or a statement of a
// transaction that already holds the write lock (_txlock=immediate: the
// BEGIN waited, with ctx). Such a statement runs in microseconds, and a
// cancellable context costs each one a watcher goroutine in the driver
// (modernc's interruptOnDone) and, for a query, one in database/sql: most
// of the goroutines a keyed preflight started. A ctx already done still
// fails the statement as before; one ended meanwhile still rolls back the
// transaction at its commit (database/sql watches the BEGIN's ctx). Its
// values (span, idempotency claim) are kept. PostgreSQL: ctx unchanged
// (a row lock can wait there).
func (s *DB) unwaited(ctx context.Context) context.Context {
	if s.dialect != "sqlite" || ctx.Done() == nil || ctx.Err() != nil {
		return ctx
	}
	return context.WithoutCancel(ctx)
}
