package e2e

// Helpers of the checkpoint and `lockstep run` tests (run_*, tour_, cli_oplog_run_checkout).

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/lockstep-hq/lockstep/internal/e2ekit"
)

// startRunServer runs `lockstep serve` with extra environment variables.
func startRunServer(t *testing.T, env ...string) *server {
	t.Helper()
	return &server{e2ekit.StartServer(t, e2ekit.ServerOpts{Env: env})}
}

// api calls /api/v1+path, requires status want and returns the body as a
// JSON object (nil when it is not one).
func (s *server) api(t *testing.T, key, method, path string, body any, want int) map[string]any {
	t.Helper()
	r := s.Call(t, method, "/api/v1"+path, key, body, "")
	if r.Status != want {
		t.Fatalf("%s %s: %s (want %d)", method, path, r, want)
	}
	var m map[string]any
	json.Unmarshal(r.Body, &m)
	return m
}

// cli runs the lockstep binary as a client (with its own cache
// directory); on failure the output includes stderr.
func (s *server) cli(t *testing.T, key string, args ...string) (string, error) {
	t.Helper()
	r := s.CLIEnv(t, key, "", []string{"XDG_CACHE_HOME=" + t.TempDir()}, args...)
	if r.Code != 0 {
		return r.Stdout + r.Stderr, fmt.Errorf("lockstep %s: exit status %d", args[0], r.Code)
	}
	return r.Stdout, nil
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// dropPrefix removes every database and role a test's server created.
func dropPrefix(t *testing.T, adminURL, prefix string) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		t.Errorf("cleanup: %v", err)
		return
	}
	defer conn.Close(ctx)
	rows, _ := conn.Query(ctx, `SELECT datname FROM pg_database WHERE datname LIKE $1`, prefix+"\\_%")
	dbs, _ := pgx.CollectRows(rows, pgx.RowTo[string])
	// Templates cannot be dropped; an invalid database (a drop cut short)
	// cannot be altered, only dropped.
	conn.Exec(ctx, `UPDATE pg_database SET datistemplate = false WHERE datname LIKE $1`, prefix+"\\_%")
	// Concurrently, on a few connections: each DROP DATABASE waits for a
	// checkpoint, and concurrent drops share one (a test that checkpointed
	// many runs leaves one database per checkpoint).
	var wg sync.WaitGroup
	next := make(chan string)
	for w := 0; w < min(len(dbs), 8); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := pgx.Connect(ctx, adminURL)
			if err != nil {
				t.Errorf("cleanup: %v", err)
				for range next {
				}
				return
			}
			defer c.Close(ctx)
			for d := range next {
				if _, err := c.Exec(ctx, `DROP DATABASE IF EXISTS `+pgx.Identifier{d}.Sanitize()+` WITH (FORCE)`); err != nil {
					t.Errorf("cleanup drop %s: %v", d, err)
				}
			}
		}()
	}
	for _, d := range dbs {
		next <- d
	}
	close(next)
	wg.Wait()
	rows, _ = conn.Query(ctx, `SELECT rolname FROM pg_roles WHERE rolname LIKE $1`, prefix+"\\_%")
	roles, _ := pgx.CollectRows(rows, pgx.RowTo[string])
	for _, r := range roles {
		if _, err := conn.Exec(ctx, `DROP ROLE IF EXISTS `+pgx.Identifier{r}.Sanitize()); err != nil {
			t.Errorf("cleanup drop role %s: %v", r, err)
		}
	}
}
