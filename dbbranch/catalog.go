package dbbranch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lockstep-hq/lockstep"
)

// meta is the JSON kept in COMMENT ON DATABASE. It is written last, so a
// database with a Lockstep name and no (valid) comment is a half-made copy
// left by a crash and is dropped by the next repair.
type meta struct {
	V         int       `json:"v"`
	Kind      string    `json:"kind"`
	Repo      string    `json:"repo,omitempty"`
	Workspace string    `json:"ws,omitempty"`
	Snapshot  string    `json:"snap,omitempty"`
	Source    string    `json:"src,omitempty"` // template: the user's database
	Gen       string    `json:"gen,omitempty"` // template generation (spares built from it carry it too)
	Created   time.Time `json:"at"`
	Restored  string    `json:"restored,omitempty"` // branch: the snapshot it was last restored from
}

// dbInfo is one Lockstep database as seen in pg_database.
type dbInfo struct {
	Name       string
	Kind       byte
	Hash       string
	Rest       string
	Meta       *meta // nil: incomplete (no comment)
	AllowConn  bool
	IsTemplate bool
	// Invalid: an interrupted DROP DATABASE left it (datconnlimit -2,
	// PostgreSQL 15.4+). It can only be dropped; any ALTER DATABASE on it
	// is FATAL for the session.
	Invalid bool
}

func (d *dbInfo) complete() bool {
	return d != nil && d.Meta != nil && !d.Invalid && d.Meta.Kind != "debris"
}

// debris: marked (in its comment) as no longer needed, to be dropped
// outside the workspace lock: an old branch a Restore put aside, a snapshot
// beyond MaxSnapshots, a stale spare.
func (d *dbInfo) debris() bool { return d.Meta != nil && d.Meta.Kind == "debris" && !d.Invalid }

func withoutDebris(dbs []*dbInfo) []*dbInfo {
	out := dbs[:0:0]
	for _, d := range dbs {
		if !d.debris() {
			out = append(out, d)
		}
	}
	return out
}

// listDBs returns the Lockstep databases of this prefix; with hash set, only
// those of one repository or workspace.
func (m *Manager) listDBs(ctx context.Context, conn *pgx.Conn, hash string) ([]*dbInfo, error) {
	rows, err := conn.Query(ctx, `SELECT datname, coalesce(shobj_description(oid, 'pg_database'), ''), datallowconn, datistemplate, datconnlimit = -2
		FROM pg_database WHERE starts_with(datname, $1)`, m.names.prefix+"_")
	if err != nil {
		return nil, fmt.Errorf("list databases: %w", err)
	}
	defer rows.Close()
	var out []*dbInfo
	for rows.Next() {
		var d dbInfo
		var comment string
		if err := rows.Scan(&d.Name, &comment, &d.AllowConn, &d.IsTemplate, &d.Invalid); err != nil {
			return nil, err
		}
		kind, h, rest, ok := m.names.parse(d.Name)
		if !ok || (hash != "" && h != hash) {
			continue
		}
		d.Kind, d.Hash, d.Rest = kind, h, rest
		if comment != "" {
			var md meta
			if json.Unmarshal([]byte(comment), &md) == nil && md.V == 1 {
				d.Meta = &md
			}
		}
		out = append(out, &d)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func find(dbs []*dbInfo, kind byte) *dbInfo {
	for _, d := range dbs {
		if d.Kind == kind {
			return d
		}
	}
	return nil
}

// snapshotsOf returns the complete snapshots, oldest first.
func snapshotsOf(dbs []*dbInfo) []*dbInfo {
	var out []*dbInfo
	for _, d := range dbs {
		if d.Kind == kindSnapshot && d.complete() {
			out = append(out, d)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Meta.Created.Equal(out[j].Meta.Created) {
			return out[i].Meta.Created.Before(out[j].Meta.Created)
		}
		return out[i].Name < out[j].Name
	})
	return out
}

func commentSQL(db string, md meta) string {
	md.V = 1
	b, _ := json.Marshal(md)
	return "COMMENT ON DATABASE " + ident(db) + " IS " + quoteLiteral(string(b))
}

func renameSQL(from, to string) string {
	return "ALTER DATABASE " + ident(from) + " RENAME TO " + ident(to)
}

func allowSQL(db string, allow bool) string {
	return fmt.Sprintf("ALTER DATABASE %s ALLOW_CONNECTIONS %t", ident(db), allow)
}

// restrictSQL makes db reachable only by role (if any): PUBLIC loses
// CONNECT and TEMPORARY; role gets CONNECT, CREATE, TEMPORARY.
func restrictSQL(db, role string) []string {
	q := []string{"REVOKE ALL ON DATABASE " + ident(db) + " FROM PUBLIC"}
	if role != "" {
		q = append(q, "GRANT CONNECT, CREATE, TEMPORARY ON DATABASE "+ident(db)+" TO "+ident(role))
	}
	return q
}

// run executes statements as one transaction in one round trip (simple
// protocol). Catalog changes on databases — RENAME, ALLOW_CONNECTIONS,
// grants, comments — are transactional; only CREATE and DROP DATABASE are
// not. One commit is both faster (one WAL flush) and atomic, which is what
// makes the warm renames crash-safe.
func (m *Manager) run(ctx context.Context, conn *pgx.Conn, stmts ...string) error {
	if len(stmts) == 0 {
		return nil
	}
	q := stmts[0]
	if len(stmts) > 1 {
		q = "BEGIN; " + strings.Join(stmts, "; ") + "; COMMIT"
	}
	if _, err := conn.Exec(ctx, q); err != nil {
		if conn.PgConn().TxStatus() != 'I' {
			conn.Exec(context.WithoutCancel(ctx), "ROLLBACK")
		}
		return err
	}
	return nil
}

// live drops the snapshots beyond MaxSnapshots that the background has not
// dropped yet: they are no longer listed or restorable.
func (m *Manager) live(snaps []*dbInfo) []*dbInfo {
	if len(snaps) > m.cfg.MaxSnapshots {
		return snaps[len(snaps)-m.cfg.MaxSnapshots:]
	}
	return snaps
}

// strategy picks CREATE DATABASE's STRATEGY from the source's size.
func (m *Manager) strategy(ctx context.Context, conn *pgx.Conn, src string) (string, error) {
	var size int64
	if err := conn.QueryRow(ctx, "SELECT pg_database_size($1::text)", src).Scan(&size); err != nil {
		return "", fmt.Errorf("size of %s: %w", src, err)
	}
	if size >= m.cfg.StrategyThresholdBytes {
		return "FILE_COPY", nil
	}
	return "WAL_LOG", nil
}

// createDB runs CREATE DATABASE name TEMPLATE src. It cannot run in a
// transaction; Postgres removes the half-made database itself if it fails.
func (m *Manager) createDB(ctx context.Context, conn *pgx.Conn, name, src string, allowConn bool) error {
	strat, err := m.strategy(ctx, conn, src)
	if err != nil {
		return err
	}
	q := fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s STRATEGY %s ALLOW_CONNECTIONS %t", ident(name), ident(src), strat, allowConn)
	if _, err := conn.Exec(ctx, q); err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "55006" {
			return lockstep.Errorf(lockstep.EUNAVAILABLE, "database %q is being accessed by other sessions; a template copy needs it idle", src)
		}
		return fmt.Errorf("create database %s from %s: %w", name, src, err)
	}
	return nil
}

// dropDB drops a database (terminating any session) and tolerates its
// absence. The DROP is not cancelled with ctx: a DROP DATABASE interrupted
// half-way leaves an invalid database behind (and it forces a checkpoint,
// so it can take seconds on a busy cluster).
func (m *Manager) dropDB(ctx context.Context, conn *pgx.Conn, d *dbInfo) error {
	if d == nil {
		return nil
	}
	ctx = context.WithoutCancel(ctx)
	if d.IsTemplate && !d.Invalid {
		if _, err := conn.Exec(ctx, "ALTER DATABASE "+ident(d.Name)+" IS_TEMPLATE false"); err != nil && !isUndefinedDB(err) {
			return fmt.Errorf("unmark template %s: %w", d.Name, err)
		}
	}
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+ident(d.Name)+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop database %s: %w", d.Name, err)
	}
	return nil
}

