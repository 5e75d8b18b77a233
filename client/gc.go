package client

import (
	"context"

	"github.com/lockstep-hq/lockstep/api"
)

// GCResult says what an object GC dropped (or would drop).
type GCResult = api.GCResult

// GC runs an object GC now (POST /api/v1/gc; admin only:
// permission_denied otherwise). req.Prune is "now", a duration ("336h")
// or "" for the server's --object-retention; req.DryRun changes nothing.
func (c *Client) GC(ctx context.Context, req api.GCRequest) (*GCResult, error) {
	var out GCResult
	return &out, c.post(ctx, "/api/v1/gc", req, &out)
}
