package testenv_test

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/lockstep-hq/lockstep/internal/testenv"
)

func TestMustPostgresDBCreatesAndDrops(t *testing.T) {
	var dbURL string
	t.Run("use", func(t *testing.T) {
		dbURL = testenv.MustPostgresDB(t)
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, dbURL)
		if err != nil {
			t.Fatalf("connect to new database: %v", err)
		}
		// Leave the connection open: the drop must force it closed.
		var name string
		if err := conn.QueryRow(ctx, "SELECT current_database()").Scan(&name); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(name, "lockstep_test_") {
			t.Errorf("database name %q lacks the lockstep_test_ prefix", name)
		}
		if _, err := conn.Exec(ctx, "CREATE TABLE t (id int)"); err != nil {
			t.Fatalf("create table: %v", err)
		}
	})
	name := dbURL[strings.LastIndex(dbURL, "/")+1:]
	if i := strings.IndexByte(name, '?'); i >= 0 {
		name = name[:i]
	}

	ctx := context.Background()
	admin, err := pgx.Connect(ctx, testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	var n int
	if err := admin.QueryRow(ctx, "SELECT count(*) FROM pg_database WHERE datname = $1", name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("database %s still exists after cleanup", name)
	}
}

func TestMustPostgresDBUnique(t *testing.T) {
	a, b := testenv.MustPostgresDB(t), testenv.MustPostgresDB(t)
	if a == b {
		t.Fatalf("two calls returned the same database %s", a)
	}
}

func TestMustRedisCleansKeys(t *testing.T) {
	ctx := context.Background()
	var prefix string
	t.Run("use", func(t *testing.T) {
		client, p := testenv.MustRedis(t)
		prefix = p
		for i := range 1200 { // more than one SCAN page
			if err := client.Set(ctx, fmt.Sprintf("%sk%d", p, i), "v", time.Hour).Err(); err != nil {
				t.Fatal(err)
			}
		}
	})

	client, other := testenv.MustRedis(t)
	if other == prefix {
		t.Fatalf("two calls returned the same prefix %q", prefix)
	}
	keys, err := client.Keys(ctx, prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 0 {
		t.Errorf("%d keys with prefix %q left after cleanup", len(keys), prefix)
	}
}

func TestMustRedisKeepsOtherKeys(t *testing.T) {
	ctx := context.Background()
	client, outer := testenv.MustRedis(t)
	keep := outer + "keep"
	if err := client.Set(ctx, keep, "v", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	t.Run("inner", func(t *testing.T) {
		c, p := testenv.MustRedis(t)
		if err := c.Set(ctx, p+"x", "v", time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
	})
	if n, err := client.Exists(ctx, keep).Result(); err != nil || n != 1 {
		t.Fatalf("key %s outside the inner prefix was deleted (exists=%d, err=%v)", keep, n, err)
	}
}

// fatalRecorder captures Fatalf instead of ending the real test.
type fatalRecorder struct {
	testing.TB
	mu  sync.Mutex
	msg string
}

func (r *fatalRecorder) Helper()               {}
func (r *fatalRecorder) Cleanup(func())        {}
func (r *fatalRecorder) Errorf(string, ...any) {}
func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.mu.Lock()
	r.msg = fmt.Sprintf(format, args...)
	r.mu.Unlock()
	runtime.Goexit()
}

// runFatal runs f with a recorder and returns the Fatalf message, if any.
func runFatal(t *testing.T, f func(tb testing.TB)) string {
	r := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.msg
}

type discardLogger struct{}

func (discardLogger) Printf(context.Context, string, ...any) {}

// closedPort returns a local port nothing listens on.
func closedPort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return port
}

func TestUnreachableServicesFailWithInstructions(t *testing.T) {
	port := closedPort(t)
	t.Setenv("LOCKSTEP_TEST_POSTGRES_URL", fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?connect_timeout=2", port))
	t.Setenv("LOCKSTEP_TEST_REDIS_URL", fmt.Sprintf("redis://127.0.0.1:%d/0", port))
	t.Setenv("LOCKSTEP_TEST_HELPERS", "") // as outside scripts/test
	// The pool logs every failed dial; expected here, so keep the output clean.
	redis.SetLogger(discardLogger{})

	for name, f := range map[string]func(testing.TB){
		"postgres": func(tb testing.TB) { testenv.MustPostgresDB(tb) },
		"redis":    func(tb testing.TB) { testenv.MustRedis(tb) },
	} {
		msg := runFatal(t, f)
		if msg == "" {
			t.Errorf("%s: unreachable server did not fail the test", name)
			continue
		}
		if !strings.Contains(msg, "scripts/test") || !strings.Contains(msg, "apt-get install -y postgresql redis-server") {
			t.Errorf("%s: failure message lacks instructions: %s", name, msg)
		}
	}
}

func TestGitBinary(t *testing.T) {
	p := testenv.GitBinary(t)
	if out, err := exec.Command(p, "--version").CombinedOutput(); err != nil {
		t.Fatalf("%s --version: %v: %s", p, err, out)
	}
}

// TestChromium accepts both outcomes, since browser tests are the only users,
// but checks that the failure tells the developer what to install.
func TestChromium(t *testing.T) {
	var path string
	msg := runFatal(t, func(tb testing.TB) { path = testenv.Chromium(tb) })
	switch {
	case msg != "":
		if !strings.Contains(msg, "apt-get install -y chromium") {
			t.Errorf("failure message lacks instructions: %s", msg)
		}
	case path == "":
		t.Error("Chromium returned an empty path without failing")
	}
}

func TestFreePort(t *testing.T) {
	port := testenv.FreePort(t)
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatalf("listen on free port %d: %v", port, err)
	}
	l.Close()
}
