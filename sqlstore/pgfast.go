package sqlstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/lockstep-hq/lockstep"
)

// PostgreSQL's round trips. Every statement on PostgreSQL is a round trip
// to the server, and a write transaction holds the operations-log head's
// row lock from its head read to its COMMIT, so each one also lengthens
// the queue of concurrent writers. Two ways to cut them, both keeping the
// transaction, its order of locks and the hash chain as they were:
//
//   - appendOp runs the log insert, the head move and (a one-transaction
//     route's) Idempotency-Key upsert as one statement (pgAppend);
//   - RegisterPack and RegisterInlinePack are one statement, the
//     generation bump and the record's insert stamped with it
//     (pgRegisterSQL);
//   - CreateRepo (fork, create) sends its transaction in two pipelined
//     batches on the pool's connection (createRepoPipelined): BEGIN, the
//     repository with its refs, the head read; then the append and
//     COMMIT. The entry's hash needs the head, so two is the least when
//     Go computes it; pgfork.go has the server compute it, and then the
//     whole transaction is one batch (one round trip).
//
// A claim lost to another request must fail the transaction before its
// COMMIT, which the pipeline has already sent: the append statement then
// divides by the number of key rows it wrote (zero), an error that skips
// the rest of the batch and leaves the transaction to roll back.

// shiftParams renumbers q's $n placeholders to $(n+by).
func shiftParams(q string, by int) string {
	return regexp.MustCompile(`\$(\d+)`).ReplaceAllStringFunc(q, func(m string) string {
		n, _ := strconv.Atoi(m[1:])
		return "$" + strconv.Itoa(n+by)
	})
}

const pgAppendHead = `WITH o AS (` + qOplogInsert + `),
	h AS (UPDATE oplog_head SET seq = $1, hash = $18 WHERE id = 1)`

var (
	// pgAppendSQL appends an entry that claims no key.
	pgAppendSQL = pgAppendHead + ` SELECT 1`
	// pgAppendIdemSQL appends an entry and upserts its deferred key
	// (idemUpsertSQL after the 19 arguments of the insert); no row
	// written (another request holds the key) is a division by zero.
	pgAppendIdemSQL = pgAppendHead + `,
	k AS (` + shiftParams(idemUpsertSQL, 19) + ` RETURNING 1)
	SELECT 1 / count(*)::int FROM k`
)

// errDivisionByZero is PostgreSQL's 22012, pgAppendIdemSQL's lost claim.
const errDivisionByZero = "22012"

// pgCovers reports whether pgAppendStmt covers the commit of e (before
// stampEntry: e's key is tagged from the same claim).
func pgCovers(ctx context.Context, e *lockstep.OpEntry) bool {
	c := lockstep.IdemClaimFrom(ctx)
	if e == nil || c == nil || e.KeyID != c.Owner {
		return true
	}
	if c.Deferred == nil {
		return false
	}
	_, answered := c.Answer(e.Answer)
	return answered || len(c.Commits()) == 0
}

// pgAppendStmt returns the one statement that appends e (args: those of
// qOplogInsert) with its key's record, and the function that interprets
// the statement's error; ok is false when e's commit is not one this
// statement covers (a held claim's update, a later entry of a request
// that carries no answer): appendOp then runs them one by one.
func (s *DB) pgAppendStmt(ctx context.Context, e *lockstep.OpEntry, args []any) (q string, qargs []any, finish func(error) error, ok bool) {
	iargs, finish, ok := s.pgIdemArgs(ctx, e)
	if !ok {
		return "", nil, nil, false
	}
	if iargs == nil {
		return pgAppendSQL, args, finish, true
	}
	qargs = append(append(make([]any, 0, len(args)+len(iargs)), args...), iargs...)
	return pgAppendIdemSQL, qargs, finish, true
}

