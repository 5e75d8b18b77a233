package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/lockstep-hq/lockstep"
)

const repoCols = `id, name, network, fork_of, default_branch, status, owner_key_id, owner_name, base_commit, task, created_at, updated_at`

func scanRepo(row interface{ Scan(...any) error }) (*lockstep.Repo, error) {
	var r lockstep.Repo
	var c, u int64
	if err := row.Scan(&r.ID, &r.Name, &r.Network, &r.ForkOf, &r.DefaultBranch, &r.Status, &r.OwnerKeyID, &r.OwnerName, &r.BaseCommit, &r.Task, &c, &u); err != nil {
		return nil, err
	}
	r.CreatedAt, r.UpdatedAt = fromMicros(c), fromMicros(u)
	return &r, nil
}

// newRepoDefaults fills what a new repository row takes when the caller
// left it empty: created (and updated) now, status active.
func newRepoDefaults(r *lockstep.Repo, now time.Time) {
	if r.CreatedAt.IsZero() {
		r.CreatedAt = lockstep.TruncateTime(now)
	}
	r.UpdatedAt = r.CreatedAt
	if r.Status == "" {
		r.Status = lockstep.StatusActive
	}
}

// CreateRepo inserts r with its initial refs and appends entry.
func (s *DB) CreateRepo(ctx context.Context, r *lockstep.Repo, refs []lockstep.Ref, entry *lockstep.OpEntry) (err error) {
	ctx, span := s.start(ctx, "CreateRepo")
	defer func() { err = end(span, err) }()
	now := s.now()
	newRepoDefaults(r, now)
	if s.dialect == "postgres" && pgCovers(ctx, entry) {
		return s.createRepoPipelined(ctx, r, refs, entry, micros(now))
	}
	return s.inTx(ctx, func(tx *sql.Tx) error {
		err := tx.QueryRowContext(ctx, `INSERT INTO repos (name, network, fork_of, default_branch, status, owner_key_id, owner_name, base_commit, task, created_at, updated_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) RETURNING id`,
			r.Name, r.Network, r.ForkOf, r.DefaultBranch, string(r.Status), r.OwnerKeyID, r.OwnerName, r.BaseCommit, r.Task, micros(r.CreatedAt), micros(r.UpdatedAt)).Scan(&r.ID)
		if isUnique(err) {
			return because(err, lockstep.ECONFLICT, "repository %s already exists", r.Name)
		}
		if err != nil {
			return fmt.Errorf("insert repo: %w", err)
		}
		for _, ref := range refs {
			if _, err := tx.ExecContext(ctx, `INSERT INTO refs (repo_id, name, oid, updated_at) VALUES ($1, $2, $3, $4)`,
				r.ID, ref.Name, ref.OID, micros(now)); err != nil {
				return fmt.Errorf("insert ref: %w", err)
			}
		}
		return s.appendOp(ctx, tx, entry)
	})
}

// The fork's statements (ForkRepo): the workspace row is inserted from
// the base's (network, default branch, base commit), the base's branch
// refs are copied by INSERT … SELECT; no row inserted means no base.
const (
	qForkRepo = `INSERT INTO repos (name, network, fork_of, default_branch, status, owner_key_id, owner_name, base_commit, task, created_at, updated_at)
		SELECT $2, b.network, b.name, b.default_branch, $3, $4, $5,
			COALESCE((SELECT oid FROM refs WHERE repo_id = b.id AND name = 'refs/heads/' || b.default_branch), ''), $6, $7, $7
		FROM repos b WHERE b.name = $1
		RETURNING id, network, fork_of, default_branch, base_commit`
	qForkRefs = `INSERT INTO refs (repo_id, name, oid, updated_at)
		SELECT $1, x.name, x.oid, $2 FROM refs x WHERE x.repo_id = (SELECT id FROM repos WHERE name = $3) AND substr(x.name, 1, 11) = 'refs/heads/'
		RETURNING name, oid`
)

