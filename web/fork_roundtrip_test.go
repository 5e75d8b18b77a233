package web_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/auth"
	"github.com/lockstep-hq/lockstep/client"
	"github.com/lockstep-hq/lockstep/gate"
	"github.com/lockstep-hq/lockstep/gitstore"
	"github.com/lockstep-hq/lockstep/internal/testenv"
	"github.com/lockstep-hq/lockstep/repositories"
	"github.com/lockstep-hq/lockstep/sqlstore"
	"github.com/lockstep-hq/lockstep/telemetry"
	"github.com/lockstep-hq/lockstep/web"
	"github.com/lockstep-hq/lockstep/workspaces"
)

// TestPostgresWebForkRoundTrips: a whole POST /repos/:repo/forks with an
// Idempotency-Key, counted on the wire to PostgreSQL on warm
// connections, costs two round trips: the API key's lookup, then the
// fork's transaction in one pipelined batch (the base's refs copied and
// checked against the prediction from the last fork of it, the entry
// hashed by the server, the key's record upserted with it). Before:
// three (the transaction in two batches), and before that six (the key,
// the record read, the base, its refs, the two batches). A repeat of the request is still
// answered from the record, and the same key with another body is
// refused, as when the record was read first.
func TestPostgresWebForkRoundTrips(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	dbURL, p := testenv.ProxiedPostgresDB(t)
	db, err := sqlstore.Open(ctx, dbURL, sqlstore.Options{Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	keys := auth.New(db, nil)
	admin, secret, err := keys.Create(ctx, auth.System, "admin", lockstep.RoleAdmin)
	if err != nil {
		t.Fatal(err)
	}
	m := telemetry.NewMetrics()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	repos := repositories.New(repositories.Config{Objects: gitstore.Local{}, DataDir: filepath.Join(dir, "data")}, db, logger, m, nil)
	t.Cleanup(func() { repos.Close() })
	s := &web.Server{Store: db, Keys: keys, Metrics: m, Repos: repos, Workspaces: workspaces.New(db, repos, nil, nil, m, nil), Logger: logger, Gate: gate.New(gate.Config{}, db, repos, logger, m, nil)}
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	if _, err := repos.CreateRepo(ctx, admin, "app", "main"); err != nil {
		t.Fatal(err)
	}
	if _, err := repos.EditFiles(ctx, admin, "app", []repositories.Edit{{Path: "README.md", Content: []byte("app\n")}}, repositories.WriteOptions{Branch: "main", Force: true}); err != nil {
		t.Fatal(err)
	}
	c := client.New(srv.URL, secret)
	for i := range 4 { // warm: connections, statements, the key's parent and last use
		if _, err := c.Fork(ctx, "app", fmt.Sprintf("warm-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	before := p.Turns()
	res, err := c.Fork(ctx, "app", "ws-1")
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Turns() - before; got != 2 {
		t.Errorf("one fork: %d round trips to PostgreSQL, want 2 (key, one batch)", got)
	}
	if res.BaseCommit == "" || res.ForkOf != "app" || res.Network != "app" {
		t.Fatalf("fork answer %+v", res)
	}

	post := func(key, name string) (int, string, http.Header) {
		t.Helper()
		req, _ := http.NewRequest("POST", srv.URL+"/api/v1/repos/app/forks", strings.NewReader(`{"name":"`+name+`"}`))
		req.Header.Set("Authorization", "Bearer "+secret)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header
	}
	st, first, _ := post("k-1", "ws-2")
	if st != http.StatusCreated {
		t.Fatalf("fork: %d %s", st, first)
	}
	st, again, h := post("k-1", "ws-2")
	if st != http.StatusCreated || again != first || h.Get(web.IdempotentReplayedHeader) != "true" {
		t.Fatalf("repeat: %d %s (replayed %q), want the first answer %s", st, again, h.Get(web.IdempotentReplayedHeader), first)
	}
	st, other, _ := post("k-1", "ws-3")
	if st != http.StatusUnprocessableEntity || !strings.Contains(other, "idempotency_key_reused") {
		t.Fatalf("same key, another body: %d %s, want 422", st, other)
	}
	if _, err := db.RepoByName(ctx, "ws-3"); lockstep.ErrorCode(err) != lockstep.ENOTFOUND {
		t.Fatalf("ws-3 after a refused fork: %v", err)
	}
	if v, err := db.VerifyOps(ctx); err != nil || !v.OK {
		t.Fatalf("chain: %v %+v", err, v)
	}
}
