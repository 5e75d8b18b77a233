package web

import (
	"encoding/json"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/lockstep-hq/lockstep/api"
	"github.com/lockstep-hq/lockstep/repositories"
)

func (s *Server) handleMerge() gin.HandlerFunc {
	return func(c *gin.Context) {
		var req api.MergeRequest
		if err := s.decodeJSON(c, &req); err != nil {
			writeError(c, err)
			return
		}
		res, err := s.Repos.Merge(c.Request.Context(), caller(c), c.Param("repo"), repositories.MergeRequest(req))
		if err != nil {
			writeError(c, err)
			return
		}
		c.JSON(http.StatusOK, res)
	}
}

// handlePreflightBatch: POST /repos/{base}/merges/preflight, the
// preflight of many workspaces of base in one call.
func (s *Server) handlePreflightBatch() gin.HandlerFunc {
	return func(c *gin.Context) {
		var req repositories.PreflightBatchRequest
		if err := s.decodeJSON(c, &req); err != nil {
			writeError(c, err)
			return
		}
		res, err := s.Repos.PreflightBatch(c.Request.Context(), caller(c), c.Param("repo"), req)
		if err != nil {
			writeError(c, err)
			return
		}
		c.JSON(http.StatusOK, res)
	}
}

func (s *Server) handleSync() gin.HandlerFunc {
	return func(c *gin.Context) {
		var req api.SyncRequest
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

// mergeIdem is POST /merges' idempotency path by its body: a preflight
// (no "materialize") is one metadata transaction, its read-only oplog
// entry carrying the answer, so the key is claimed in that transaction
// (idemOneTx: one write per keyed preflight instead of a claim, the entry
// and the stored answer). A materialize, or a body that does not parse
// (the handler refuses it), keeps the held claim.
func mergeIdem(body []byte) idemKind {
	var req struct {
		Materialize bool `json:"materialize"`
	}
	if err := json.Unmarshal(body, &req); err != nil || req.Materialize {
		return idemHeld
	}
	return idemOneTx
}