// ForkRepo creates ws as a fork of base (lockstep.RepoStore). On
// PostgreSQL it is two pipelined round trips (pgfast.go).
func (s *DB) ForkRepo(ctx context.Context, base string, ws *lockstep.Repo, maxOwned int, entry *lockstep.OpEntry, fill func(copied []lockstep.Ref)) (err error) {
	ctx, span := s.start(ctx, "ForkRepo")
	defer func() { err = end(span, err) }()
	now := s.now()
	newRepoDefaults(ws, now)
	if s.dialect == "postgres" && pgCovers(ctx, entry) && (maxOwned <= 0 || entry != nil) {
		return s.forkRepoPipelined(ctx, base, ws, maxOwned, entry, fill, micros(now))
	}
	return s.inTx(ctx, func(tx *sql.Tx) error {
		err := s.txQueryRow(ctx, tx, qForkRepo, base, ws.Name, string(ws.Status), ws.OwnerKeyID, ws.OwnerName, ws.Task, micros(ws.CreatedAt)).
			Scan(&ws.ID, &ws.Network, &ws.ForkOf, &ws.DefaultBranch, &ws.BaseCommit)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return because(err, lockstep.ENOTFOUND, "repository %s not found", base)
		case isUnique(err):
			return because(err, lockstep.ECONFLICT, "repository %s already exists", ws.Name)
		case err != nil:
			return fmt.Errorf("insert repo: %w", err)
		}
		var copied []lockstep.Ref
		rows, err := s.txQuery(ctx, tx, qForkRefs, ws.ID, micros(now), base)
		if err != nil {
			return fmt.Errorf("copy refs: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var r lockstep.Ref
			if err := rows.Scan(&r.Name, &r.OID); err != nil {
				return fmt.Errorf("copy refs: %w", err)
			}
			copied = append(copied, r)
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("copy refs: %w", err)
		}
		rows.Close()
		sort.Slice(copied, func(i, j int) bool { return copied[i].Name < copied[j].Name })
		if fill != nil {
			fill(copied)
		}
		if err := s.appendOp(ctx, tx, entry); err != nil {
			return err
		}
		if maxOwned <= 0 {
			return nil
		}
		if s.dialect == "postgres" && entry == nil {
			// appendOp locked nothing: take the lock every fork holds.
			if _, err := tx.ExecContext(ctx, qOplogHead+" FOR UPDATE"); err != nil {
				return fmt.Errorf("lock oplog head: %w", err)
			}
		}
		var n int
		if err := s.txQueryRow(ctx, tx, qCountOwned, ws.OwnerKeyID).Scan(&n); err != nil {
			return fmt.Errorf("count owned workspaces: %w", err)
		}
		return overOwned(ws, n, maxOwned)
	})
}

// qCountOwned counts the active workspaces a key owns (CountOwnedWorkspaces).
const qCountOwned = `SELECT COUNT(*) FROM repos WHERE owner_key_id = $1 AND fork_of <> '' AND status = 'active'`

// overOwned refuses a fork that took its owner to n active workspaces,
// the new one included, over maxOwned. The count is taken in the fork's
// transaction once it holds the oplog head's lock (PostgreSQL: FOR
// UPDATE, held by every fork until it commits; SQLite: the one writer),
// so it sees every fork that committed before it: concurrent forks, on
// one replica or several, cannot pass the check together.
func overOwned(ws *lockstep.Repo, n, maxOwned int) error {
	if maxOwned <= 0 || n <= maxOwned {
		return nil
	}
	return lockstep.Errorf(lockstep.ERATELIMITED, "workspace quota: key %s owns %d active workspaces, its limit is %d: abandon, promote or delete one first", ws.OwnerName, n-1, maxOwned)
}

// RepoByName finds a repository.
func (s *DB) RepoByName(ctx context.Context, name string) (r *lockstep.Repo, err error) {
	ctx, span := s.start(ctx, "RepoByName")
	defer func() { err = end(span, err) }()
	r, err = scanRepo(s.queryRow(ctx, qRepoByName, name))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, because(err, lockstep.ENOTFOUND, "repository %s not found", name)
	}
	return r, err
}

