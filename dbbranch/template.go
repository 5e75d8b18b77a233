package dbbranch

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockstep-hq/lockstep"
)

// Template describes a repository's bound template.
type Template struct {
	Repo       string
	Source     string // the user's database it was copied from
	Database   string // Lockstep's copy (IS_TEMPLATE, ALLOW_CONNECTIONS false)
	OwnerRole  string // NOLOGIN role owning the objects inside the copy
	SizeBytes  int64
	CreatedAt  time.Time
	SpareReady bool // a warm spare of the copy is ready for CreateBranch
}

// BindTemplate binds repo to the user's database template (any database on
// the server) by copying it into Lockstep's own template database, so
// branching never waits on the user's sessions. Binding again re-copies
// (from the new source). The user's database is only read: never altered,
// and its sessions are never terminated.
//
// Errors: invalid_argument for a bad name; not_found if template does not
// exist; unavailable if it has open sessions ("being accessed by other
// users") or the server is down.
func (m *Manager) BindTemplate(ctx context.Context, repo, template string) error {
	if err := validateName("repository", repo); err != nil {
		return err
	}
	if template == "" || len(template) > maxIdentBytes || strings.ContainsRune(template, 0) {
		return lockstep.Errorf(lockstep.EINVALID, "invalid template database name %q", template)
	}
	if strings.HasPrefix(template, m.names.prefix+"_") {
		return lockstep.Errorf(lockstep.EINVALID, "template %q is a Lockstep-managed database", template)
	}
	h := m.names.repoHash(repo)
	err := m.withLocks(ctx, []lockSpec{repoLock(h, false)}, func(conn *pgx.Conn) error {
		if _, err := m.repairRepo(ctx, conn, h); err != nil {
			return err
		}
		return m.buildTemplate(ctx, conn, repo, template)
	})
	if err == nil {
		m.scheduleTemplateSpare(h)
	}
	return err
}

// RefreshTemplate re-copies repo's template from the user's database it
// was bound to (after a promote changed it). Existing branches are not
// touched; the template spare is rebuilt.
//
// Errors: not_found if repo has no template; unavailable as BindTemplate.
func (m *Manager) RefreshTemplate(ctx context.Context, repo string) error {
	if err := validateName("repository", repo); err != nil {
		return err
	}
	h := m.names.repoHash(repo)
	err := m.withLocks(ctx, []lockSpec{repoLock(h, false)}, func(conn *pgx.Conn) error {
		dbs, err := m.repairRepo(ctx, conn, h)
		if err != nil {
			return err
		}
		t := find(dbs, kindTemplate)
		if t == nil {
			return lockstep.Errorf(lockstep.ENOTFOUND, "repository %q has no template database", repo)
		}
		return m.buildTemplate(ctx, conn, repo, t.Meta.Source)
	})
	if err == nil {
		m.scheduleTemplateSpare(h)
	}
	return err
}

// Template returns repo's template. Errors: not_found if none is bound.
func (m *Manager) Template(ctx context.Context, repo string) (*Template, error) {
	if err := validateName("repository", repo); err != nil {
		return nil, err
	}
	h := m.names.repoHash(repo)
	var out *Template
	err := m.withLocks(ctx, []lockSpec{repoLock(h, true)}, func(conn *pgx.Conn) error {
		dbs, err := m.listDBs(ctx, conn, h)
		if err != nil {
			return err
		}
		t := find(dbs, kindTemplate)
		if !t.complete() {
			if find(dbs, kindStaging) != nil {
				return errRepoNeedsRepair
			}
			return lockstep.Errorf(lockstep.ENOTFOUND, "repository %q has no template database", repo)
		}
		size, err := m.dbSize(ctx, conn, t.Name)
		if err != nil {
			return err
		}
		out = &Template{Repo: repo, Source: t.Meta.Source, Database: t.Name, OwnerRole: m.names.name(kindOwnerRole, h, repo),
			SizeBytes: size, CreatedAt: t.Meta.Created, SpareReady: len(readySpares(dbs, t)) > 0}
		return nil
	})
	if err == errRepoNeedsRepair {
		if err := m.repairRepoLocked(ctx, h); err != nil {
			return nil, err
		}
		return m.Template(ctx, repo)
	}
	return out, err
}

// errRepoNeedsRepair: an operation holding the repository lock shared found
// a refresh interrupted between dropping the old template copy and renaming
// the new one into place; it repairs under the exclusive lock and retries.
var errRepoNeedsRepair = errors.New("template copy being replaced")

func (m *Manager) repairRepoLocked(ctx context.Context, h string) error {
	return m.withLocks(ctx, []lockSpec{repoLock(h, false)}, func(conn *pgx.Conn) error {
		_, err := m.repairRepo(ctx, conn, h)
		return err
	})
}