func (m *Manager) rename(ctx context.Context, conn *pgx.Conn, from, to string) error {
	if _, err := conn.Exec(ctx, "ALTER DATABASE "+ident(from)+" RENAME TO "+ident(to)); err != nil {
		return fmt.Errorf("rename database %s to %s: %w", from, to, err)
	}
	return nil
}

func (m *Manager) setAllowConn(ctx context.Context, conn *pgx.Conn, db string, allow bool) error {
	if _, err := conn.Exec(ctx, fmt.Sprintf("ALTER DATABASE %s ALLOW_CONNECTIONS %t", ident(db), allow)); err != nil {
		return fmt.Errorf("allow connections %t on %s: %w", allow, db, err)
	}
	return nil
}

// terminate ends every other session on db and waits (up to 5 s each) for
// them to be gone. Call it after ALLOW_CONNECTIONS false, so no new session
// can arrive.
func (m *Manager) terminate(ctx context.Context, conn *pgx.Conn, db string) error {
	// pg_terminate_backend(pid, timeout) polls every 100 ms; signalling
	// and polling pg_stat_activity ourselves ends in a few ms.
	var n int
	err := conn.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = $1 AND pid <> pg_backend_pid()`, db).Scan(&n)
	if err != nil {
		return fmt.Errorf("terminate sessions on %s: %w", db, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for n > 0 && time.Now().Before(deadline) {
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()`, db).Scan(&n); err != nil {
			return fmt.Errorf("wait for sessions on %s: %w", db, err)
		}
		if n > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(2 * time.Millisecond):
			}
		}
	}
	return nil
}

func (m *Manager) dbSize(ctx context.Context, conn *pgx.Conn, db string) (int64, error) {
	var n int64
	err := conn.QueryRow(ctx, "SELECT pg_database_size($1::text)", db).Scan(&n)
	return n, err
}

func isUndefinedDB(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "3D000"
}

func isCode(err error, code string) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == code
}

func unavailable(err error) error {
	if err == nil {
		return nil
	}
	var le *lockstep.Error
	if errors.As(err, &le) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("%w (%v)", lockstep.Errorf(lockstep.EUNAVAILABLE, "branch database server unavailable"), err)
}