// RepoRef is RepoByName and Ref of that repository in one statement (a
// preflight reads a repository and one branch of it for each side): ref
// is nil when the repository has no ref of that name; not_found for an
// unknown repository.
func (s *DB) RepoRef(ctx context.Context, name, refName string) (r *lockstep.Repo, ref *lockstep.Ref, err error) {
	ctx, span := s.start(ctx, "RepoRef")
	defer func() { err = end(span, err) }()
	var oid sql.NullString
	var u sql.NullInt64
	var c, ru int64
	r = &lockstep.Repo{}
	err = s.queryRow(ctx, qRepoRef, name, refName).Scan(&r.ID, &r.Name, &r.Network, &r.ForkOf, &r.DefaultBranch, &r.Status, &r.OwnerKeyID,
		&r.OwnerName, &r.BaseCommit, &r.Task, &c, &ru, &oid, &u)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil, because(err, lockstep.ENOTFOUND, "repository %s not found", name)
	}
	if err != nil {
		return nil, nil, err
	}
	r.CreatedAt, r.UpdatedAt = fromMicros(c), fromMicros(ru)
	if oid.Valid {
		ref = &lockstep.Ref{Name: refName, OID: oid.String, UpdatedAt: fromMicros(u.Int64)}
	}
	return r, ref, nil
}

