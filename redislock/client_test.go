package redislock_test

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockstep-hq/lockstep/internal/testenv"
	"github.com/lockstep-hq/lockstep/redislock"
)

// TestRedisDownFailsFast: issue 21 item 14. With Redis killed, a write's
// change notification and a landing-queue lock cost at most one retry of
// dials in all, then none at all for the cooldown: they fail at once with
// ErrSkipped (the degraded path: the write goes on, the promote answers
// 503) instead of go-redis's 4 attempts × 5 dials per command.
func TestRedisDownFailsFast(t *testing.T) {
	own := testenv.StartRedis(t)
	var dials atomic.Int64
	var d net.Dialer
	opt := &redis.Options{Addr: own.Addr, Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return d.DialContext(ctx, network, addr)
	}}
	rdb, br := redislock.NewClient(opt, redislock.ClientOptions{Timeout: 2 * time.Second, Cooldown: time.Hour})
	t.Cleanup(func() { rdb.Close() })
	n := redislock.NewNotifier(rdb, "lockstep_test:down:")
	ctx := context.Background()
	if err := n.Publish(ctx, "net", 1); err != nil {
		t.Fatal(err)
	}
	if br.Open() {
		t.Fatal("breaker open while Redis answers")
	}

	own.Kill()
	before := dials.Load()
	const writes = 10
	for i := range writes {
		err := n.Publish(ctx, "net", int64(2+i))
		if err == nil {
			t.Fatalf("publish %d with Redis killed succeeded", i)
		}
		if i > 0 && !errors.Is(err, redislock.ErrSkipped) {
			t.Errorf("publish %d with Redis killed: %v, want ErrSkipped (breaker open)", i, err)
		}
	}
	if got := dials.Load() - before; got > 2 {
		t.Errorf("%d publishes with Redis killed dialed %d times, want at most 2 (one command, one retry)", writes, got)
	}
	if !br.Open() {
		t.Error("breaker closed after Redis failed")
	}
	lk := redislock.New(rdb, "lockstep_test:down:", time.Minute)
	before = dials.Load()
	if _, err := lk.Lock(ctx, "lane"); !errors.Is(err, redislock.ErrSkipped) {
		t.Errorf("lock with Redis killed: %v, want ErrSkipped", err)
	}
	if got := dials.Load() - before; got != 0 {
		t.Errorf("lock with the breaker open dialed %d times", got)
	}
}

// TestBreakerCloses: once the cooldown has passed, the next command tries
// Redis again, and the client works as before when Redis is back.
func TestBreakerCloses(t *testing.T) {
	own := testenv.StartRedis(t)
	rdb, br := redislock.NewClient(&redis.Options{Addr: own.Addr}, redislock.ClientOptions{Cooldown: 100 * time.Millisecond})
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	own.Kill()
	if err := rdb.Ping(ctx).Err(); err == nil || !br.Open() {
		t.Fatalf("ping with Redis killed: %v, breaker open %v", err, br.Open())
	}
	own.Restart(t)
	var err error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if err = rdb.Ping(ctx).Err(); err == nil {
			break
		}
	}
	if err != nil || br.Open() {
		t.Fatalf("Redis back: ping %v, breaker open %v", err, br.Open())
	}
}
