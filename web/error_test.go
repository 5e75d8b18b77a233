package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/auth"
	"github.com/lockstep-hq/lockstep/checkpoints"
	"github.com/lockstep-hq/lockstep/gate"
	"github.com/lockstep-hq/lockstep/gitstore"
	"github.com/lockstep-hq/lockstep/internal/testenv"
	"github.com/lockstep-hq/lockstep/redislock"
	"github.com/lockstep-hq/lockstep/repositories"
	"github.com/lockstep-hq/lockstep/sqlstore"
	"github.com/lockstep-hq/lockstep/telemetry"
	"github.com/lockstep-hq/lockstep/web"
	"github.com/lockstep-hq/lockstep/workspaces"
)

// outageServer is a server on a Postgres store (and, when rdb is set, a
// Redis for the landing lock and readiness) whose log is kept.
type outageServer struct {
	srv          *httptest.Server
	db           *sqlstore.DB
	log          *testenv.SyncBuffer
	admin, agent string
}

func mustOutageServer(t *testing.T, rdb *redis.Client, prefix string) *outageServer {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	db, err := sqlstore.Open(ctx, testenv.MustPostgresDB(t), sqlstore.Options{Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	keys := auth.New(db, nil)
	_, admin, _ := keys.Create(ctx, auth.System, "admin", lockstep.RoleAdmin)
	_, agent, _ := keys.Create(ctx, auth.System, "agent", lockstep.RoleAgent)
	m := telemetry.NewMetrics()
	log := &testenv.SyncBuffer{}
	logger := slog.New(slog.NewTextHandler(log, nil))
	repos := repositories.New(repositories.Config{Objects: gitstore.Local{}, DataDir: dir}, db, logger, m, nil)
	t.Cleanup(func() { repos.Close() })
	g := gate.New(gate.Config{}, db, repos, logger, m, nil)
	s := &web.Server{Config: web.Config{MaxJSONBytes: 1 << 20}, Store: db, Keys: keys, Metrics: m, Repos: repos, Workspaces: workspaces.New(db, repos, nil, logger, m, nil), Logger: logger,
		Gate: g, Checkpoints: checkpoints.New(db, repos, nil, logger, m, nil)}
	if rdb != nil {
		s.Redis = rdb
		g.Locker = redislock.New(rdb, prefix, 10*time.Second)
	}
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return &outageServer{srv: srv, db: db, log: log, admin: admin, agent: agent}
}

// call sends a request and returns the status, the raw body and the
// request id.
func (o *outageServer) call(t *testing.T, method, path, key, body string) (int, string, string) {
	t.Helper()
	req, _ := http.NewRequest(method, o.srv.URL+path, strings.NewReader(body))
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header.Get("X-Request-Id")
}

// closeAndLog waits for every request to finish (its log line written) and
// returns the log.
func (o *outageServer) closeAndLog() string {
	o.srv.Close()
	return o.log.String()
}

// wantSafe fails if the response shows any of the driver's words, and
// unless it is the JSON envelope with code.
func wantSafe(t *testing.T, what string, status int, body string, wantStatus int, code string, driverText ...string) {
	t.Helper()
	var env struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &env); err != nil {
		t.Fatalf("%s: not the JSON envelope: %q", what, body)
	}
	if status != wantStatus || env.Error.Code != code || env.Error.Message == "" {
		t.Fatalf("%s: %d %s, want %d %s", what, status, body, wantStatus, code)
	}
	for _, d := range driverText {
		if strings.Contains(strings.ToLower(body), strings.ToLower(d)) {
			t.Fatalf("%s: the response shows driver text %q: %s", what, d, body)
		}
	}
}

// wantLogged fails unless one log line carries the request id and every
// piece of want (the operation and the cause).
func wantLogged(t *testing.T, log, requestID string, want ...string) {
	t.Helper()
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, "request_id="+requestID) {
			continue
		}
		for _, w := range want {
			if !strings.Contains(line, w) {
				t.Fatalf("the log line of request %s lacks %q:\n%s", requestID, w, line)
			}
		}
		return
	}
	t.Fatalf("no log line with request id %s in:\n%s", requestID, log)
}