// ListRepos lists repositories by name.
func (s *DB) ListRepos(ctx context.Context, f lockstep.RepoFilter) (out []*lockstep.Repo, err error) {
	ctx, span := s.start(ctx, "ListRepos")
	defer func() { err = end(span, err) }()
	var where []string
	var args []any
	if f.ForkOf != "" {
		args = append(args, f.ForkOf)
		where = append(where, fmt.Sprintf("fork_of = $%d", len(args)))
	}
	if f.Network != "" {
		args = append(args, f.Network)
		where = append(where, fmt.Sprintf("network = $%d", len(args)))
	}
	if f.Task != "" {
		args = append(args, f.Task)
		where = append(where, fmt.Sprintf("task = $%d", len(args)))
	}
	if f.Status != "" {
		args = append(args, string(f.Status))
		where = append(where, fmt.Sprintf("status = $%d", len(args)))
	}
	if f.After != "" {
		args = append(args, f.After)
		where = append(where, fmt.Sprintf("name > $%d", len(args)))
	}
	q := `SELECT ` + repoCols + ` FROM repos`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY name"
	if f.Limit > 0 {
		args = append(args, f.Limit)
		q += fmt.Sprintf(" LIMIT $%d", len(args))
	}
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		r, err := scanRepo(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// SetRepoStatus moves a repository from change.From to change.To, a
// compare-and-swap on the status, and appends change.Entry.
func (s *DB) SetRepoStatus(ctx context.Context, change lockstep.StatusChange) (err error) {
	ctx, span := s.start(ctx, "SetRepoStatus")
	defer func() { err = end(span, err) }()
	return s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE repos SET status = $1, updated_at = $2 WHERE id = $3 AND status = $4`,
			string(change.To), micros(s.now()), change.RepoID, string(change.From))
		if err != nil {
			return fmt.Errorf("set status of %s: %w", change.Repo, err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			cur, err := s.statusOf(ctx, tx, change.RepoID, change.Repo)
			if err != nil {
				return err
			}
			return lockstep.StatusConflict(change.Repo, change.From, cur)
		}
		entry := change.Entry
		if err := s.appendOp(ctx, tx, entry); err != nil {
			return err
		}
		if change.To != lockstep.StatusFailed && change.To != lockstep.StatusAbandoned {
			return nil
		}
		// A failed or abandoned workspace is never promoted: its staged
		// effects are discarded with the status change (one more entry).
		d := &lockstep.OpEntry{Op: "effect.discard", Repo: "", Details: map[string]any{}}
		if entry != nil {
			d.KeyID, d.KeyName, d.Repo, d.TraceID, d.Follows = entry.KeyID, entry.KeyName, entry.Repo, entry.TraceID, entry.ID
		}
		_, err = s.discardTx(ctx, tx, lockstep.EffectFilter{RepoID: change.RepoID, Reason: "workspace " + string(change.To)}, d)
		return err
	})
}

// statusOf reads a repository's status inside tx (not_found when it is
// gone).
func (s *DB) statusOf(ctx context.Context, tx *sql.Tx, repoID int64, name string) (lockstep.Status, error) {
	var cur string
	if err := tx.QueryRowContext(ctx, `SELECT status FROM repos WHERE id = $1`, repoID).Scan(&cur); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return "", because(err, lockstep.ENOTFOUND, "repository %s not found", name)
		}
		return "", fmt.Errorf("read status of %s: %w", name, err)
	}
	return lockstep.Status(cur), nil
}

// Refs lists a repository's refs.
func (s *DB) Refs(ctx context.Context, repoID int64) (out []lockstep.Ref, err error) {
	ctx, span := s.start(ctx, "Refs")
	defer func() { err = end(span, err) }()
	rows, err := s.db.QueryContext(ctx, `SELECT name, oid, updated_at FROM refs WHERE repo_id = $1 ORDER BY name`, repoID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var r lockstep.Ref
		var u int64
		if err := rows.Scan(&r.Name, &r.OID, &u); err != nil {
			return nil, err
		}
		r.UpdatedAt = fromMicros(u)
		out = append(out, r)
	}
	return out, rows.Err()
}

// AllRefs lists every ref keyed by repository name.
func (s *DB) AllRefs(ctx context.Context) (out map[string][]lockstep.Ref, err error) {
	ctx, span := s.start(ctx, "AllRefs")
	defer func() { err = end(span, err) }()
	rows, err := s.db.QueryContext(ctx, `SELECT r.name, f.name, f.oid, f.updated_at FROM repos r JOIN refs f ON f.repo_id = r.id ORDER BY r.name, f.name`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out = map[string][]lockstep.Ref{}
	for rows.Next() {
		var repo string
		var r lockstep.Ref
		var u int64
		if err := rows.Scan(&repo, &r.Name, &r.OID, &u); err != nil {
			return nil, err
		}
		r.UpdatedAt = fromMicros(u)
		out[repo] = append(out[repo], r)
	}
	return out, rows.Err()
}

// Ref returns one ref.
func (s *DB) Ref(ctx context.Context, repoID int64, name string) (r lockstep.Ref, err error) {
	ctx, span := s.start(ctx, "Ref")
	defer func() { err = end(span, err) }()
	var u int64
	err = s.queryRow(ctx, qRef, repoID, name).Scan(&r.Name, &r.OID, &u)
	if errors.Is(err, sql.ErrNoRows) {
		return r, because(err, lockstep.ENOTFOUND, "ref %s not found", name)
	}
	r.UpdatedAt = fromMicros(u)
	return r, err
}

// UpdateRefs applies every compare-and-swap atomically with the attempts
// and the log entry.
func (s *DB) UpdateRefs(ctx context.Context, updates []lockstep.RefUpdate, attempts []lockstep.AttemptRecord, events []lockstep.HookEvent, entry *lockstep.OpEntry) (err error) {
	ctx, span := s.start(ctx, "UpdateRefs")
	defer func() { err = end(span, err) }()
	return s.inTx(ctx, func(tx *sql.Tx) error {
		return s.updateRefs(ctx, tx, updates, attempts, events, entry)
	})
}

// UpdateRefsAndStatus applies the updates and a status change in one
// transaction.
func (s *DB) UpdateRefsAndStatus(ctx context.Context, updates []lockstep.RefUpdate, attempts []lockstep.AttemptRecord, events []lockstep.HookEvent, entry *lockstep.OpEntry, change lockstep.StatusChange) (err error) {
	ctx, span := s.start(ctx, "UpdateRefsAndStatus")
	defer func() { err = end(span, err) }()
	return s.inTx(ctx, func(tx *sql.Tx) error {
		// The workspace's row first, then the base's (updateRefs), then the
		// log head: the order every other writer takes them in (a child
		// before its base), so two transactions never wait on each other.
		res, err := tx.ExecContext(ctx, `UPDATE repos SET status = $1, updated_at = $2 WHERE id = $3 AND status = $4`,
			string(change.To), micros(s.now()), change.RepoID, string(change.From))
		if err != nil {
			return fmt.Errorf("set status of %s: %w", change.Repo, err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			cur, err := s.statusOf(ctx, tx, change.RepoID, change.Repo)
			if err != nil {
				return err
			}
			// A landing needs a movable workspace: one that is no longer
			// active is refused like any ref move of it.
			return lockstep.Errorf(lockstep.EINVALID, "workspace %s is %s, not %s", change.Repo, cur, change.From)
		}
		if change.ExpectRef != "" {
			// The row lock just taken orders this check with every ref
			// move of the repository (lockActive takes the same lock).
			var oid string
			var u int64
			var name string
			err := tx.QueryRowContext(ctx, qRef, change.RepoID, change.ExpectRef).Scan(&name, &oid, &u)
			if errors.Is(err, sql.ErrNoRows) {
				oid = lockstep.ZeroOID
			} else if err != nil {
				return fmt.Errorf("read %s of %s: %w", change.ExpectRef, change.Repo, err)
			}
			if oid != change.ExpectOID {
				return lockstep.RefConflict(change.Repo, change.ExpectRef, change.ExpectOID, oid)
			}
		}
		if err := s.updateRefs(ctx, tx, updates, attempts, events, entry); err != nil {
			return err
		}
		if rel := change.Effects; rel != nil {
			// A promote releases the workspace's staged effects with the
			// base branch's move: the outbox rows commit with it or not at
			// all, so a server killed after the commit delivers at restart.
			commit := ""
			for _, u := range updates {
				if u.RepoID == rel.IntoID && u.New != lockstep.ZeroOID {
					commit = u.New
				}
			}
			released, held, err := s.releaseTx(ctx, tx, change.RepoID, rel, commit)
			if err != nil {
				return err
			}
			if change.Entry != nil && released+held > 0 {
				d := make(map[string]any, len(change.Entry.Details)+2)
				for k, v := range change.Entry.Details {
					d[k] = v
				}
				d["effects_released"], d["effects_held"] = released, held
				change.Entry.Details = d
			}
		}
		return s.appendOp(ctx, tx, change.Entry)
	})
}

// lockActive takes the row lock of every repository named by updates and
// refuses when one is not active: a status change committed before this
// transaction wins, one after it waits for it.
func (s *DB) lockActive(ctx context.Context, tx *sql.Tx, updates []lockstep.RefUpdate) error {
	seen := map[int64]bool{}
	for _, u := range updates {
		if seen[u.RepoID] {
			continue
		}
		seen[u.RepoID] = true
		res, err := tx.ExecContext(ctx, `UPDATE repos SET status = status WHERE id = $1 AND status = $2`, u.RepoID, string(lockstep.StatusActive))
		if err != nil {
			return fmt.Errorf("lock repository %s: %w", u.Repo, err)
		}
		if n, _ := res.RowsAffected(); n == 1 {
			continue
		}
		cur, err := s.statusOf(ctx, tx, u.RepoID, u.Repo)
		if err != nil {
			return err
		}
		return lockstep.Errorf(lockstep.EINVALID, "workspace %s is %s: its refs are kept for review and never move again", u.Repo, cur)
	}
	return nil
}

func (s *DB) updateRefs(ctx context.Context, tx *sql.Tx, updates []lockstep.RefUpdate, attempts []lockstep.AttemptRecord, events []lockstep.HookEvent, entry *lockstep.OpEntry) error {
	now := micros(s.now())
	for _, u := range updates {
		s.pgBases.forget(u.Repo) // the next fork of it reads it (pgfork.go)
	}
	if err := s.lockActive(ctx, tx, updates); err != nil {
		return err
	}
	if err := s.checkGCSince(ctx, tx, updates); err != nil {
		return err
	}
	locked := map[int64]bool{} // lockActive holds every repository row already
	for _, u := range updates {
		locked[u.RepoID] = true
	}
	// Deletes first, as git does, so that one transaction may replace "a"
	// by "a/b".
	ordered := make([]lockstep.RefUpdate, 0, len(updates))
	for _, u := range updates {
		if u.New == lockstep.ZeroOID {
			ordered = append(ordered, u)
		}
	}
	for _, u := range updates {
		if u.New != lockstep.ZeroOID {
			ordered = append(ordered, u)
		}
	}
	st := s.txStatements(tx, len(ordered))
	defer st.close()
	for _, u := range ordered {
		var res sql.Result
		var err error
		switch {
		case u.Old == lockstep.ZeroOID && u.New == lockstep.ZeroOID:
			continue
		case u.Old == lockstep.ZeroOID:
			if err := s.checkRefClash(ctx, st, locked, u); err != nil {
				return err
			}
			res, err = st.exec(ctx, `INSERT INTO refs (repo_id, name, oid, updated_at) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING`,
				u.RepoID, u.Name, u.New, now)
		case u.New == lockstep.ZeroOID:
			res, err = st.exec(ctx, `DELETE FROM refs WHERE repo_id = $1 AND name = $2 AND oid = $3`, u.RepoID, u.Name, u.Old)
		default:
			res, err = st.exec(ctx, `UPDATE refs SET oid = $1, updated_at = $2 WHERE repo_id = $3 AND name = $4 AND oid = $5`,
				u.New, now, u.RepoID, u.Name, u.Old)
		}
		if err != nil {
			return fmt.Errorf("update ref %s: %w", u.Name, err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			actual := lockstep.ZeroOID
			err := tx.QueryRowContext(ctx, `SELECT oid FROM refs WHERE repo_id = $1 AND name = $2`, u.RepoID, u.Name).Scan(&actual)
			if err != nil && !errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("read ref %s: %w", u.Name, err)
			}
			return lockstep.RefConflict(u.Repo, u.Name, u.Old, actual)
		}
	}
	for _, a := range attempts {
		if _, err := tx.ExecContext(ctx, `INSERT INTO attempts (repo_id, commit_oid, tree_oid, branch, op, key_name, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
			a.RepoID, a.Commit, a.Tree, a.Branch, a.Op, a.KeyName, now); err != nil {
			return fmt.Errorf("insert attempt: %w", err)
		}
	}
	if err := s.enqueue(ctx, tx, events); err != nil {
		return err
	}
	if err := s.appendOp(ctx, tx, entry); err != nil {
		return err
	}
	// A checkpoint restore discards the effects staged after the
	// checkpoint in the transaction that restores the code.
	if d := lockstep.EffectDiscardFrom(ctx); d != nil && locked[d.Filter.RepoID] {
		ids, err := s.discardTx(ctx, tx, d.Filter, d.Entry)
		if err != nil {
			return err
		}
		d.Discarded = ids
	}
	return nil
}

// checkRefClash refuses to create u.Name when a ref of the repository is a
// path prefix of it or has it as one (git's file/directory rule). On
// PostgreSQL the repository row is locked first so that two transactions
// cannot create "a" and "a/b" side by side; SQLite transactions are
// already serialized (BEGIN IMMEDIATE).
func (s *DB) checkRefClash(ctx context.Context, st *txStmts, locked map[int64]bool, u lockstep.RefUpdate) error {
	if s.dialect == "postgres" && !locked[u.RepoID] {
		var id int64
		if err := st.tx.QueryRowContext(ctx, `SELECT id FROM repos WHERE id = $1 FOR NO KEY UPDATE`, u.RepoID).Scan(&id); err != nil && !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("lock repo: %w", err)
		}
		locked[u.RepoID] = true
	}
	dir := u.Name + "/"
	args := []any{u.RepoID, utf8.RuneCountInString(dir), dir}
	var in []string
	for i := 0; i < len(u.Name); i++ {
		if u.Name[i] == '/' {
			args = append(args, u.Name[:i])
			in = append(in, fmt.Sprintf("$%d", len(args)))
		}
	}
	q := `SELECT name FROM refs WHERE repo_id = $1 AND (substr(name, 1, $2) = $3`
	if len(in) > 0 {
		q += ` OR name IN (` + strings.Join(in, ", ") + `)`
	}
	var other string
	err := st.queryRow(ctx, q+`) ORDER BY name LIMIT 1`, args...).Scan(&other)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil
	case err != nil:
		return fmt.Errorf("check ref %s: %w", u.Name, err)
	}
	return lockstep.RefNameConflict(u.Repo, u.Name, other)
}

