// Package sqlstore implements lockstep.Store on SQLite (embedded default,
// modernc.org/sqlite, no cgo) and on PostgreSQL (pgx v5 through
// database/sql). Both dialects share every query; the schema differs only
// where it must (migrations/sqlite, migrations/postgres). Driver errors are
// translated to lockstep error codes here and nowhere else.
//
// Ref compare-and-swap is a conditional UPDATE in a transaction that also
// appends the operations-log entry, so a ref never moves without its log
// entry and a stale expectation never overwrites a newer value. The log's
// hash chain is serialized by locking its single head row (SELECT … FOR
// UPDATE on PostgreSQL; SQLite transactions here are BEGIN IMMEDIATE).
package sqlstore

import (
	"context"
	"crypto/cipher"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/golang-migrate/migrate/v4"
	migratepgx "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	migratesqlite "github.com/golang-migrate/migrate/v4/database/sqlite"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	sqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/migrations"
)

// DB is a metadata store on SQLite or PostgreSQL.
type DB struct {
	parents sync.Map // key id → the id of the key that minted it (key.go)
	db      *sql.DB
	dialect string // "sqlite" or "postgres"
	tracer  trace.Tracer
	now     func() time.Time
	aead    cipher.AEAD // seals secrets (seal.go); nil: stored as given
	sealed  int         // rows whose plaintext secrets Open encrypted
	hooks   opHooks     // OnOp callbacks
	stmts   sync.Map    // query → *sql.Stmt, SQLite only (stmts.go)
	dsn     string      // PostgreSQL: the URL, for the migrator's own pool
	pgBases pgBaseCache // PostgreSQL: forks' bases as last seen (pgfork.go)
}

var _ lockstep.Store = (*DB)(nil)

// Options configure Open.
type Options struct {
	// Migrate applies pending migrations (the service does at start-up).
	Migrate bool
	// Now is the clock (tests inject one); default time.Now.
	Now func() time.Time
	// SecretKey (32 bytes) encrypts secrets at rest with AES-256-GCM (hook
	// secrets, effects' secret headers, the queries of hook and effect
	// target URLs); Open encrypts secrets stored in plaintext before. Without it
	// secrets are stored as given (tests of the store alone).
	SecretKey []byte
}

// IsPostgres reports whether a database URL selects PostgreSQL.
func IsPostgres(dbURL string) bool {
	return strings.HasPrefix(dbURL, "postgres://") || strings.HasPrefix(dbURL, "postgresql://")
}

// SQLitePath is the metadata file inside a data directory.
func SQLitePath(dataDir string) string { return filepath.Join(dataDir, "lockstep.db") }

// Open opens the store: PostgreSQL when dbURL is a postgres:// URL,
// otherwise SQLite at the path dbURL (a plain path or sqlite://path).
// It fails with a clear error when the schema is newer than this binary.
func Open(ctx context.Context, dbURL string, opts Options) (*DB, error) {
	s := &DB{tracer: otel.Tracer("lockstep/sqlstore"), now: opts.Now}
	if s.now == nil {
		s.now = time.Now
	}
	var err error
	if IsPostgres(dbURL) {
		s.dialect = "postgres"
		s.dsn = dbURL
		s.db, err = sql.Open("pgx", dbURL)
		if err != nil {
			return nil, fmt.Errorf("open postgres: %w", err)
		}
		s.db.SetMaxOpenConns(20)
		s.db.SetMaxIdleConns(20)
	} else {
		s.dialect = "sqlite"
		path := strings.TrimPrefix(dbURL, "sqlite://")
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, fmt.Errorf("create metadata dir: %w", err)
		}
		// The database and its -wal and -shm files (SQLite gives them the
		// database file's mode) are readable by the owner only.
		if err := restrictFiles(path, path+"-wal", path+"-shm"); err != nil {
			return nil, err
		}
		// WAL with synchronous=NORMAL survives a process crash with every
		// committed transaction; a power loss may lose the last commits but
		// never breaks consistency, and objects are always written before
		// the refs that name them. IMMEDIATE transactions serialize writers
		// up front instead of failing with SQLITE_BUSY at commit.
		q := url.Values{}
		q.Add("_pragma", "busy_timeout(30000)")
		q.Add("_pragma", "journal_mode(WAL)")
		q.Add("_pragma", "synchronous(NORMAL)")
		q.Add("_pragma", "foreign_keys(1)")
		// Deleted and overwritten content is zeroed, so a secret replaced
		// by its ciphertext leaves no plaintext in free space.
		q.Add("_pragma", "secure_delete(1)")
		q.Add("_txlock", "immediate")
		s.db, err = sql.Open("sqlite", "file:"+path+"?"+q.Encode())
		if err != nil {
			return nil, fmt.Errorf("open sqlite: %w", err)
		}
		s.db.SetMaxOpenConns(8)
		s.db.SetMaxIdleConns(8)
	}
	if err := s.db.PingContext(ctx); err != nil {
		s.db.Close()
		return nil, fmt.Errorf("connect to metadata database: %w", err)
	}
	if err := s.checkSchema(opts.Migrate); err != nil {
		s.db.Close()
		return nil, err
	}
	s.prepareHot(ctx)
	// The idempotency statements too, outside any transaction (a keyed
	// commit must never prepare inside its own: insertIdemAtCommit).
	// A failure is retried by the next IdemByKey; meanwhile a keyed
	// commit runs the upsert unprepared.
	s.idemStmts(ctx)
	if opts.SecretKey != nil {
		if s.aead, err = newAEAD(opts.SecretKey); err != nil {
			s.db.Close()
			return nil, err
		}
		if s.sealed, err = s.sealPlaintextSecrets(ctx); err != nil {
			s.db.Close()
			return nil, err
		}
	}
	return s, nil
}

