package web

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/lockstep-hq/lockstep/api"
)

func (s *Server) handleKeyCreate() gin.HandlerFunc {
	return func(c *gin.Context) {
		var req api.KeyCreateRequest
		if err := s.decodeJSON(c, &req); err != nil {
			writeError(c, err)
			return
		}
		k, secret, err := s.Keys.Create(c.Request.Context(), caller(c), req.Name, req.Role)
		if err != nil {
			writeError(c, err)
			return
		}
		c.JSON(http.StatusCreated, api.CreatedKey{ID: k.ID, Name: k.Name, Role: k.Role, Prefix: k.Prefix, Secret: secret})
	}
}

func (s *Server) handleKeyList() gin.HandlerFunc {
	return func(c *gin.Context) {
		keys, err := s.Keys.List(c.Request.Context(), caller(c))
		if err != nil {
			writeError(c, err)
			return
		}
		c.JSON(http.StatusOK, gin.H{"keys": keys})
	}
}

func (s *Server) handleKeyRevoke() gin.HandlerFunc {
	return func(c *gin.Context) {
		if err := s.Keys.Revoke(c.Request.Context(), caller(c), c.Param("id")); err != nil {
			writeError(c, err)
			return
		}
		c.Status(http.StatusNoContent)
	}
}

func (s *Server) handleWhoami() gin.HandlerFunc {
	return func(c *gin.Context) { c.JSON(http.StatusOK, caller(c)) }
}