// Attempts lists a workspace's attempts, newest first.
func (s *DB) Attempts(ctx context.Context, repoID int64, limit int) (out []lockstep.Attempt, err error) {
	ctx, span := s.start(ctx, "Attempts")
	defer func() { err = end(span, err) }()
	if limit <= 0 || limit > 1000 {
		limit = 100
	}
	// number is the attempt's ordinal within its workspace (1, 2, 3 …):
	// a window over this workspace's attempts only (index attempts_repo).
	rows, err := s.db.QueryContext(ctx, `SELECT seq, number, commit_oid, tree_oid, branch, op, key_name, created_at FROM (
		SELECT seq, ROW_NUMBER() OVER (ORDER BY seq) AS number, commit_oid, tree_oid, branch, op, key_name, created_at
		FROM attempts WHERE repo_id = $1) a ORDER BY seq DESC LIMIT $2`, repoID, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var a lockstep.Attempt
		var c int64
		if err := rows.Scan(&a.Seq, &a.Number, &a.Commit, &a.Tree, &a.Branch, &a.Op, &a.KeyName, &c); err != nil {
			return nil, err
		}
		a.CreatedAt = fromMicros(c)
		out = append(out, a)
	}
	return out, rows.Err()
}

// txStmts runs the statements of a transaction that applies many ref
// updates, each statement text prepared once: SQLite (modernc) prepares
// a statement again on every Exec with arguments, which was most of the
// ref transaction's CPU for a push of ~150 refs. On PostgreSQL, and for a
// few updates, statements run on tx as they are (pgx caches prepared
// statements per connection itself).
type txStmts struct {
	tx   *sql.Tx
	stmt map[string]*sql.Stmt // nil: not preparing
}

