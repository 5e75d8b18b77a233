package web

import (
	"context"
	"fmt"
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
		lim := &api.KeyLimits{Workspaces: s.workspaceQuota(k), WorkspacesSource: quotaFromServer, RateLimitRPS: s.Config.RateLimitRPS}
		switch {
		case k.Role == lockstep.RoleAdmin:
			lim.WorkspacesSource = quotaFromAdmin
		case k.QuotaWorkspaces != nil:
			lim.WorkspacesSource = quotaFromKey
		}
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
		if err := s.fillKeyUsage(c.Request.Context(), k, lim); err != nil {
			writeError(c, err)
			return
		}
		out := api.Key{ID: k.ID, Name: k.Name, Role: k.Role, Prefix: k.Prefix, CreatedAt: k.CreatedAt, RevokedAt: k.RevokedAt,
			LastUsedAt: k.LastUsedAt, ExpiresAt: k.ExpiresAt, ParentKeyID: k.ParentKeyID, QuotaWorkspaces: k.QuotaWorkspaces,
			QuotaStorageBytes: k.QuotaStorageBytes, QuotaRuns: k.QuotaRuns, Limits: lim}
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
		q := lockstep.KeyQuota{Workspaces: req.Workspaces, StorageBytes: req.StorageBytes, Runs: req.Runs}
		if err := s.Keys.SetQuota(c.Request.Context(), caller(c), c.Param("id"), q); err != nil {
			writeError(c, err)
			return
		}
		c.Status(http.StatusNoContent)
	}
}

// Where a key's effective quota comes from (api.KeyLimits *Source).
const (
	quotaFromKey    = "key"    // the key's own override (PUT /keys/{id}/quota)
	quotaFromServer = "server" // the server-wide setting
	quotaFromAdmin  = "admin"  // an admin key is not bound
)

// storageQuota is the bytes k's active workspaces may add (0:
// unlimited) and where that comes from: its override, else
// --quota-storage-bytes. Admin keys are not bound.
func (s *Server) storageQuota(k *lockstep.Key) (int64, string) {
	switch {
	case k.Role == lockstep.RoleAdmin:
		return 0, quotaFromAdmin
	case k.QuotaStorageBytes != nil:
		return *k.QuotaStorageBytes, quotaFromKey
	}
	return s.Config.QuotaStorageBytes, quotaFromServer
}

// runQuota is how many run jobs k may have queued or running (0:
// unlimited) and where that comes from: its override, else
// --quota-runs. Admin keys are not bound.
func (s *Server) runQuota(k *lockstep.Key) (int, string) {
	switch {
	case k.Role == lockstep.RoleAdmin:
		return 0, quotaFromAdmin
	case k.QuotaRuns != nil:
		return *k.QuotaRuns, quotaFromKey
	}
	return s.Config.QuotaRuns, quotaFromServer
}

// quotaName names the setting a limit came from in a 429's message.
func quotaName(from, flag string) string {
	if from == quotaFromKey {
		return "this key's own quota, lockstep keys quota"
	}
	return flag
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

// fillKeyUsage sets the storage-bytes and concurrent-runs quotas of k
// (0 for an admin key: not bound) and its usage of them.
func (s *Server) fillKeyUsage(ctx context.Context, k *lockstep.Key, lim *api.KeyLimits) error {
	lim.StorageBytes, lim.StorageBytesSource = s.storageQuota(k)
	lim.Runs, lim.RunsSource = s.runQuota(k)
	b, err := s.Store.KeyStorageBytes(ctx, k.ID)
	if err != nil {
		return err
	}
	lim.StorageBytesUsed = b
	lim.RunsActive = -1
	if s.Jobs != nil {
		if lim.RunsActive, err = s.activeRuns(ctx, k); err != nil {
			return err
		}
	}
	return nil
}

// activeRuns counts k's run jobs that hold a place: queued within the
// queue timeout (older ones are failed by it, or were left by a replica
// that died), or running under a lease that has not ended.
func (s *Server) activeRuns(ctx context.Context, k *lockstep.Key) (int, error) {
	now := time.Now()
	return s.Jobs.CountActiveRunJobs(ctx, k.ID, now.Add(-s.Config.RunJobQueueTimeout), now)
}

// checkRunQuota answers rate_limited when a non-admin k has as many run
// jobs queued or running as --quota-runs allows: an early answer; the
// create counts again in its own transaction (runBound), so concurrent
// creates, on one replica or several, cannot pass the quota together.
func (s *Server) checkRunQuota(ctx context.Context, c *gin.Context, k *lockstep.Key) error {
	q, _ := s.runQuota(k)
	if q <= 0 || s.Jobs == nil {
		return nil
	}
	n, err := s.activeRuns(ctx, k)
	if err != nil {
		return err
	}
	if n >= q {
		c.Header("Retry-After", "5")
		return lockstep.Errorf(lockstep.ERATELIMITED, "%s", s.runBound(k).Message(n))
	}
	return nil
}

// runBound is k's run quota as the store enforces it when a job is
// created (Max 0: not bound).
func (s *Server) runBound(k *lockstep.Key) lockstep.RunJobBound {
	q, from := s.runQuota(k)
	now := time.Now()
	return lockstep.RunJobBound{Max: q, QueuedSince: now.Add(-s.Config.RunJobQueueTimeout), Now: now, Message: func(n int) string {
		return fmt.Sprintf("run quota: key %s has %d run jobs queued or running, its limit is %d (%s): retry when one ends", k.Name, n, q, quotaName(from, "quota-runs"))
	}}
}

// checkStorageQuota answers rate_limited when a non-admin k's active
// workspaces have added at least --quota-storage-bytes to the object
// store. It runs before a write's body is read, so the write that
// crosses the limit completes and the next one is refused; promoting,
// abandoning or deleting a workspace takes its bytes off the count.
func (s *Server) checkStorageQuota(ctx context.Context, c *gin.Context, k *lockstep.Key) error {
	if k == nil {
		return nil
	}
	q, from := s.storageQuota(k)
	if q <= 0 {
		return nil
	}
	n, err := s.Store.KeyStorageBytes(ctx, k.ID)
	if err != nil {
		return err
	}
	if n >= q {
		c.Header("Retry-After", "60")
		return lockstep.Errorf(lockstep.ERATELIMITED, "storage quota: key %s's active workspaces hold %s written, its limit is %s (%s): promote, abandon or delete a workspace first", k.Name, byteCount(n), byteCount(q), quotaName(from, "quota-storage-bytes"))
	}
	return nil
}

// byteCount writes n bytes exactly and, past 1 KiB, in binary units too.
func byteCount(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d bytes", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%d bytes (%.1f %ciB)", n, float64(n)/float64(div), "KMGTP"[exp])
}
