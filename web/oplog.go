package web

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/auth"
)

func (s *Server) handleOplogList() gin.HandlerFunc {
	return func(c *gin.Context) {
		k := caller(c)
		f := lockstep.OpFilter{Repo: c.Query("repo"), KeyID: c.Query("key"), Op: c.Query("op")}
		after, err := queryInt(c, "after", 0)
		if err != nil {
			writeError(c, err)
			return
		}
		limit, err := queryLimit(c, 100, MaxListLimit)
		if err != nil {
			writeError(c, err)
			return
		}
		f.After, f.Limit = int64(after), limit
		// order=desc lists newest first; after is then the cursor going
		// back (entries before it).
		switch c.Query("order") {
		case "", "asc":
		case "desc":
			f.Newest = true
		default:
			writeError(c, lockstep.Errorf(lockstep.EINVALID, "order must be asc or desc"))
			return
		}
		// An agent sees its own operations only; other roles see all.
		if f, err = s.visibleOps(c.Request.Context(), k, f); err != nil {
			writeError(c, err)
			return
		}
		entries, err := s.Store.ListOps(c.Request.Context(), f)
		if err != nil {
			writeError(c, err)
			return
		}
		if entries == nil {
			entries = []*lockstep.OpEntry{}
		}
		var next int64
		if len(entries) == limit {
			next = entries[len(entries)-1].Seq
		}
		c.JSON(http.StatusOK, gin.H{"entries": entries, "next_after": next})
	}
}

func (s *Server) handleOplogVerify() gin.HandlerFunc {
	return func(c *gin.Context) {
		if err := auth.Require(caller(c), lockstep.RoleAdmin, lockstep.RoleReviewer, lockstep.RoleCI); err != nil {
			writeError(c, err)
			return
		}
		res, err := s.Store.VerifyOps(c.Request.Context())
		if err != nil {
			writeError(c, err)
			return
		}
		c.JSON(http.StatusOK, res)
	}
}
