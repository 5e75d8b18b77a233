package web

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/lockstep-hq/lockstep/api"
	"github.com/lockstep-hq/lockstep/checkpoints"
)

func (s *Server) handleDatabaseBind() gin.HandlerFunc {
	return func(c *gin.Context) {
		var req api.DatabaseRequest
		if err := s.decodeJSON(c, &req); err != nil {
			writeError(c, err)
			return
		}
		out, err := s.Checkpoints.BindTemplate(c.Request.Context(), caller(c), c.Param("repo"), req.Template)
		if err != nil {
			writeError(c, err)
			return
		}
		c.JSON(http.StatusOK, out)
	}
}

func (s *Server) handleDatabaseGet() gin.HandlerFunc {
	return func(c *gin.Context) {
		out, err := s.Checkpoints.Get(c.Request.Context(), caller(c), c.Param("repo"))
		if err != nil {
			writeError(c, err)
			return
		}
		c.JSON(http.StatusOK, out)
	}
}

func (s *Server) handleRedisGet() gin.HandlerFunc {
	return func(c *gin.Context) {
		out, err := s.Checkpoints.GetRedis(c.Request.Context(), caller(c), c.Param("repo"))
		if err != nil {
			writeError(c, err)
			return
		}
		c.JSON(http.StatusOK, out)
	}
}

func (s *Server) handleDatabaseRefresh() gin.HandlerFunc {
	return func(c *gin.Context) {
		out, err := s.Checkpoints.RefreshTemplate(c.Request.Context(), caller(c), c.Param("repo"))
		if err != nil {
			writeError(c, err)
			return
		}
		c.JSON(http.StatusOK, out)
	}
}

func (s *Server) handleCheckpointCreate() gin.HandlerFunc {
	return func(c *gin.Context) {
		var req api.CheckpointRequest
		if c.Request.ContentLength != 0 {
			if err := s.decodeJSON(c, &req); err != nil {
				writeError(c, err)
				return
			}
		}
		cp, err := s.Checkpoints.Create(c.Request.Context(), caller(c), c.Param("repo"), checkpoints.CreateRequest(req))
		if err != nil {
			writeError(c, err)
			return
		}
		c.JSON(http.StatusCreated, cp)
	}
}

func (s *Server) handleCheckpointList() gin.HandlerFunc {
	return func(c *gin.Context) {
		limit, err := queryLimit(c, 100, MaxListLimit)
		if err != nil {
			writeError(c, err)
			return
		}
		cs, err := s.Checkpoints.List(c.Request.Context(), c.Param("repo"), limit)
		if err != nil {
			writeError(c, err)
			return
		}
		c.JSON(http.StatusOK, gin.H{"checkpoints": cs})
	}
}

func (s *Server) handleCheckpointRestore() gin.HandlerFunc {
	return func(c *gin.Context) {
		var req api.RestoreRequest
		if c.Request.ContentLength != 0 {
			if err := s.decodeJSON(c, &req); err != nil {
				writeError(c, err)
				return
			}
		}
		res, err := s.Checkpoints.Restore(c.Request.Context(), caller(c), c.Param("repo"), c.Param("id"), checkpoints.RestoreRequest{ExpectOID: req.ExpectOID, Failure: (*checkpoints.Failure)(req.Failure)})
		if err != nil {
			writeError(c, err)
			return
		}
		c.JSON(http.StatusOK, res)
	}
}
