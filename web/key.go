package web

import (
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/api"
	"github.com/lockstep-hq/lockstep/auth"
)

func (s *Server) handleKeyCreate() gin.HandlerFunc {
	return func(c *gin.Context) {
		var req api.KeyCreateRequest
		if err := s.decodeJSON(c, &req); err != nil {
			writeError(c, err)
			return
		}
		mr := auth.MintRequest{Name: req.Name, Role: req.Role}
		if req.TTL != "" {
			d, err := time.ParseDuration(req.TTL)
			if err != nil || d <= 0 {
				writeError(c, lockstep.Errorf(lockstep.EINVALID, "ttl %q: want a positive Go duration such as 1h or 30m", req.TTL))
				return
			}
			mr.TTL = d
		}
		if req.Scope != nil {
			mr.Scope = &lockstep.KeyScope{Workspace: req.Scope.Workspace, Base: req.Scope.Base, Task: req.Scope.Task}
		}
		k, secret, err := s.Keys.Mint(c.Request.Context(), caller(c), mr)
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
	return func(c *gin.Context) {
		k := caller(c)
		lim := &api.KeyLimits{Workspaces: s.workspaceQuota(k), RateLimitRPS: s.Config.RateLimitRPS}
		n, err := s.Store.CountOwnedWorkspaces(c.Request.Context(), k.ID)
		if err != nil {
			writeError(c, err)
			return
		}
		lim.WorkspacesActive = n
		if k.Role != lockstep.RoleAdmin {
			lim.Uploads = s.Config.QuotaUploads
		}
		lim.UploadsActive = s.keyUploads.count(k.ID)
		out := api.Key{ID: k.ID, Name: k.Name, Role: k.Role, Prefix: k.Prefix, CreatedAt: k.CreatedAt, RevokedAt: k.RevokedAt,
			LastUsedAt: k.LastUsedAt, ExpiresAt: k.ExpiresAt, ParentKeyID: k.ParentKeyID, QuotaWorkspaces: k.QuotaWorkspaces, Limits: lim}
		if k.Scope != nil {
			out.Scope = &api.KeyScope{Workspace: k.Scope.Workspace, Base: k.Scope.Base, Task: k.Scope.Task}
		}
		c.JSON(http.StatusOK, out)
	}
}

func (s *Server) handleKeyQuota() gin.HandlerFunc {
	return func(c *gin.Context) {
		if err := auth.Require(caller(c), lockstep.RoleAdmin); err != nil {
			writeError(c, err)
			return
		}
		var req api.KeyQuotaRequest
		if err := s.decodeJSON(c, &req); err != nil {
			writeError(c, err)
			return
		}
		if err := s.Keys.SetQuota(c.Request.Context(), caller(c), c.Param("id"), req.Workspaces); err != nil {
			writeError(c, err)
			return
		}
		c.Status(http.StatusNoContent)
	}
}

// workspaceQuota is the number of active workspaces k may own (0:
// unlimited): its own quota, else the server's.
func (s *Server) workspaceQuota(k *lockstep.Key) int {
	if k.QuotaWorkspaces != nil {
		return *k.QuotaWorkspaces
	}
	return s.Config.QuotaWorkspaces
}

// checkWorkspaceQuota answers rate_limited when k owns as many active
// workspaces as its quota allows (abandon, promote or delete one first).
func (s *Server) checkWorkspaceQuota(c *gin.Context, k *lockstep.Key) error {
	q := s.workspaceQuota(k)
	if q <= 0 || k.Role == lockstep.RoleAdmin {
		return nil
	}
	n, err := s.Store.CountOwnedWorkspaces(c.Request.Context(), k.ID)
	if err != nil {
		return err
	}
	if n >= q {
		c.Header("Retry-After", "60")
		return lockstep.Errorf(lockstep.ERATELIMITED, "workspace quota: key %s owns %d active workspaces, its limit is %d (quota-workspaces): abandon, promote or delete one first", k.Name, n, q)
	}
	return nil
}
