package dbbranch

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockstep-hq/lockstep"
)

const defaultTestURL = "postgres://postgres@127.0.0.1:5432/postgres"

func testURL() string {
	if u := os.Getenv("LOCKSTEP_TEST_POSTGRES_URL"); u != "" {
		return u
	}
	return defaultTestURL
}

func randHex(n int) string {
	b := make([]byte, (n+1)/2)
	rand.Read(b)
	return hex.EncodeToString(b)[:n]
}

// mustAdmin connects to the test server as the admin, failing (never
// skipping) when it is unreachable.
func mustAdmin(tb testing.TB) *pgx.Conn {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, testURL())
	if err != nil {
		tb.Fatalf("dbbranch tests need PostgreSQL 15 at %s (set LOCKSTEP_TEST_POSTGRES_URL): %v", testURL(), err)
	}
	tb.Cleanup(func() { c.Close(context.Background()) })
	return c
}

type fixture struct {
	m        *Manager
	admin    *pgx.Conn
	prefix   string
	template string // the user's template database
}

// mustFixture makes a Manager with a unique prefix and a 10-table template
// database, and registers a cleanup that drops every database and role
// with that prefix and then checks none is left.
func mustFixture(tb testing.TB, cfg Config) *fixture {
	tb.Helper()
	admin := mustAdmin(tb)
	f := &fixture{admin: admin, prefix: "lt" + randHex(4)}
	f.template = f.prefix + "tpl"
	tb.Cleanup(func() { cleanupPrefix(tb, admin, f.prefix) })
	mustCreateTemplate(tb, admin, f.template)
	cfg.AdminURL = testURL()
	cfg.Prefix = f.prefix
	if cfg.Secret == nil {
		cfg.Secret = []byte("test secret")
	}
	m, err := New(context.Background(), cfg)
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	tb.Cleanup(m.Close) // runs before cleanupPrefix (LIFO)
	f.m = m
	return f
}

func cleanupPrefix(tb testing.TB, admin *pgx.Conn, prefix string) {
	tb.Helper()
	ctx := context.Background()
	like := strings.ReplaceAll(prefix, "_", `\_`) + "%"
	rows, err := admin.Query(ctx, "SELECT datname FROM pg_database WHERE datname LIKE $1 AND datistemplate AND datconnlimit <> -2", like)
	if err != nil {
		tb.Errorf("cleanup: %v", err)
		return
	}
	tpls, _ := pgx.CollectRows(rows, pgx.RowTo[string])
	for _, d := range tpls {
		admin.Exec(ctx, "ALTER DATABASE "+ident(d)+" IS_TEMPLATE false")
	}
	rows, err = admin.Query(ctx, "SELECT datname FROM pg_database WHERE datname LIKE $1", like)
	if err != nil {
		tb.Errorf("cleanup: %v", err)
		return
	}
	dbs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		tb.Errorf("cleanup: %v", err)
		return
	}
	for _, d := range dbs {
		if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+ident(d)+" WITH (FORCE)"); err != nil {
			tb.Errorf("cleanup: drop %s: %v", d, err)
		}
	}
	rows, err = admin.Query(ctx, "SELECT rolname FROM pg_roles WHERE rolname LIKE $1 ORDER BY rolname DESC", like)
	if err != nil {
		tb.Errorf("cleanup: %v", err)
		return
	}
	roles, _ := pgx.CollectRows(rows, pgx.RowTo[string])
	for _, r := range roles {
		if _, err := admin.Exec(ctx, "DROP ROLE IF EXISTS "+ident(r)); err != nil {
			tb.Errorf("cleanup: drop role %s: %v", r, err)
		}
	}
	var left int
	if err := admin.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_database WHERE datname LIKE $1) + (SELECT count(*) FROM pg_roles WHERE rolname LIKE $1)`, like).Scan(&left); err != nil {
		tb.Errorf("cleanup check: %v", err)
	} else if left != 0 {
		tb.Errorf("cleanup: %d databases/roles with prefix %s remain", left, prefix)
	}
}

// mustCreateTemplate creates a throwaway template: 10 tables (serial keys,
// a foreign key, an index each, a few rows), a view and a function, all
// owned by the admin, as a user's schema usually is.
func mustCreateTemplate(tb testing.TB, admin *pgx.Conn, name string) {
	tb.Helper()
	ctx := context.Background()
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+ident(name)); err != nil {
		tb.Fatalf("create template: %v", err)
	}
	cc, _ := pgx.ParseConfig(testURL())
	cc.Database = name
	c, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		tb.Fatalf("connect template: %v", err)
	}
	defer c.Close(ctx)
	var b strings.Builder
	for i := 0; i < 10; i++ {
		fmt.Fprintf(&b, "CREATE TABLE t%d (id serial PRIMARY KEY, name text NOT NULL, n int, created timestamptz DEFAULT now()%s);\n",
			i, map[bool]string{true: fmt.Sprintf(", parent int REFERENCES t%d(id)", i-1), false: ""}[i > 0])
		fmt.Fprintf(&b, "CREATE INDEX t%d_name ON t%d(name);\n", i, i)
		fmt.Fprintf(&b, "INSERT INTO t%d (name, n) SELECT 'row' || g, g FROM generate_series(1, 10) g;\n", i)
	}
	b.WriteString("CREATE VIEW v0 AS SELECT id, name FROM t0;\n")
	b.WriteString("CREATE FUNCTION twice(int) RETURNS int LANGUAGE sql AS 'SELECT $1 * 2';\n")
	b.WriteString("CREATE TYPE mood AS ENUM ('ok', 'sad');\n")
	if _, err := c.Exec(ctx, b.String()); err != nil {
		tb.Fatalf("template schema: %v", err)
	}
}

func mustConnect(tb testing.TB, dsn string) *pgx.Conn {
	tb.Helper()
	c, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		tb.Fatalf("connect %s: %v", dsn, err)
	}
	tb.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func mustExec(tb testing.TB, c *pgx.Conn, q string, args ...any) {
	tb.Helper()
	if _, err := c.Exec(context.Background(), q, args...); err != nil {
		tb.Fatalf("%s: %v", q, err)
	}
}

func countRows(tb testing.TB, dsn, table string) int {
	tb.Helper()
	c := mustConnect(tb, dsn)
	defer c.Close(context.Background())
	var n int
	if err := c.QueryRow(context.Background(), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		tb.Fatalf("count %s: %v", table, err)
	}
	return n
}

func wantCode(tb testing.TB, err error, code string) {
	tb.Helper()
	if got := lockstep.ErrorCode(err); got != code {
		tb.Fatalf("want %s, got %s (%v)", code, got, err)
	}
}

func must[T any](tb testing.TB) func(T, error) T {
	return func(v T, err error) T {
		tb.Helper()
		if err != nil {
			tb.Fatal(err)
		}
		return v
	}
}

func mustOK(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
}

func waitIdle(tb testing.TB, m *Manager) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := m.WaitIdle(ctx); err != nil {
		tb.Fatalf("wait for background refills: %v", err)
	}
	if s := m.Stats(); s.RefillErrors > 0 {
		tb.Fatalf("background refill failed: %s", s.LastRefillError)
	}
}