// txStatements returns the statements of tx, to run about n updates.
func (s *DB) txStatements(tx *sql.Tx, n int) *txStmts {
	st := &txStmts{tx: tx}
	if s.dialect == "sqlite" && n >= 4 {
		st.stmt = map[string]*sql.Stmt{}
	}
	return st
}

func (st *txStmts) prepared(ctx context.Context, q string) (*sql.Stmt, error) {
	if p, ok := st.stmt[q]; ok {
		return p, nil
	}
	p, err := st.tx.PrepareContext(ctx, q)
	if err != nil {
		return nil, err
	}
	st.stmt[q] = p
	return p, nil
}

func (st *txStmts) exec(ctx context.Context, q string, args ...any) (sql.Result, error) {
	if st.stmt == nil {
		return st.tx.ExecContext(ctx, q, args...)
	}
	p, err := st.prepared(ctx, q)
	if err != nil {
		return nil, err
	}
	return p.ExecContext(ctx, args...)
}

// queryRow is tx.QueryRowContext; an error preparing q is returned by
// the row's Scan.
func (st *txStmts) queryRow(ctx context.Context, q string, args ...any) interface{ Scan(...any) error } {
	if st.stmt == nil {
		return st.tx.QueryRowContext(ctx, q, args...)
	}
	p, err := st.prepared(ctx, q)
	if err != nil {
		return errRow{err}
	}
	return p.QueryRowContext(ctx, args...)
}

// close closes the prepared statements (before the transaction ends).
func (st *txStmts) close() {
	for _, p := range st.stmt {
		p.Close()
	}
}

// errRow is a row whose Scan returns err.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }
