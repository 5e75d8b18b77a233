package redislock

import (
	"context"
	"errors"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Notifier announces network changes between replicas over Redis
// pub/sub (replica.Notifier): PUBLISH <prefix><network> <generation>.
// Pub/sub delivers at most once; a lost message only delays a cache
// catching up until its next request (the generation check is the rule).
type Notifier struct {
	rdb    *redis.Client
	prefix string
}

// NewNotifier returns a Notifier on channels named prefix+network.
func NewNotifier(rdb *redis.Client, prefix string) *Notifier {
	return &Notifier{rdb: rdb, prefix: prefix}
}

// Publish announces that network reached generation gen.
func (n *Notifier) Publish(ctx context.Context, network string, gen int64) error {
	return n.rdb.Publish(ctx, n.prefix+network, strconv.FormatInt(gen, 10)).Err()
}

// Subscribe calls fn for each announcement until ctx ends (go-redis
// re-subscribes by itself after a lost connection).
func (n *Notifier) Subscribe(ctx context.Context, fn func(network string, gen int64)) error {
	ps := n.rdb.PSubscribe(ctx, n.prefix+"*")
	defer ps.Close()                           // also what ends a blocked read when ctx ends
	if _, err := ps.Receive(ctx); err != nil { // the subscription's confirmation
		return err
	}
	ch := ps.Channel()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case msg, ok := <-ch:
			if !ok {
				return errors.New("redis: subscription closed")
			}
			gen, err := strconv.ParseInt(msg.Payload, 10, 64)
			if err != nil {
				continue
			}
			fn(strings.TrimPrefix(msg.Channel, n.prefix), gen)
		}
	}
}
