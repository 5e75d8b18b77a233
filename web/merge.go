package web

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/lockstep-hq/lockstep/repositories"
)

func (s *Server) handleMerge() gin.HandlerFunc {
	return func(c *gin.Context) {
		var req repositories.MergeRequest
		if err := s.decodeJSON(c, &req); err != nil {
			writeError(c, err)
			return
		}
		res, err := s.Repos.Merge(c.Request.Context(), caller(c), c.Param("repo"), req)
		if err != nil {
			writeError(c, err)
			return
		}
		c.JSON(http.StatusOK, res)
	}
}

type syncRequest struct {
	ExpectOID  string `json:"expect_oid"`
	OnConflict string `json:"on_conflict"`
}

func (s *Server) handleSync() gin.HandlerFunc {
	return func(c *gin.Context) {
		var req syncRequest
		if c.Request.ContentLength != 0 {
			if err := s.decodeJSON(c, &req); err != nil {
				writeError(c, err)
				return
			}
		}
		res, err := s.Workspaces.Sync(c.Request.Context(), caller(c), c.Param("repo"), req.ExpectOID, req.OnConflict)
		if err != nil {
			writeError(c, err)
			return
		}
		c.JSON(http.StatusOK, res)
	}
}
