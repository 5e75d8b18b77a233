package web

import (
	"github.com/gin-gonic/gin"

	"github.com/lockstep-hq/lockstep"
)

// Page sizes of the list routes: `limit` is 1 to the route's maximum
// (absent: its default); anything else is 400 invalid_argument, never a
// silent default.
const (
	MaxListLimit     = 1000 // every list route but deliveries
	MaxDeliveryLimit = 500  // GET /repos/{repo}/hooks/{id}/deliveries
)

// queryLimit parses the `limit` query parameter of a list route: the one
// parser every list route uses.
func queryLimit(c *gin.Context, def, max int) (int, error) {
	v := c.Query("limit")
	if v == "" {
		return def, nil
	}
	n, err := queryInt(c, "limit", def)
	if err != nil || n < 1 || n > max {
		return 0, lockstep.Errorf(lockstep.EINVALID, "query parameter limit=%q: want an integer from 1 to %d", v, max).
			WithDetails(map[string]any{"limit_max": max})
	}
	return n, nil
}
