package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultRedisURL is the Redis URL used when LOCKSTEP_TEST_REDIS_URL is unset.
const DefaultRedisURL = "redis://127.0.0.1:6379/0"

// RedisURL returns the URL of the test Redis server, from
// LOCKSTEP_TEST_REDIS_URL or DefaultRedisURL. It fails the test if the URL
// does not parse; it does not connect.
func RedisURL(tb testing.TB) string {
	tb.Helper()
	u := os.Getenv("LOCKSTEP_TEST_REDIS_URL")
	if u == "" {
		u = DefaultRedisURL
	}
	if _, err := redis.ParseURL(u); err != nil {
		tb.Fatalf("testenv: LOCKSTEP_TEST_REDIS_URL %q: %v", u, err)
	}
	return u
}

// MustRedis returns a connected client for the test Redis server and a key
// prefix unique to this test ("lockstep_test:<hex>:"). Tests must put every
// key they write under the prefix: when the test ends, all keys matching it
// are deleted (SCAN + DEL) and the client is closed. The database is shared,
// so the prefix is what keeps parallel tests apart; never FLUSHDB.
// If the server is unreachable the test fails with instructions.
func MustRedis(tb testing.TB) (*redis.Client, string) {
	tb.Helper()
	raw := RedisURL(tb)
	opts, err := redis.ParseURL(raw)
	if err != nil {
		tb.Fatalf("testenv: LOCKSTEP_TEST_REDIS_URL: %v", err)
	}
	client := redis.NewClient(opts)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := client.Ping(ctx).Err(); err != nil {
		client.Close()
		tb.Fatalf("testenv: cannot reach Redis at %s: %v\n%s", redact(raw), err, hint("redis", raw, installHint))
	}
	prefix := "lockstep_test:" + randomHex(tb, 8) + ":"
	tb.Cleanup(func() {
		if err := deletePrefix(client, prefix); err != nil {
			tb.Errorf("testenv: delete redis keys %s*: %v", prefix, err)
		}
		client.Close()
	})
	return client, prefix
}

// deletePrefix deletes every key starting with prefix. SCAN, unlike KEYS,
// does not block the server, which matters when the suite shares a Redis.
func deletePrefix(client *redis.Client, prefix string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var cursor uint64
	for {
		keys, next, err := client.Scan(ctx, cursor, escapeGlob(prefix)+"*", 500).Result()
		if err != nil {
			return err
		}
		if len(keys) > 0 {
			if err := client.Del(ctx, keys...).Err(); err != nil {
				return err
			}
		}
		if next == 0 {
			return nil
		}
		cursor = next
	}
}

// escapeGlob escapes the Redis MATCH metacharacters in s.
func escapeGlob(s string) string {
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '*', '?', '[', ']', '\\':
			out = append(out, '\\')
		}
		out = append(out, s[i])
	}
	return string(out)
}

// OwnRedis is a redis-server started for one test (the shared one is
// never stopped), to kill it mid-test.
type OwnRedis struct {
	Addr     string // 127.0.0.1:port
	bin, dir string
	cmd      *exec.Cmd
	once     sync.Once
}

// StartRedis starts a redis-server of this test's own on a free port,
// without persistence, waits until it answers, and kills it when the test
// ends. It fails the test if redis-server is not installed.
func StartRedis(tb testing.TB) *OwnRedis {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		tb.Fatalf("testenv: redis-server not installed: %v\n%s", err, installHint)
	}
	o := &OwnRedis{Addr: fmt.Sprintf("127.0.0.1:%d", FreePort(tb)), bin: bin, dir: tb.TempDir()}
	o.start(tb)
	return o
}

// Restart starts the server again on the same port (after Kill).
func (o *OwnRedis) Restart(tb testing.TB) {
	tb.Helper()
	o.Kill()
	o.once = sync.Once{}
	o.start(tb)
}

func (o *OwnRedis) start(tb testing.TB) {
	tb.Helper()
	_, port, _ := strings.Cut(o.Addr, ":")
	o.cmd = exec.Command(o.bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", o.dir)
	if err := o.cmd.Start(); err != nil {
		tb.Fatalf("testenv: start redis-server: %v", err)
	}
	tb.Cleanup(o.Kill)
	c := redis.NewClient(&redis.Options{Addr: o.Addr, MaxRetries: -1})
	defer c.Close()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(25 * time.Millisecond) {
		if err := c.Ping(context.Background()).Err(); err == nil {
			return
		} else if time.Now().After(deadline) {
			o.Kill()
			tb.Fatalf("testenv: redis-server on %s did not answer within 10s: %v", o.Addr, err)
		}
	}
}

// Kill stops the server (SIGKILL) and waits for it; safe to call twice.
func (o *OwnRedis) Kill() {
	o.once.Do(func() {
		o.cmd.Process.Kill()
		o.cmd.Wait()
	})
}
