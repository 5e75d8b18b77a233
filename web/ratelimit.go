package web

import (
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/lockstep-hq/lockstep"
)

// keyBuckets is the per-key token bucket of --rate-limit-rps (issue 28):
// each key refills at RateLimitRPS tokens a second up to RateLimitBurst;
// a request finding no token answers 429 rate_limited with Retry-After.
// Buckets are per replica.
type keyBuckets struct {
	mu sync.Mutex
	m  map[string]*bucket
}

type bucket struct {
	tokens float64
	at     time.Time
}

func (s *Server) rateLimit(c *gin.Context, k *lockstep.Key) error {
	rps := s.Config.RateLimitRPS
	if rps <= 0 {
		return nil
	}
	burst := float64(s.Config.RateLimitBurst)
	if burst < 1 {
		burst = math.Max(1, math.Ceil(rps))
	}
	now := time.Now()
	s.buckets.mu.Lock()
	if s.buckets.m == nil {
		s.buckets.m = map[string]*bucket{}
	}
	b, ok := s.buckets.m[k.ID]
	if !ok {
		b = &bucket{tokens: burst, at: now}
		s.buckets.m[k.ID] = b
	}
	b.tokens = math.Min(burst, b.tokens+now.Sub(b.at).Seconds()*rps)
	b.at = now
	if b.tokens >= 1 {
		b.tokens--
		s.buckets.mu.Unlock()
		return nil
	}
	wait := (1 - b.tokens) / rps
	s.buckets.mu.Unlock()
	c.Header("Retry-After", fmt.Sprint(int(math.Ceil(wait))))
	return lockstep.Errorf(lockstep.ERATELIMITED, "rate limit: key %s may make %g requests per second (rate-limit-rps, burst %g); retry in %.1fs", k.Name, rps, burst, wait)
}
