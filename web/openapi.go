package web

import (
	"fmt"
	"net/http"
	"sync"

	"github.com/gin-gonic/gin"

	"sigs.k8s.io/yaml"

	"github.com/lockstep-hq/lockstep/api"
)

// openapiJSON is api.YAML converted to JSON (computed once).
var openapiJSON = sync.OnceValues(func() ([]byte, error) { return yaml.YAMLToJSON(api.YAML) })

// handleOpenAPI serves the OpenAPI document (api/openapi.yaml) as JSON,
// without a key: generated clients and agents fetch it before they have one.
func (s *Server) handleOpenAPI() gin.HandlerFunc {
	return func(c *gin.Context) {
		doc, err := openapiJSON()
		if err != nil {
			writeError(c, fmt.Errorf("openapi document: %w", err))
			return
		}
		c.Header("Cache-Control", "no-cache")
		c.Data(http.StatusOK, "application/json", doc)
	}
}
