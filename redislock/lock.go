// Package redislock is a small distributed mutex on Redis for what several
// Lockstep replicas must serialize (the landing queue of a branch). A lock
// is SET key token NX PX ttl; the holder renews it every ttl/3 and releases
// it with a compare-and-delete script, so a replica that dies frees the
// lock after ttl and a slow one never deletes someone else's lock.
package redislock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockstep-hq/lockstep"
)

// Locker takes named locks.
type Locker struct {
	rdb    *redis.Client
	prefix string
	ttl    time.Duration
	poll   time.Duration
}

// New returns a locker; keys are prefix+name.
func New(rdb *redis.Client, prefix string, ttl time.Duration) *Locker {
	if ttl <= 0 {
		ttl = 30 * time.Second
	}
	return &Locker{rdb: rdb, prefix: prefix, ttl: ttl, poll: 5 * time.Millisecond}
}

var release = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`)
var renew = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("pexpire", KEYS[1], ARGV[2]) else return 0 end`)

// Lock blocks until it holds the lock name or ctx ends. unlock releases
// it (and stops renewing); it is safe to call once.
func (l *Locker) Lock(ctx context.Context, name string) (unlock func(), err error) {
	var b [16]byte
	rand.Read(b[:])
	token := hex.EncodeToString(b[:])
	key := l.prefix + name
	for {
		ok, err := l.rdb.SetNX(ctx, key, token, l.ttl).Result()
		if err != nil {
			return nil, fmt.Errorf("redis lock %s: %w", name, err)
		}
		if ok {
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(l.poll):
		}
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(l.ttl / 3)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				renew.Run(context.Background(), l.rdb, []string{key}, token, l.ttl.Milliseconds())
			}
		}
	}()
	return func() {
		close(stop)
		<-done
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := release.Run(ctx, l.rdb, []string{key}, token).Err(); err != nil && !errors.Is(err, redis.Nil) {
			_ = err // the lock expires by itself after ttl
		}
	}, nil
}

var _ lockstep.Locker = (*Locker)(nil)
