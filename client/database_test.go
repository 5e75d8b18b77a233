package client_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/api"
	"github.com/lockstep-hq/lockstep/client"
	"github.com/lockstep-hq/lockstep/dbbranch"
)

func postgresURL() string {
	if u := os.Getenv("LOCKSTEP_TEST_POSTGRES_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/postgres"
}

// TestDatabaseMethods binds, shows and refreshes a template on a real
// PostgreSQL server (LOCKSTEP_TEST_POSTGRES_URL), and reads a
// workspace's branch DSN. Every database and role it made is dropped.
func TestDatabaseMethods(t *testing.T) {
	ctx := context.Background()
	adm, err := pgx.Connect(ctx, postgresURL())
	if err != nil {
		t.Fatalf("this test needs PostgreSQL at %s (set LOCKSTEP_TEST_POSTGRES_URL): %v", postgresURL(), err)
	}
	t.Cleanup(func() { adm.Close(context.Background()) })
	var b [2]byte
	rand.Read(b[:])
	prefix := "lc" + hex.EncodeToString(b[:])
	tpl := prefix + "tpl"
	if _, err := adm.Exec(ctx, "CREATE DATABASE "+tpl); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dropPrefix(t, adm, prefix) })
	m, err := dbbranch.New(ctx, dbbranch.Config{AdminURL: postgresURL(), Prefix: prefix, Secret: []byte("client test secret")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close) // before dropPrefix (cleanups run last first)
	s, err := startServerWith(t.TempDir(), dbbranch.Brancher{M: m})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	admin := mustClient(t, s, s.Admin)
	agent := mustClient(t, s, s.Agent)
	if _, err := admin.CreateRepo(ctx, "base", "main"); err != nil {
		t.Fatal(err)
	}

	db, err := admin.BindDatabase(ctx, "base", tpl)
	if err != nil || db.Repo != "base" || db.Template != tpl {
		t.Fatalf("bind %+v: %v", db, err)
	}
	_, err = admin.BindDatabase(ctx, "base", prefix+"nosuch")
	wantCode(t, "BindDatabase of a missing template", err, lockstep.ENOTFOUND)
	_, err = agent.BindDatabase(ctx, "base", tpl)
	wantCode(t, "BindDatabase as an agent", err, lockstep.EFORBIDDEN)
	if got, err := admin.Database(ctx, "base"); err != nil || got.Template != tpl {
		t.Fatalf("database %+v: %v", got, err)
	}
	_, err = admin.Database(ctx, "nope")
	wantCode(t, "Database of an unknown repo", err, lockstep.ENOTFOUND)
	sameWire[api.Database](t, admin, "/api/v1/repos/base/database")
	if got, err := admin.RefreshDatabase(ctx, "base"); err != nil || got.Template != tpl {
		t.Fatalf("refresh %+v: %v", got, err)
	}
	_, err = admin.RefreshDatabase(ctx, "nope")
	wantCode(t, "RefreshDatabase of an unknown repo", err, lockstep.ENOTFOUND)

	if _, err := agent.Fork(ctx, "base", "ws"); err != nil {
		t.Fatal(err)
	}
	// The branch is made in the background after the fork; its DSN
	// appears once it exists.
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := agent.Database(ctx, "ws")
		if err == nil && strings.HasPrefix(got.DSN, "postgres") && got.Database != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("workspace database never ready: %+v %v", got, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func dropPrefix(t *testing.T, adm *pgx.Conn, prefix string) {
	ctx := context.Background()
	like := prefix + "%"
	rows, err := adm.Query(ctx, "SELECT datname FROM pg_database WHERE datname LIKE $1", like)
	if err != nil {
		t.Errorf("cleanup: %v", err)
		return
	}
	dbs, _ := pgx.CollectRows(rows, pgx.RowTo[string])
	for _, d := range dbs {
		adm.Exec(ctx, `ALTER DATABASE "`+d+`" IS_TEMPLATE false`)
		if _, err := adm.Exec(ctx, `DROP DATABASE IF EXISTS "`+d+`" WITH (FORCE)`); err != nil {
			t.Errorf("cleanup: drop %s: %v", d, err)
		}
	}
	rows, err = adm.Query(ctx, "SELECT rolname FROM pg_roles WHERE rolname LIKE $1 ORDER BY rolname DESC", like)
	if err != nil {
		t.Errorf("cleanup: %v", err)
		return
	}
	roles, _ := pgx.CollectRows(rows, pgx.RowTo[string])
	for _, r := range roles {
		if _, err := adm.Exec(ctx, `DROP ROLE IF EXISTS "`+r+`"`); err != nil {
			t.Errorf("cleanup: drop role %s: %v", r, err)
		}
	}
}

// TestBranchingOffIsFinal: issue 22 item 6. On a server without database
// branching, asking for a workspace's database is answered at once with
// not_configured (501) and never retried; a not_configured that a proxy
// turned into a 503 is not retried either.
func TestBranchingOffIsFinal(t *testing.T) {
	ctx := context.Background()
	s := mustServer(t)
	admin := mustClient(t, s, s.Admin)
	if _, err := admin.CreateRepo(ctx, "base", "main"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Fork(ctx, "base", "ws"); err != nil {
		t.Fatal(err)
	}
	var retries int
	admin.OnRetry = func(string, string, int, time.Duration, error) { retries++ }
	_, err := admin.Database(ctx, "ws")
	wantCode(t, "Database without branching", err, lockstep.ENOTCONFIGURED)
	var ae *client.Error
	if !errors.As(err, &ae) || ae.Status != http.StatusNotImplemented {
		t.Fatalf("Database without branching: %v, want HTTP 501", err)
	}
	if retries != 0 {
		t.Fatalf("not_configured was retried %d times", retries)
	}

	var hits atomic.Int32
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "5")
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte(`{"error":{"code":"not_configured","message":"database branching is off"}}`))
	}))
	defer proxy.Close()
	c := client.New(proxy.URL, s.Admin)
	_, err = c.Database(ctx, "ws")
	wantCode(t, "not_configured behind a proxy's 503", err, lockstep.ENOTCONFIGURED)
	if n := hits.Load(); n != 1 {
		t.Fatalf("not_configured in a 503 was asked %d times, want 1", n)
	}
}