// pgIdemArgs returns the arguments of idemUpsertSQL that record e's key
// in e's append statement (nil: e claims no key), and the function that
// interprets that statement's error (22012: the claim is lost); ok is
// false as for pgAppendStmt.
func (s *DB) pgIdemArgs(ctx context.Context, e *lockstep.OpEntry) (iargs []any, finish func(error) error, ok bool) {
	c := lockstep.IdemClaimFrom(ctx)
	if c == nil || e.IdempotencyKey == "" {
		return nil, func(err error) error {
			if err != nil {
				return fmt.Errorf("append oplog entry: %w", err)
			}
			return nil
		}, true
	}
	if c.Deferred == nil {
		return nil, nil, false
	}
	ic, answered := c.Answer(e.Answer)
	if !answered && len(c.Commits()) > 0 {
		return nil, nil, false
	}
	iargs, ic = s.idemUpsertArgs(c, e, ic, answered)
	return iargs, func(err error) error {
		var pg *pgconn.PgError
		switch {
		case errors.As(err, &pg) && pg.Code == errDivisionByZero:
			c.MarkLost()
			return lockstep.Errorf(lockstep.EINPROGRESS, "idempotency key %q is held by another request: this one did not commit", c.Key)
		case err != nil:
			return fmt.Errorf("append oplog entry: %w", err)
		}
		c.NoteCommit(ic)
		return nil
	}, true
}

// pgAppend runs pgAppendStmt in tx; done is false when it does not cover
// e's commit.
func (s *DB) pgAppend(ctx context.Context, tx *sql.Tx, e *lockstep.OpEntry, args []any) (done bool, err error) {
	q, qargs, finish, ok := s.pgAppendStmt(ctx, e, args)
	if !ok {
		return false, nil
	}
	var one int
	return true, finish(tx.QueryRowContext(ctx, q, qargs...).Scan(&one))
}

const pgInsertRepoSQL = `WITH r AS (INSERT INTO repos (name, network, fork_of, default_branch, status, owner_key_id, owner_name, base_commit, task, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) RETURNING id),
	f AS (INSERT INTO refs (repo_id, name, oid, updated_at)
		SELECT r.id, u.name, u.oid, $14 FROM r, unnest($12::text[], $13::text[]) AS u(name, oid))
	SELECT id FROM r`

// pgForkRepoSQL is qForkRepo and qForkRefs in one statement; it returns
// the new row's id and what it took from the base, with the refs copied
// ordered by name, or no row when there is no base.
const pgForkRepoSQL = `WITH b AS (SELECT id, name, network, default_branch FROM repos WHERE name = $1),
	r AS (INSERT INTO repos (name, network, fork_of, default_branch, status, owner_key_id, owner_name, base_commit, task, created_at, updated_at)
		SELECT $2, b.network, b.name, b.default_branch, $3, $4, $5,
			COALESCE((SELECT oid FROM refs WHERE repo_id = b.id AND name = 'refs/heads/' || b.default_branch), ''), $6, $7, $7
		FROM b RETURNING id, network, fork_of, default_branch, base_commit),
	f AS (INSERT INTO refs (repo_id, name, oid, updated_at)
		SELECT r.id, x.name, x.oid, $8 FROM r, b, refs x WHERE x.repo_id = b.id AND substr(x.name, 1, 11) = 'refs/heads/'
		RETURNING name, oid)
	SELECT r.id, r.network, r.fork_of, r.default_branch, r.base_commit,
		COALESCE((SELECT array_agg(name ORDER BY name) FROM f), '{}'), COALESCE((SELECT array_agg(oid ORDER BY name) FROM f), '{}')
	FROM r`

// pipelined runs fn on one of the pool's connections, which comes back to
// the pool outside any transaction, or is discarded.
func (s *DB) pipelined(ctx context.Context, fn func(pc *pgx.Conn) error) error {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	var out error
	err = conn.Raw(func(dc any) error {
		pc := dc.(*stdlib.Conn).Conn()
		out = fn(pc)
		if pc.IsClosed() {
			return driver.ErrBadConn
		}
		if pc.PgConn().TxStatus() != 'I' {
			// Failed half-way: roll back before the connection is reused.
			if _, err := pc.Exec(context.WithoutCancel(ctx), "rollback"); err != nil || pc.PgConn().TxStatus() != 'I' {
				return driver.ErrBadConn
			}
		}
		return nil
	})
	if out != nil {
		return out
	}
	return err
}

// createRepoPipelined is CreateRepo's transaction on PostgreSQL in two
// round trips (see above).
func (s *DB) createRepoPipelined(ctx context.Context, r *lockstep.Repo, refs []lockstep.Ref, entry *lockstep.OpEntry, now int64) error {
	return s.pipelined(ctx, func(pc *pgx.Conn) error { return s.createRepoOn(ctx, pc, r, refs, entry, now) })
}

