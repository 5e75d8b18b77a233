package web

import (
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/api"
	"github.com/lockstep-hq/lockstep/repositories"
)

// handleGC is POST /api/v1/gc: an object GC run now (admin only, checked
// before the body is read: admit.go).
func (s *Server) handleGC() gin.HandlerFunc {
	return func(c *gin.Context) {
		var req api.GCRequest
		if c.Request.ContentLength != 0 {
			if err := c.ShouldBindJSON(&req); err != nil {
				writeError(c, lockstep.Errorf(lockstep.EINVALID, "gc request: %v", err))
				return
			}
		}
		retention, err := ParsePrune(req.Prune, s.Config.ObjectRetention)
		if err != nil {
			writeError(c, err)
			return
		}
		res, err := s.Repos.GC(c.Request.Context(), caller(c), repositories.GCOptions{Repo: req.Repo, Retention: retention, DryRun: req.DryRun})
		if err != nil {
			writeError(c, err)
			return
		}
		c.JSON(http.StatusOK, api.GCResult{DryRun: res.DryRun, Retention: res.Retention, Networks: res.Networks,
			Objects: res.Objects, Packs: res.Packs, Loose: res.Loose, Bytes: res.Bytes, BucketPacks: res.BucketPacks,
			Busy: res.Busy, Skipped: res.Skipped})
	}
}

// ParsePrune reads a --prune value: "now" (0), a Go duration, or ""
// (def, the configured retention).
func ParsePrune(v string, def time.Duration) (time.Duration, error) {
	switch v {
	case "":
		if def <= 0 {
			return repositories.DefaultObjectRetention, nil
		}
		return def, nil
	case "now":
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, lockstep.Errorf(lockstep.EINVALID, "prune %q: want \"now\" or a duration such as 336h", v)
	}
	return d, nil
}