// buildTemplate copies src into a staging database, hands every object in it
// to the repository's owner role, marks it, and swaps it in for the current
// template copy. Caller holds the repository lock exclusively.
func (m *Manager) buildTemplate(ctx context.Context, conn *pgx.Conn, repo, src string) error {
	h := m.names.repoHash(repo)
	staging := m.names.name(kindStaging, h, repo)
	final := m.names.name(kindTemplate, h, repo)
	owner := m.names.name(kindOwnerRole, h, repo)

	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", src).Scan(&exists); err != nil {
		return unavailable(err)
	}
	if !exists {
		return lockstep.Errorf(lockstep.ENOTFOUND, "template database %q does not exist", src)
	}
	// Fail fast (CREATE would wait 5 s) and say who holds it.
	// A session closed just before this call can linger for a few
	// milliseconds on the server: look again for up to a second.
	var busy int
	var who string
	for try := 0; ; try++ {
		if err := conn.QueryRow(ctx, `SELECT count(*), coalesce(string_agg(DISTINCT coalesce(usename, '?') || '@' || coalesce(application_name, ''), ', '), '')
			FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()`, src).Scan(&busy, &who); err != nil {
			return unavailable(err)
		}
		if busy == 0 || try == 50 {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	if busy > 0 {
		return lockstep.Errorf(lockstep.EUNAVAILABLE,
			"template database %q is being accessed by %d other session(s) (%s); CREATE DATABASE … TEMPLATE needs it idle: close them and retry",
			src, busy, who).WithDetails(map[string]any{"template": src, "sessions": busy})
	}
	if err := m.ensureRole(ctx, conn, owner, "NOLOGIN", ""); err != nil {
		return err
	}
	// Created closed: CREATE DATABASE grants CONNECT to PUBLIC, and a
	// role that connected while the copy is open (every branch role of the
	// server sees its name) would keep its session, reading and writing
	// what every later branch of the repository starts from. PUBLIC loses
	// CONNECT before connections are allowed for takeOwnership.
	if err := m.createDB(ctx, conn, staging, src, false); err != nil {
		return err
	}
	err := func() error {
		if err := m.run(ctx, conn, append(restrictSQL(staging, ""), allowSQL(staging, true))...); err != nil {
			return fmt.Errorf("open %s: %w", staging, err)
		}
		if err := m.takeOwnership(ctx, staging, owner); err != nil {
			return err
		}
		// The comment completes the staging copy: from here a crash rolls
		// forward (repairRepo renames it into place if the old copy is gone).
		stmts := append(restrictSQL(staging, ""),
			"ALTER DATABASE "+ident(staging)+" WITH ALLOW_CONNECTIONS false IS_TEMPLATE true",
			commentSQL(staging, meta{Kind: "template", Repo: repo, Source: src, Gen: newGen(), Created: time.Now().UTC()}))
		if err := m.run(ctx, conn, stmts...); err != nil {
			return fmt.Errorf("mark template %s: %w", staging, err)
		}
		return nil
	}()
	if err != nil {
		m.dropDB(context.WithoutCancel(ctx), conn, &dbInfo{Name: staging, IsTemplate: true})
		return err
	}
	dbs, err := m.listDBs(ctx, conn, h)
	if err != nil {
		return err
	}
	for _, d := range dbs {
		if d.Kind == kindTemplate || d.Kind == kindTplSpare {
			if err := m.dropDB(ctx, conn, d); err != nil {
				return err
			}
		}
	}
	return m.rename(ctx, conn, staging, final)
}

func newGen() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ensureRole creates role (or updates its attributes and password).
func (m *Manager) ensureRole(ctx context.Context, conn *pgx.Conn, role, attrs, password string) error {
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)", role).Scan(&exists); err != nil {
		return err
	}
	q := "CREATE ROLE " + ident(role) + " " + attrs
	if exists {
		q = "ALTER ROLE " + ident(role) + " " + attrs
	}
	if password != "" {
		q += " PASSWORD " + quoteLiteral(password)
	}
	if _, err := conn.Exec(ctx, q); err != nil {
		if !exists && isCode(err, "42710") { // created meanwhile by another process
			return m.ensureRole(ctx, conn, role, attrs, password)
		}
		return fmt.Errorf("role %s: %w", role, err)
	}
	return nil
}

