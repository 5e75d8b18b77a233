package web

import (
	"fmt"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/lockstep-hq/lockstep/api"
)

// handleOpenAPI serves the OpenAPI document (api/openapi.yaml) as JSON,
// without a key: generated clients and agents fetch it before they have one.
func (s *Server) handleOpenAPI() gin.HandlerFunc {
	return func(c *gin.Context) {
		doc, err := api.JSON()
		if err != nil {
			writeError(c, fmt.Errorf("openapi document: %w", err))
			return
		}
		c.Header("Cache-Control", "no-cache")
		c.Data(http.StatusOK, "application/json", doc)
	}
}
