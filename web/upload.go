package web

import (
	"github.com/gin-gonic/gin"

	"github.com/lockstep-hq/lockstep"
)

// DefaultMaxConcurrentUploads is the number of uploads (tar worktrees,
// object packs, git pushes) served at once when
// Config.MaxConcurrentUploads is zero.
const DefaultMaxConcurrentUploads = 8

// uploadSlot bounds concurrent uploads: each holds decompression state,
// a spool file and a pack write, so a burst of small requests that expand
// server-side cannot add up without limit. Beyond the bound the answer
// is 503 unavailable with Retry-After, at once (never queued: a queued
// request still holds its connection and body).
func (s *Server) uploadSlot(c *gin.Context) {
	select {
	case s.uploads <- struct{}{}:
		if s.Metrics != nil {
			s.Metrics.Uploads.Inc()
			defer s.Metrics.Uploads.Dec()
		}
		defer func() { <-s.uploads }()
		c.Next()
	default:
		c.Header("Retry-After", "1")
		writeError(c, lockstep.Errorf(lockstep.EUNAVAILABLE, "%d uploads in progress, the server's limit (--max-concurrent-uploads); retry shortly", cap(s.uploads)))
		c.Abort()
	}
}
