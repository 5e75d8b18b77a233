package redislock_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep/internal/testenv"
	"github.com/lockstep-hq/lockstep/redislock"
)

// Two lockers (two "replicas") on a real Redis never hold the same lock at
// once, and every waiter gets it eventually.
func TestMutualExclusion(t *testing.T) {
	rdb, prefix := testenv.MustRedis(t)
	a := redislock.New(rdb, prefix, time.Second)
	b := redislock.New(rdb, prefix, time.Second)
	var inside, max, total atomic.Int32
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		l := a
		if i%2 == 1 {
			l = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			unlock, err := l.Lock(context.Background(), "lane")
			if err != nil {
				t.Error(err)
				return
			}
			n := inside.Add(1)
			if n > max.Load() {
				max.Store(n)
			}
			time.Sleep(2 * time.Millisecond)
			inside.Add(-1)
			total.Add(1)
			unlock()
		}()
	}
	wg.Wait()
	if max.Load() != 1 || total.Load() != 20 {
		t.Fatalf("max holders %d (want 1), total %d (want 20)", max.Load(), total.Load())
	}
}

// A holder that outlives the TTL keeps its lock (renewal), and a cancelled
// waiter returns.
func TestRenewalAndCancel(t *testing.T) {
	rdb, prefix := testenv.MustRedis(t)
	l := redislock.New(rdb, prefix, 300*time.Millisecond)
	unlock, err := l.Lock(context.Background(), "x")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(700 * time.Millisecond) // > 2 TTLs
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := l.Lock(ctx, "x"); err == nil {
		t.Fatal("took a lock that is still held (renewal failed)")
	}
	unlock()
	u2, err := l.Lock(context.Background(), "x")
	if err != nil {
		t.Fatal(err)
	}
	u2()
}