// forkRepoPipelined is ForkRepo's transaction on PostgreSQL in two round
// trips: BEGIN, the fork (pgForkRepoSQL), the head read; then the append
// and COMMIT.
//
// A fork bounded by maxOwned (entry not nil) skips the one-trip form: its
// first batch also counts the owner's workspaces after the head's lock
// (overOwned), and it rolls back instead of appending when over.
func (s *DB) forkRepoPipelined(ctx context.Context, base string, ws *lockstep.Repo, maxOwned int, entry *lockstep.OpEntry, fill func([]lockstep.Ref), now int64) error {
	return s.pipelined(ctx, func(pc *pgx.Conn) error {
		parent, err := s.pgKeyParent(ctx, pc, entry)
		if err != nil {
			return err
		}
		if pb := s.pgBases.get(base); pb != nil && entry != nil && maxOwned <= 0 {
			if done, err := s.forkOneTrip(ctx, pc, base, ws, entry, fill, now, parent, pb); done {
				return err
			}
		}
		b := &pgx.Batch{}
		b.Queue("begin")
		b.Queue(pgForkRepoSQL, base, ws.Name, string(ws.Status), ws.OwnerKeyID, ws.OwnerName, ws.Task, micros(ws.CreatedAt), now)
		if entry == nil {
			b.Queue("commit")
		} else {
			b.Queue(qOplogHead + " FOR UPDATE")
			if maxOwned > 0 {
				b.Queue(qCountOwned, ws.OwnerKeyID)
			}
		}
		var names, oids []string
		br := pc.SendBatch(ctx, b)
		_, err = br.Exec()
		if err == nil {
			err = br.QueryRow().Scan(&ws.ID, &ws.Network, &ws.ForkOf, &ws.DefaultBranch, &ws.BaseCommit, &names, &oids)
			var pg *pgconn.PgError
			switch {
			case errors.Is(err, pgx.ErrNoRows):
				err = because(err, lockstep.ENOTFOUND, "repository %s not found", base)
			case isUnique(err) && errors.As(err, &pg) && pg.TableName == "repos":
				err = because(err, lockstep.ECONFLICT, "repository %s already exists", ws.Name)
			case err != nil:
				err = fmt.Errorf("fork repo: %w", err)
			}
		}
		var owned *int
		if entry != nil && maxOwned > 0 {
			owned = new(int)
		}
		seq, prev, err := pgEndFirstBatch(br, err, entry != nil, owned)
		if err == nil && owned != nil {
			err = overOwned(ws, *owned, maxOwned) // pipelined rolls the transaction back
		}
		if err != nil {
			return err
		}
		s.pgBases.put(base, &pgForkBase{network: ws.Network, defaultBranch: ws.DefaultBranch, baseCommit: ws.BaseCommit, names: names, oids: oids})
		if entry == nil {
			return nil
		}
		if fill != nil {
			copied := make([]lockstep.Ref, len(names))
			for i := range names {
				copied[i] = lockstep.Ref{Name: names[i], OID: oids[i]}
			}
			fill(copied)
		}
		return s.pgAppendCommit(ctx, pc, entry, parent, seq, prev)
	})
}

// pgKeyParent returns the key that minted entry's key (keyParent), read
// outside the transaction: a key's parent never changes.
func (s *DB) pgKeyParent(ctx context.Context, pc *pgx.Conn, entry *lockstep.OpEntry) (string, error) {
	if entry == nil || !strings.HasPrefix(entry.KeyID, "key_") {
		return "", nil
	}
	if v, ok := s.parents.Load(entry.KeyID); ok {
		return v.(string), nil
	}
	var p *string
	err := pc.QueryRow(ctx, `SELECT parent_key_id FROM keys WHERE id = $1`, entry.KeyID).Scan(&p)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("read key parent: %w", err)
	}
	parent := ""
	if p != nil {
		parent = *p
	}
	s.parents.Store(entry.KeyID, parent)
	return parent, nil
}

