package web

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/api"
	"github.com/lockstep-hq/lockstep/gate"
)

func (s *Server) handleGateSet() gin.HandlerFunc {
	return func(c *gin.Context) {
		var p lockstep.Policy
		if err := s.decodeJSON(c, &p); err != nil {
			writeError(c, err)
			return
		}
		out, err := s.Gate.SetPolicy(c.Request.Context(), caller(c), c.Param("repo"), p)
		if err != nil {
			writeError(c, err)
			return
		}
		c.JSON(http.StatusOK, out)
	}
}

func (s *Server) handleGateGet() gin.HandlerFunc {
	return func(c *gin.Context) {
		p, err := s.Gate.Policy(c.Request.Context(), c.Param("repo"), c.Query("branch"))
		if err != nil {
			writeError(c, err)
			return
		}
		c.JSON(http.StatusOK, p)
	}
}

func (s *Server) handleCheckPost() gin.HandlerFunc {
	return func(c *gin.Context) {
		var req api.CheckRequest
		if err := s.decodeJSON(c, &req); err != nil {
			writeError(c, err)
			return
		}
		out, err := s.Gate.PostCheck(c.Request.Context(), caller(c), c.Param("repo"), c.Param("rev"),
			lockstep.Check{Name: req.Name, Status: req.Status, Summary: req.Summary, DetailsURL: req.DetailsURL})
		if err != nil {
			writeError(c, err)
			return
		}
		c.JSON(http.StatusCreated, out)
	}
}

func (s *Server) handleCheckList() gin.HandlerFunc {
	return func(c *gin.Context) {
		out, err := s.Gate.Checks(c.Request.Context(), c.Param("repo"), c.Param("rev"))
		if err != nil {
			writeError(c, err)
			return
		}
		c.JSON(http.StatusOK, out)
	}
}

func (s *Server) handleHookCreate() gin.HandlerFunc {
	return func(c *gin.Context) {
		var req api.HookRequest
		if err := s.decodeJSON(c, &req); err != nil {
			writeError(c, err)
			return
		}
		h, err := s.Gate.CreateHook(c.Request.Context(), caller(c), c.Param("repo"), gate.HookRequest(req))
		if err != nil {
			writeError(c, err)
			return
		}
		c.JSON(http.StatusCreated, h)
	}
}

func (s *Server) handleHookList() gin.HandlerFunc {
	return func(c *gin.Context) {
		hs, err := s.Gate.Hooks(c.Request.Context(), caller(c), c.Param("repo"))
		if err != nil {
			writeError(c, err)
			return
		}
		c.JSON(http.StatusOK, gin.H{"hooks": hs})
	}
}

func (s *Server) handleHookDelete() gin.HandlerFunc {
	return func(c *gin.Context) {
		if err := s.Gate.DeleteHook(c.Request.Context(), caller(c), c.Param("repo"), c.Param("id")); err != nil {
			writeError(c, err)
			return
		}
		c.Status(http.StatusNoContent)
	}
}

func (s *Server) handleHookRotate() gin.HandlerFunc {
	return func(c *gin.Context) {
		var req api.RotateRequest
		if c.Request.ContentLength != 0 {
			if err := s.decodeJSON(c, &req); err != nil {
				writeError(c, err)
				return
			}
		}
		res, err := s.Gate.RotateHook(c.Request.Context(), caller(c), c.Param("repo"), c.Param("id"), gate.RotateRequest(req))
		if err != nil {
			writeError(c, err)
			return
		}
		c.JSON(http.StatusOK, res)
	}
}

func (s *Server) handleDeliveries() gin.HandlerFunc {
	return func(c *gin.Context) {
		limit, err := queryLimit(c, 100, MaxDeliveryLimit)
		if err != nil {
			writeError(c, err)
			return
		}
		ds, err := s.Gate.Deliveries(c.Request.Context(), caller(c), c.Param("repo"), c.Param("id"), limit)
		if err != nil {
			writeError(c, err)
			return
		}
		c.JSON(http.StatusOK, gin.H{"deliveries": ds})
	}
}

func (s *Server) handlePromote() gin.HandlerFunc {
	return func(c *gin.Context) {
		var req api.PromoteRequest
		if c.Request.ContentLength != 0 {
			if err := s.decodeJSON(c, &req); err != nil {
				writeError(c, err)
				return
			}
		}
		res, err := s.Gate.Promote(c.Request.Context(), caller(c), c.Param("repo"), gate.PromoteRequest(req))
		if err != nil {
			writeError(c, err)
			return
		}
		c.JSON(http.StatusOK, res)
	}
}

func (s *Server) handleGateEvaluate() gin.HandlerFunc {
	return func(c *gin.Context) {
		t, err := s.Gate.Target(c.Request.Context(), c.Param("repo"), c.Query("commit"))
		if err != nil {
			writeError(c, err)
			return
		}
		ev, _, err := s.Gate.Evaluate(c.Request.Context(), t)
		if err != nil {
			writeError(c, err)
			return
		}
		c.JSON(http.StatusOK, ev)
	}
}
