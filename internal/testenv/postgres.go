package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// DefaultPostgresURL is the admin URL used when LOCKSTEP_TEST_POSTGRES_URL is
// unset.
const DefaultPostgresURL = "postgres://postgres@127.0.0.1:5432/postgres"

// installHint tells a developer how to get the services these helpers need.
const installHint = "run the tests through scripts/test, which starts throwaway instances; " +
	"or install postgresql and redis-server (apt-get install -y postgresql redis-server)"

// dbPrefix starts the name of every database MustPostgresDB creates, so that
// leftovers of a killed test run are easy to find and drop.
const dbPrefix = "lockstep_test_"

// PostgresURL returns the admin URL of the test Postgres server, from
// LOCKSTEP_TEST_POSTGRES_URL or DefaultPostgresURL. It fails the test if the
// URL does not parse; it does not connect.
func PostgresURL(tb testing.TB) string {
	tb.Helper()
	u := os.Getenv("LOCKSTEP_TEST_POSTGRES_URL")
	if u == "" {
		u = DefaultPostgresURL
	}
	if _, err := pgx.ParseConfig(u); err != nil {
		tb.Fatalf("testenv: LOCKSTEP_TEST_POSTGRES_URL %q: %v", u, err)
	}
	return u
}

// MustPostgresDB creates a new, empty database with a unique name
// (lockstep_test_<hex>) on the test server and returns its URL. The database
// is dropped WITH (FORCE) when the test ends, so open connections do not keep
// it alive. If the server is unreachable the test fails with instructions.
func MustPostgresDB(tb testing.TB) string {
	tb.Helper()
	admin := PostgresURL(tb)
	name := dbPrefix + randomHex(tb, 8)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		tb.Fatalf("testenv: cannot reach Postgres at %s: %v\n%s", redact(admin), err, hint("postgres", admin, installHint))
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		tb.Fatalf("testenv: create database %s: %v", name, err)
	}
	tb.Cleanup(func() { dropDB(tb, admin, name) })

	u, err := url.Parse(admin)
	if err != nil {
		// pgx also accepts key=value DSNs; only URLs can be rewritten.
		tb.Fatalf("testenv: LOCKSTEP_TEST_POSTGRES_URL must be a postgres:// URL: %v", err)
	}
	u.Path = "/" + name
	return u.String()
}

// dropDB drops a test database. It reports failures with tb.Errorf rather
// than Fatalf because it runs during cleanup.
// The timeout is generous: DROP DATABASE waits for a checkpoint, which on
// a machine busy copying template databases (CI saw 30 s run out) is slow.
func dropDB(tb testing.TB, admin, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		tb.Errorf("testenv: drop database %s: connect: %v", name, err)
		return
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		tb.Errorf("testenv: drop database %s: %v", name, err)
	}
}

// randomHex returns n random bytes hex-encoded.
func randomHex(tb testing.TB, n int) string {
	tb.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		tb.Fatalf("testenv: random: %v", err)
	}
	return hex.EncodeToString(b)
}

// redact hides the password of a URL for error messages.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}
