package web

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/api"
)

// handleRetentionGet is GET /api/v1/repos/{repo}/retention: a base
// repository's retention policy (admin only: admit.go).
func (s *Server) handleRetentionGet() gin.HandlerFunc {
	return func(c *gin.Context) {
		p, err := s.Workspaces.Retention(c.Request.Context(), c.Param("repo"))
		if err != nil {
			writeError(c, err)
			return
		}
		c.JSON(http.StatusOK, retentionJSON(p))
	}
}

// handleRetentionPut is PUT /api/v1/repos/{repo}/retention: sets a base
// repository's retention policy (admin only, checked before the body is
// read: admit.go); ages "0" turn it off.
func (s *Server) handleRetentionPut() gin.HandlerFunc {
	return func(c *gin.Context) {
		var req api.Retention
		if err := c.ShouldBindJSON(&req); err != nil {
			writeError(c, lockstep.Errorf(lockstep.EINVALID, "retention request: %v", err))
			return
		}
		var p lockstep.RetentionPolicy
		var err error
		if p.AbandonAfter, err = lockstep.ParseAge(req.AbandonAfter); err != nil {
			writeError(c, lockstep.Errorf(lockstep.EINVALID, "abandon_after: %v", err))
			return
		}
		if p.DeleteAfter, err = lockstep.ParseAge(req.DeleteAfter); err != nil {
			writeError(c, lockstep.Errorf(lockstep.EINVALID, "delete_after: %v", err))
			return
		}
		p.ArchiveFailed = req.ArchiveFailed
		got, err := s.Workspaces.SetRetention(c.Request.Context(), caller(c), c.Param("repo"), p)
		if err != nil {
			writeError(c, err)
			return
		}
		c.JSON(http.StatusOK, retentionJSON(got))
	}
}

func retentionJSON(p lockstep.RetentionPolicy) api.Retention {
	out := api.Retention{AbandonAfter: lockstep.FormatAge(p.AbandonAfter), DeleteAfter: lockstep.FormatAge(p.DeleteAfter), ArchiveFailed: p.ArchiveFailed}
	if !p.UpdatedAt.IsZero() {
		t := p.UpdatedAt
		out.UpdatedAt = &t
	}
	return out
}
