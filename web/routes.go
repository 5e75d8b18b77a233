package web

import (
	"github.com/gin-gonic/gin"
)

// registerRoutes declares the whole API: the rows of routeTable
// (routefacts.go), each with its group's middleware. Public: health,
// readiness, metrics, the OpenAPI document. Everything under /api/v1, /git
// and /mcp needs a key.
func (s *Server) registerRoutes(e *gin.Engine) {
	var mcp gin.HandlerFunc
	if s.MCP != nil {
		// Model Context Protocol (streamable HTTP): the same keys and roles.
		mcp = gin.WrapH(s.MCP(e))
	}
	// admit.go: authorization and upload slots before any body is read;
	// idempotency.go: Idempotency-Key on writes.
	api := e.Group("/", s.authenticate, s.admit, s.idempotency)
	git := e.Group("/", s.authenticate, s.admit)
	for i := range routeTable {
		f := &routeTable[i]
		switch f.group {
		case groupPublic:
			e.Handle(f.method, f.path, f.handler(s))
		case groupMCP:
			if mcp == nil {
				continue
			}
			chain := []gin.HandlerFunc{s.authenticate, s.refuseRunner}
			if f.method == "GET" {
				chain = append(chain, s.endWithKey) // a stateful session's event stream
			}
			if f.uploadSlot {
				chain = append(chain, s.mcpSlot, s.mcpHoldSlot) // upload.go: the slot of a large request
			}
			e.Handle(f.method, f.path, append(chain, mcp)...)
		case groupAPI:
			api.Handle(f.method, f.path, f.handler(s))
		case groupGit:
			git.Handle(f.method, f.path, f.handler(s))
		}
	}
	s.registerUI(e) // the reviewers' UI under /ui/ (ui.go)
}