// A database error inside a route (a table gone: the driver names it and
// quotes SQLSTATE) is a 500 that shows nothing of it; the log has the
// operation and the cause.
func TestDatabaseErrorTextStaysInTheLog(t *testing.T) {
	o := mustOutageServer(t, nil, "")
	if st, b, _ := o.call(t, "POST", "/api/v1/repos", o.admin, `{"name":"app"}`); st != 201 {
		t.Fatalf("create repo: %d %s", st, b)
	}
	if _, err := o.db.SQL().Exec(`DROP TABLE checkpoints`); err != nil {
		t.Fatal(err)
	}
	st, body, id := o.call(t, "GET", "/api/v1/repos/app/checkpoints", o.admin, "")
	wantSafe(t, "checkpoints with the table gone", st, body, 500, lockstep.EINTERNAL, "checkpoints\"", "relation", "SQLSTATE", "42P01", "sqlstore")
	wantLogged(t, o.closeAndLog(), id, "error_op=sqlstore.Checkpoints", "42P01")
}

// A closed pool (the database went away) is a 503 with a safe message.
func TestClosedPoolIsUnavailableWithoutDriverText(t *testing.T) {
	o := mustOutageServer(t, nil, "")
	o.db.Close()
	st, body, id := o.call(t, "GET", "/api/v1/repos", o.admin, "")
	wantSafe(t, "a route with the pool closed", st, body, 503, lockstep.EUNAVAILABLE, "sql:", "database is closed", "sqlstore")
	st, rbody, rid := o.call(t, "GET", "/readyz", "", "")
	if st != 503 || strings.Contains(rbody, "database is closed") || !strings.Contains(rbody, `"store":"unavailable"`) {
		t.Fatalf("readyz with the pool closed: %d %s", st, rbody)
	}
	log := o.closeAndLog()
	wantLogged(t, log, id, "error_op=sqlstore.", "sql: database is closed")
	wantLogged(t, log, rid, "sql: database is closed")
}

// mustThrowawayRedis starts a redis-server of its own on a free port (the
// shared one is never stopped) and returns a client and a stop function.
func mustThrowawayRedis(t *testing.T) (*redis.Client, func()) {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server not installed (apt-get install -y redis-server): %v", err)
	}
	port := testenv.FreePort(t)
	cmd := exec.Command(bin, "--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", t.TempDir())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cmd.Process.Kill()
			cmd.Wait()
		})
	}
	t.Cleanup(stop)
	rdb := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port), MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	for i := 0; ; i++ {
		if err := rdb.Ping(context.Background()).Err(); err == nil {
			break
		} else if i == 200 {
			t.Fatalf("throwaway redis-server on %d did not answer: %v", port, err)
		}
		time.Sleep(25 * time.Millisecond)
	}
	return rdb, stop
}

// Redis stopped: a promote (which takes the landing lock in Redis) and
// readiness answer 503 without the client library's text (host, port,
// "connection refused"); the log has it.
func TestRedisErrorTextStaysInTheLog(t *testing.T) {
	rdb, stop := mustThrowawayRedis(t)
	o := mustOutageServer(t, rdb, "lockstep_test:errors:")
	addr := rdb.Options().Addr
	if st, b, _ := o.call(t, "POST", "/api/v1/repos", o.admin, `{"name":"app"}`); st != 201 {
		t.Fatalf("create repo: %d %s", st, b)
	}
	if st, b, _ := o.call(t, "POST", "/api/v1/repos/app/forks", o.agent, `{"name":"ws"}`); st != 201 {
		t.Fatalf("fork: %d %s", st, b)
	}
	stop()
	st, body, id := o.call(t, "POST", "/api/v1/repos/ws/promote", o.agent, "")
	wantSafe(t, "promote with Redis down", st, body, 503, lockstep.EUNAVAILABLE, "refused", "dial", addr, "redis:")
	st, rbody, rid := o.call(t, "GET", "/readyz", "", "")
	if st != 503 || strings.Contains(rbody, "refused") || strings.Contains(rbody, addr) || !strings.Contains(rbody, `"redis":"unavailable"`) {
		t.Fatalf("readyz with Redis down: %d %s", st, rbody)
	}
	log := o.closeAndLog()
	wantLogged(t, log, id, "error_op=gate.Promote", "refused")
	wantLogged(t, log, rid, "refused")
}
