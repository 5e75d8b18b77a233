package web

import (
	"strconv"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/lockstep-hq/lockstep"
)

// Bounds of the UI's event streams (/ui/events): each holds a connection,
// a goroutine and a subscription for as long as it is open, so their
// number is capped per key and in all, and each lives at most
// SSEMaxLifetime (the browser's EventSource reconnects by itself). Beyond
// a cap the answer is 429 rate_limited with Retry-After.

// Defaults of Config's stream settings.
const (
	DefaultMaxSSEStreams       = 1000
	DefaultMaxSSEStreamsPerKey = 16
	DefaultSSEMaxLifetime      = 30 * time.Minute
)

// sseRetryAfter is the Retry-After (seconds) of a refused stream.
const sseRetryAfter = 5

type streamLimiter struct {
	mu        sync.Mutex
	total     int
	perKey    map[string]int
	max       int
	maxPerKey int
}

func newStreamLimiter(max, maxPerKey int) *streamLimiter {
	if max <= 0 {
		max = DefaultMaxSSEStreams
	}
	if maxPerKey <= 0 {
		maxPerKey = DefaultMaxSSEStreamsPerKey
	}
	return &streamLimiter{perKey: map[string]int{}, max: max, maxPerKey: maxPerKey}
}

// acquire takes a stream of keyID's, or answers why not.
func (l *streamLimiter) acquire(keyID string) (release func(), err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.perKey[keyID] >= l.maxPerKey:
		return nil, lockstep.Errorf(lockstep.ERATELIMITED, "this key has %d event streams open, the server's limit per key (--max-sse-streams-per-key); close one or retry later", l.maxPerKey).
			WithDetails(map[string]any{"limit": l.maxPerKey, "retry_after": sseRetryAfter})
	case l.total >= l.max:
		return nil, lockstep.Errorf(lockstep.ERATELIMITED, "%d event streams open, the server's limit (--max-sse-streams); retry later", l.max).
			WithDetails(map[string]any{"limit": l.max, "retry_after": sseRetryAfter})
	}
	l.total++
	l.perKey[keyID]++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.total--
			if l.perKey[keyID]--; l.perKey[keyID] <= 0 {
				delete(l.perKey, keyID)
			}
		})
	}, nil
}

// refuseStream answers a stream over a cap: 429 with Retry-After, in the
// JSON envelope.
func refuseStream(c *gin.Context, err error) {
	c.Header("Retry-After", strconv.Itoa(sseRetryAfter))
	writeError(c, err)
	c.Abort()
}