// takeOwnershipSQL hands every user object (schemas, tables, views,
// materialized views, foreign tables, free-standing sequences, functions,
// procedures, types) of the current database to the owner role; objects of
// extensions stay with the extension. Tables take their indexes and owned
// sequences along.
const takeOwnershipSQL = `DO $do$
DECLARE r record; o text := @OWNER@;
BEGIN
  FOR r IN SELECT n.nspname FROM pg_namespace n
    WHERE n.nspname <> 'information_schema' AND n.nspname !~ '^pg_'
      AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_namespace'::regclass AND d.objid = n.oid AND d.deptype = 'e')
  LOOP EXECUTE format('ALTER SCHEMA %I OWNER TO %I', r.nspname, o); END LOOP;
  FOR r IN SELECT c.oid, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname <> 'information_schema' AND n.nspname !~ '^pg_'
      AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S')
      AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid
                      AND (d.deptype = 'e' OR (c.relkind = 'S' AND d.deptype IN ('a', 'i'))))
  LOOP
    EXECUTE format('ALTER %s %s OWNER TO %I',
      CASE r.relkind WHEN 'v' THEN 'VIEW' WHEN 'm' THEN 'MATERIALIZED VIEW' WHEN 'f' THEN 'FOREIGN TABLE'
                     WHEN 'S' THEN 'SEQUENCE' ELSE 'TABLE' END, r.oid::regclass, o);
  END LOOP;
  FOR r IN SELECT p.oid FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
    WHERE n.nspname <> 'information_schema' AND n.nspname !~ '^pg_' AND p.prokind IN ('f', 'p', 'w')
      AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e')
  LOOP EXECUTE format('ALTER ROUTINE %s OWNER TO %I', r.oid::regprocedure, o); END LOOP;
  FOR r IN SELECT t.oid FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
    WHERE n.nspname <> 'information_schema' AND n.nspname !~ '^pg_'
      AND (t.typtype IN ('d', 'e', 'r') OR (t.typtype = 'c' AND EXISTS (SELECT 1 FROM pg_class c WHERE c.oid = t.typrelid AND c.relkind = 'c')))
      AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_type'::regclass AND d.objid = t.oid AND d.deptype = 'e')
  LOOP EXECUTE format('ALTER TYPE %s OWNER TO %I', r.oid::regtype, o); END LOOP;
END $do$`

// takeOwnership connects to db (the staging copy, still open to
// connections) as the admin and runs takeOwnershipSQL.
func (m *Manager) takeOwnership(ctx context.Context, db, owner string) error {
	cc := m.connCfg.Copy()
	cc.Database = db
	c, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", db, err)
	}
	defer c.Close(context.Background())
	if _, err := c.Exec(ctx, strings.Replace(takeOwnershipSQL, "@OWNER@", quoteLiteral(owner), 1)); err != nil {
		return fmt.Errorf("hand objects of %s to %s: %w", db, owner, err)
	}
	return nil
}

// repairRepo finishes or undoes what a crash left in a repository's
// databases and returns them. Caller holds the repository lock
// exclusively.
func (m *Manager) repairRepo(ctx context.Context, conn *pgx.Conn, h string) ([]*dbInfo, error) {
	dbs, err := m.listDBs(ctx, conn, h)
	if err != nil {
		return nil, err
	}
	t, st := find(dbs, kindTemplate), find(dbs, kindStaging)
	var sps []*dbInfo
	for _, d := range dbs {
		if d.Kind == kindTplSpare {
			sps = append(sps, d)
		}
	}
	changed := false
	if t != nil && !t.complete() { // cannot happen (the comment precedes the rename) unless edited by hand
		if err := m.dropDB(ctx, conn, t); err != nil {
			return nil, err
		}
		t, changed = nil, true
	}
	if st != nil {
		if t == nil && st.complete() {
			for _, sp := range sps {
				if err := m.dropDB(ctx, conn, sp); err != nil {
					return nil, err
				}
			}
			sps = nil
			if err := m.rename(ctx, conn, st.Name, m.names.prefix+"_"+string(kindTemplate)+"_"+h+"_"+st.Rest); err != nil {
				return nil, err
			}
		} else if err := m.dropDB(ctx, conn, st); err != nil {
			return nil, err
		}
		changed = true
	}
	for _, sp := range sps {
		if !sp.complete() {
			// An interrupted builder; under the exclusive lock no builder runs.
			if err := m.dropDB(ctx, conn, sp); err != nil {
				return nil, err
			}
			changed = true
		}
	}
	if changed {
		return m.listDBs(ctx, conn, h)
	}
	return dbs, nil
}

func (m *Manager) scheduleTemplateSpare(h string) {
	if !m.cfg.Warm {
		return
	}
	m.schedule("template-spare:"+h, func(ctx context.Context) error {
		// Let a burst of forks finish its renames before a CREATE
		// DATABASE competes with their commits (a later fork of the
		// burst only asks for one more run).
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(refillDelay):
		}
		return m.refillTemplateSpare(ctx, h)
	})
}
