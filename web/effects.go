package web

import (
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/api"
	"github.com/lockstep-hq/lockstep/effects"
)

// effectsOn answers 501 not_configured (final, never retried) when the
// effects outbox is not wired (a server built without it).
func (s *Server) effectsOn(c *gin.Context) bool {
	if s.Effects == nil {
		writeError(c, lockstep.Errorf(lockstep.ENOTCONFIGURED, "the effects outbox is not configured on this server"))
		return false
	}
	return true
}

func (s *Server) handleEffectStage() gin.HandlerFunc {
	return func(c *gin.Context) {
		if !s.effectsOn(c) {
			return
		}
		// Who may stage is decided before the body is read.
		ws, err := s.Effects.Authorize(c.Request.Context(), caller(c), c.Param("repo"))
		if err != nil {
			writeError(c, err)
			return
		}
		var req api.EffectRequest
		if err := s.decodeJSONLimit(c, &req, s.Effects.MaxRequestBytes()); err != nil {
			writeError(c, err)
			return
		}
		e, err := s.Effects.Stage(c.Request.Context(), caller(c), ws, req)
		if err != nil {
			writeError(c, err)
			return
		}
		c.JSON(http.StatusCreated, effects.View(e))
	}
}

func (s *Server) handleEffectList() gin.HandlerFunc {
	return func(c *gin.Context) {
		limit, err := queryLimit(c, 100, 1000) // bad input first: 400 whatever is configured
		if err != nil {
			writeError(c, err)
			return
		}
		if !s.effectsOn(c) {
			return
		}
		var after int64
		if v := c.Query("after"); v != "" {
			if after, err = strconv.ParseInt(v, 10, 64); err != nil || after < 0 {
				writeError(c, lockstep.Errorf(lockstep.EINVALID, "query parameter after=%q: want a seq (a non-negative integer)", v))
				return
			}
		}
		list, next, err := s.Effects.List(c.Request.Context(), caller(c), c.Param("repo"), after, limit)
		if err != nil {
			writeError(c, err)
			return
		}
		c.JSON(http.StatusOK, api.EffectList{Effects: effects.Views(list), NextAfter: next})
	}
}

func (s *Server) handleEffectGet() gin.HandlerFunc {
	return func(c *gin.Context) {
		if !s.effectsOn(c) {
			return
		}
		e, err := s.Effects.Get(c.Request.Context(), caller(c), c.Param("repo"), c.Param("id"))
		if err != nil {
			writeError(c, err)
			return
		}
		c.JSON(http.StatusOK, effects.View(e))
	}
}

func (s *Server) handleEffectDiscard() gin.HandlerFunc {
	return func(c *gin.Context) {
		if !s.effectsOn(c) {
			return
		}
		if _, err := s.Effects.Authorize(c.Request.Context(), caller(c), c.Param("repo")); err != nil {
			writeError(c, err)
			return
		}
		var req api.EffectDiscard
		if c.Request.ContentLength != 0 {
			if err := s.decodeJSON(c, &req); err != nil {
				writeError(c, err)
				return
			}
		}
		ids, err := s.Effects.Discard(c.Request.Context(), caller(c), c.Param("repo"), req)
		if err != nil {
			writeError(c, err)
			return
		}
		c.JSON(http.StatusOK, api.EffectDiscardResult{Discarded: ids})
	}
}

func (s *Server) handleEffectDecide(approve bool) gin.HandlerFunc {
	return func(c *gin.Context) {
		if !s.effectsOn(c) {
			return
		}
		if k := caller(c); k == nil || (k.Role != lockstep.RoleReviewer && k.Role != lockstep.RoleAdmin) {
			writeError(c, lockstep.Errorf(lockstep.EFORBIDDEN, "only reviewer and admin keys approve or reject effects"))
			return
		}
		var req api.EffectDecision
		if c.Request.ContentLength != 0 {
			if err := s.decodeJSON(c, &req); err != nil {
				writeError(c, err)
				return
			}
		}
		e, err := s.Effects.Decide(c.Request.Context(), caller(c), c.Param("repo"), c.Param("id"), approve, req.Reason)
		if err != nil {
			writeError(c, err)
			return
		}
		c.JSON(http.StatusOK, effects.View(e))
	}
}

func (s *Server) handleEffectCompensate() gin.HandlerFunc {
	return func(c *gin.Context) {
		if !s.effectsOn(c) {
			return
		}
		e, err := s.Effects.Compensate(c.Request.Context(), caller(c), c.Param("repo"), c.Param("id"))
		if err != nil {
			writeError(c, err)
			return
		}
		c.JSON(http.StatusOK, effects.View(e))
	}
}

func (s *Server) handleEffectCompensateCommit() gin.HandlerFunc {
	return func(c *gin.Context) {
		if !s.effectsOn(c) {
			return
		}
		if k := caller(c); k == nil || k.Role != lockstep.RoleAdmin {
			writeError(c, lockstep.Errorf(lockstep.EFORBIDDEN, "only admin keys run the compensations of a commit"))
			return
		}
		var req api.CompensateRequest
		if err := s.decodeJSON(c, &req); err != nil {
			writeError(c, err)
			return
		}
		list, err := s.Effects.CompensateCommit(c.Request.Context(), caller(c), c.Param("repo"), req.Commit)
		if err != nil {
			writeError(c, err)
			return
		}
		c.JSON(http.StatusOK, api.CompensateResult{Effects: effects.Views(list)})
	}
}