func (s *DB) createRepoOn(ctx context.Context, pc *pgx.Conn, r *lockstep.Repo, refs []lockstep.Ref, entry *lockstep.OpEntry, now int64) error {
	parent, err := s.pgKeyParent(ctx, pc, entry)
	if err != nil {
		return err
	}
	names := make([]string, len(refs))
	oids := make([]string, len(refs))
	for i, ref := range refs {
		names[i], oids[i] = ref.Name, ref.OID
	}
	// One round trip when the entry's hash can be computed by the
	// append statement (pgfork.go), else two.
	var a pgHashedAppend
	oneTrip := false
	if entry != nil {
		a, oneTrip = s.pgPrepareAppend(ctx, entry, parent)
	}
	b := &pgx.Batch{}
	b.Queue("begin")
	b.Queue(pgInsertRepoSQL, r.Name, r.Network, r.ForkOf, r.DefaultBranch, string(r.Status), r.OwnerKeyID, r.OwnerName, r.BaseCommit, r.Task,
		micros(r.CreatedAt), micros(r.UpdatedAt), names, oids, now)
	switch {
	case oneTrip:
		a.queue(b)
		b.Queue("commit")
	case entry == nil:
		b.Queue("commit")
	default:
		b.Queue(qOplogHead + " FOR UPDATE")
	}
	br := pc.SendBatch(ctx, b)
	_, err = br.Exec()
	if err == nil {
		err = br.QueryRow().Scan(&r.ID)
		var pg *pgconn.PgError
		if isUnique(err) && errors.As(err, &pg) && pg.TableName == "repos" {
			err = because(err, lockstep.ECONFLICT, "repository %s already exists", r.Name)
		} else if err != nil {
			err = fmt.Errorf("insert repo: %w", err)
		}
	}
	if oneTrip {
		if err == nil {
			err = a.read(br)
		}
		if err == nil {
			if _, err = br.Exec(); err != nil {
				err = fmt.Errorf("commit: %w", err)
			}
		}
		if cerr := br.Close(); err == nil && cerr != nil {
			err = cerr
		}
		if err == nil {
			s.hooks.deliver(*entry)
		}
		return err
	}
	seq, prev, err := pgEndFirstBatch(br, err, entry != nil, nil)
	if err != nil || entry == nil {
		return err
	}
	return s.pgAppendCommit(ctx, pc, entry, parent, seq, prev)
}

// pgEndFirstBatch reads the rest of a pipelined transaction's first batch
// after its insert (err is the insert's): the oplog head read FOR UPDATE
// when an entry follows, else the COMMIT, and with owned the count of the
// owner's workspaces queued after the head; then closes the batch.
func pgEndFirstBatch(br pgx.BatchResults, err error, appends bool, owned *int) (seq int64, prev string, _ error) {
	if err == nil && !appends {
		_, err = br.Exec()
	} else if err == nil {
		if err = br.QueryRow().Scan(&seq, &prev); err != nil {
			err = fmt.Errorf("read oplog head: %w", err)
		}
	}
	if err == nil && owned != nil {
		if err = br.QueryRow().Scan(owned); err != nil {
			err = fmt.Errorf("count owned workspaces: %w", err)
		}
	}
	if cerr := br.Close(); err == nil && cerr != nil {
		err = cerr
	}
	return seq, prev, err
}

// pgAppendCommit is the second batch of a pipelined transaction: entry
// appended after the head (seq, prev) with its key's record, and COMMIT.
func (s *DB) pgAppendCommit(ctx context.Context, pc *pgx.Conn, entry *lockstep.OpEntry, parent string, seq int64, prev string) error {
	s.stampEntry(ctx, entry)
	if parent != "" {
		withParent(entry, parent)
	}
	args := linkEntry(entry, seq, prev)
	q, qargs, finish, ok := s.pgAppendStmt(ctx, entry, args)
	if !ok {
		return errors.New("pgAppendCommit: an entry pgAppendStmt does not cover (pgCovers)")
	}
	b := &pgx.Batch{}
	b.Queue(q, qargs...)
	b.Queue("commit")
	br := pc.SendBatch(ctx, b)
	var one int
	err := finish(br.QueryRow().Scan(&one))
	if err == nil {
		if _, err = br.Exec(); err != nil {
			err = fmt.Errorf("commit: %w", err)
		}
	}
	if cerr := br.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	s.hooks.deliver(*entry)
	return nil
}
