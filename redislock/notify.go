package redislock

import (
	"context"
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

// Subscribe calls fn for each announcement until ctx ends or the
// subscription fails (then it returns the error; the caller subscribes
// again).
func (n *Notifier) Subscribe(ctx context.Context, fn func(network string, gen int64)) error {
	ps := n.rdb.PSubscribe(ctx, n.prefix+"*")
	defer ps.Close()
	// go-redis's blocking receive does not watch ctx: closing the
	// subscription is what ends it (a replica's shutdown waits for this).
	stop := context.AfterFunc(ctx, func() { ps.Close() })
	defer stop()
	if _, err := ps.Receive(ctx); err != nil { // the subscription's confirmation
		return err
	}
	for {
		msg, err := ps.ReceiveMessage(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		gen, err := strconv.ParseInt(msg.Payload, 10, 64)
		if err != nil {
			continue
		}
		fn(strings.TrimPrefix(msg.Channel, n.prefix), gen)
	}
}