// SealedAtOpen is how many rows (hooks, effects) Open found with
// plaintext secrets (hook secrets, target URL queries) and encrypted.
func (s *DB) SealedAtOpen() int { return s.sealed }

// restrictFiles creates path (mode 0600) when missing and sets every
// existing file of paths to 0600.
func restrictFiles(path string, paths ...string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("create metadata file: %w", err)
	}
	f.Close()
	for _, p := range paths {
		if err := os.Chmod(p, 0o600); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("restrict %s to its owner: %w", p, err)
		}
	}
	return nil
}

// Dialect returns "sqlite" or "postgres".
func (s *DB) Dialect() string { return s.dialect }

// SQL exposes the handle for tests that tamper with rows on purpose.
func (s *DB) SQL() *sql.DB { return s.db }

// Close closes the connection pool.
func (s *DB) Close() error {
	s.closeStmts()
	return s.db.Close()
}

// Ping checks the database answers.
func (s *DB) Ping(ctx context.Context) (err error) {
	ctx, span := s.start(ctx, "Ping")
	defer func() { err = end(span, err) }()
	return s.db.PingContext(ctx)
}

// migrator returns a golang-migrate instance and the function that
// releases it. On PostgreSQL the driver takes a connection of the pool it
// is given and keeps it until Close, which also closes that pool: it gets
// a one-connection pool of its own, closed after use, so the store's pool
// keeps every connection (the store's held one connection of its 20 for
// good per call before).
func (s *DB) migrator() (*migrate.Migrate, func(), error) {
	src, err := migrations.FS(s.dialect)
	if err != nil {
		return nil, nil, err
	}
	source, err := iofs.New(src, ".")
	if err != nil {
		return nil, nil, fmt.Errorf("migration source: %w", err)
	}
	if s.dialect == "postgres" {
		own, err := sql.Open("pgx", s.dsn)
		if err != nil {
			return nil, nil, fmt.Errorf("open postgres for migrations: %w", err)
		}
		own.SetMaxOpenConns(1)
		drv, err := migratepgx.WithInstance(own, &migratepgx.Config{})
		if err != nil {
			own.Close()
			return nil, nil, fmt.Errorf("migration driver: %w", err)
		}
		m, err := migrate.NewWithInstance("iofs", source, "pgx5", drv)
		if err != nil {
			drv.Close()
			return nil, nil, err
		}
		return m, func() { m.Close() }, nil
	}
	// The SQLite driver holds no connection (and its Close would close
	// the store's pool): nothing to release.
	drv, err := migratesqlite.WithInstance(s.db, &migratesqlite.Config{})
	if err != nil {
		return nil, nil, fmt.Errorf("migration driver: %w", err)
	}
	m, err := migrate.NewWithInstance("iofs", source, "sqlite", drv)
	return m, func() {}, err
}

// SchemaVersion returns the applied schema version (0 when empty).
func (s *DB) SchemaVersion() (uint, bool, error) {
	m, release, err := s.migrator()
	if err != nil {
		return 0, false, err
	}
	defer release()
	v, dirty, err := m.Version()
	if errors.Is(err, migrate.ErrNilVersion) {
		return 0, false, nil
	}
	return v, dirty, err
}

// Migrate applies pending migrations; no change is not an error.
func (s *DB) Migrate() error { return s.checkSchema(true) }

func (s *DB) checkSchema(apply bool) error {
	m, release, err := s.migrator()
	if err != nil {
		return err
	}
	defer release()
	latest := migrations.Latest(s.dialect)
	v, dirty, err := m.Version()
	if err != nil && !errors.Is(err, migrate.ErrNilVersion) {
		return fmt.Errorf("read schema version: %w", err)
	}
	if v > latest {
		return fmt.Errorf("metadata schema version %d is newer than this lockstep binary knows (%d): run a newer lockstep, or restore a backup", v, latest)
	}
	if dirty {
		return fmt.Errorf("metadata schema version %d is dirty (a migration failed half-way): fix the database by hand, then force the version with golang-migrate", v)
	}
	if !apply {
		if v < latest {
			return fmt.Errorf("metadata schema version %d is older than this binary needs (%d): run `lockstep migrate`", v, latest)
		}
		return nil
	}
	if err := m.Up(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return fmt.Errorf("migrate metadata schema: %w", err)
	}
	return nil
}

