package redislock

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Defaults of ClientOptions.
const (
	DefaultTimeout  = time.Second
	DefaultCooldown = 5 * time.Second
)

// ErrSkipped is the error of a command not sent because Redis failed
// moments ago (the breaker is open): callers take their degraded path at
// once instead of waiting for dials that will fail.
var ErrSkipped = errors.New("redis: skipped after a recent failure (retrying shortly)")

// ClientOptions say how a Redis outage is met: every dial, read and write
// is bounded by Timeout, a command is retried once, a dial is tried once
// per attempt, and after a connection-level failure every command fails at
// once with ErrSkipped for Cooldown (then the next one tries again).
type ClientOptions struct {
	Timeout  time.Duration // default DefaultTimeout
	Cooldown time.Duration // default DefaultCooldown
}

// NewClient returns a client for opt (from redis.ParseURL) that fails fast
// when Redis is down (ClientOptions), and its breaker. Timeouts set in the
// URL (dial_timeout, read_timeout, write_timeout, max_retries) win.
//
// Without this, go-redis dials 5 times per attempt and tries a command
// 4 times: about 2 s (and up to the caller's deadline) per command while
// Redis is down, added to every write that publishes a change.
func NewClient(opt *redis.Options, o ClientOptions) (*redis.Client, *Breaker) {
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Cooldown <= 0 {
		o.Cooldown = DefaultCooldown
	}
	if opt.DialTimeout == 0 {
		opt.DialTimeout = o.Timeout
	}
	if opt.ReadTimeout == 0 {
		opt.ReadTimeout = o.Timeout
	}
	if opt.WriteTimeout == 0 {
		opt.WriteTimeout = o.Timeout
	}
	if opt.MaxRetries == 0 {
		opt.MaxRetries = 1
	}
	if opt.DialerRetries == 0 {
		opt.DialerRetries = 1
	}
	rdb := redis.NewClient(opt)
	b := &Breaker{cooldown: o.Cooldown, now: time.Now}
	rdb.AddHook(b)
	return rdb, b
}

// Breaker is a redis.Hook: after a dial or a command fails at the
// connection level (refused, reset, timed out), commands and dials fail
// with ErrSkipped for the cooldown, without touching the network.
type Breaker struct {
	cooldown time.Duration
	now      func() time.Time

	mu        sync.Mutex
	openUntil time.Time
}

var _ redis.Hook = (*Breaker)(nil)

// Open reports whether commands are being skipped now.
func (b *Breaker) Open() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.now().Before(b.openUntil)
}

func (b *Breaker) trip() {
	b.mu.Lock()
	b.openUntil = b.now().Add(b.cooldown)
	b.mu.Unlock()
}

// connectionFailure reports an error that says Redis cannot be reached or
// does not answer, as opposed to a reply (redis.Nil, a server error) or
// the caller giving up (ctx).
func connectionFailure(ctx context.Context, err error) bool {
	if err == nil || ctx.Err() != nil || errors.Is(err, redis.Nil) || errors.Is(err, ErrSkipped) {
		return false
	}
	var re redis.Error
	if errors.As(err, &re) {
		return false
	}
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, net.ErrClosed)
}

func (b *Breaker) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if b.Open() {
			return nil, ErrSkipped
		}
		c, err := next(ctx, network, addr)
		if err != nil && ctx.Err() == nil {
			b.trip()
		}
		return c, err
	}
}

func (b *Breaker) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if b.Open() {
			cmd.SetErr(ErrSkipped)
			return ErrSkipped
		}
		err := next(ctx, cmd)
		if connectionFailure(ctx, err) {
			b.trip()
		}
		return err
	}
}

func (b *Breaker) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if b.Open() {
			for _, c := range cmds {
				c.SetErr(ErrSkipped)
			}
			return ErrSkipped
		}
		err := next(ctx, cmds)
		if connectionFailure(ctx, err) {
			b.trip()
		}
		return err
	}
}