// call is the span of one store call and the operation it names in errors.
type call struct {
	trace.Span
	op string // "sqlstore.CreateRepo"
}

// start opens a span for a store call.
func (s *DB) start(ctx context.Context, name string) (context.Context, *call) {
	ctx, span := s.tracer.Start(ctx, "store."+name, trace.WithAttributes(attribute.String("db.system", s.dialect)))
	return ctx, &call{Span: span, op: "sqlstore." + name}
}

// end records err on the call's span and translates it.
func end(c *call, err error) error {
	err = translate(c.op, err)
	if code := lockstep.ErrorCode(err); code == lockstep.EINTERNAL || code == lockstep.EUNAVAILABLE {
		c.RecordError(err)
		c.SetStatus(codes.Error, err.Error())
	}
	c.End()
	return err
}

// translate turns driver errors into application errors, here and nowhere
// else, keeping the driver error as the cause (for the logs) and naming op:
//
//   - an outage of the database (connection refused, closed or reset,
//     timeouts, the server shutting down, the database gone, a full disk,
//     I/O errors) becomes unavailable, so that clients see 503 and retry
//     instead of a 500 that looks like a bug;
//   - a unique violation no method translated itself becomes
//     already_exists;
//   - no rows no method translated itself becomes not_found;
//   - text PostgreSQL cannot hold (a NUL character, invalid UTF-8) becomes
//     invalid_argument (SQLite stores it);
//   - anything else becomes internal.
//
// An *Error a method returned keeps its code and message and gets op.
func translate(op string, err error) error {
	if err == nil {
		return nil
	}
	var ae *lockstep.Error
	if errors.As(err, &ae) {
		if ae.Op != "" {
			return err
		}
		if top, ok := err.(*lockstep.Error); ok {
			return top.WithOp(op)
		}
		return &lockstep.Error{Op: op, Code: ae.Code, Message: ae.Message, Details: ae.Details, Err: err}
	}
	switch {
	case isOutage(err):
		return lockstep.E(op, lockstep.EUNAVAILABLE, "the metadata database is unavailable; retry later", err)
	case isUnique(err):
		return lockstep.E(op, lockstep.ECONFLICT, "already exists", err)
	case errors.Is(err, sql.ErrNoRows):
		return lockstep.E(op, lockstep.ENOTFOUND, "not found", err)
	case isBadText(err):
		return lockstep.E(op, lockstep.EINVALID, "a text value holds a NUL character (U+0000) or invalid UTF-8, which the metadata database cannot store or search", err)
	}
	return lockstep.E(op, lockstep.EINTERNAL, "internal error", err)
}

// isBadText reports whether PostgreSQL refused a text value a client sent:
// a NUL character or a byte sequence that is not UTF-8 (22021
// character_not_in_repertoire, 22P05 untranslatable_character). That is
// the client's input, not a fault of the server.
func isBadText(err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && (pg.Code == "22021" || pg.Code == "22P05")
}

func isOutage(err error) bool {
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		switch {
		case strings.HasPrefix(pg.Code, "08"), // connection exception
			strings.HasPrefix(pg.Code, "53"), // insufficient resources: disk full, out of memory, too many connections
			strings.HasPrefix(pg.Code, "57"), // operator intervention: shutdown, terminated, cancelled by timeout
			strings.HasPrefix(pg.Code, "58"), // system error: I/O
			pg.Code == "3D000":               // the database does not exist (dropped)
			return true
		}
		return false
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_FULL, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_BUSY,
			sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_NOMEM:
			return true
		}
		return false
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	switch {
	case errors.As(err, &ce), errors.As(err, &ne), pgconn.Timeout(err),
		errors.Is(err, driver.ErrBadConn), errors.Is(err, sql.ErrConnDone),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT), errors.Is(err, syscall.EROFS), errors.Is(err, syscall.EIO):
		return true
	}
	// database/sql's errDBClosed is not exported.
	return strings.Contains(err.Error(), "sql: database is closed")
}

// because is lockstep.Errorf keeping the driver's error as the cause (for
// the logs; clients see code and message only).
func because(cause error, code, format string, args ...any) *lockstep.Error {
	e := lockstep.Errorf(code, format, args...)
	e.Err = cause
	return e
}

// isUnique reports whether err is a unique-constraint violation.
func isUnique(err error) bool {
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		return pg.Code == "23505"
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		return se.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE || se.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY
	}
	return false
}

func micros(t time.Time) int64 { return t.UTC().UnixMicro() }

func fromMicros(v int64) time.Time { return time.UnixMicro(v).UTC() }

func fromNullMicros(v sql.NullInt64) *time.Time {
	if !v.Valid {
		return nil
	}
	t := fromMicros(v.Int64)
	return &t
}

// inTx runs fn in a transaction, committing on success.
func (s *DB) inTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		s.hooks.done(tx, false)
		return err
	}
	if err := tx.Commit(); err != nil {
		s.hooks.done(tx, false)
		return fmt.Errorf("commit: %w", err)
	}
	s.hooks.done(tx, true)
	return nil
}
