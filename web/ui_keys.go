package web

import (
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/api"
	"github.com/lockstep-hq/lockstep/auth"
)

// keyRow is one line of the admin keys page (/ui/keys).
type keyRow struct {
	Key              *lockstep.Key
	Parent           string // the minting key's name ("" when none)
	Expired          bool
	WorkspacesActive int
	WorkspacesQuota  int // 0: unlimited
	UploadsActive    int
	UploadsQuota     int // 0: unlimited
	StorageBytes     int64
	StorageQuota     int64 // 0: unlimited
	RunsActive       int   // -1: run jobs not configured
	RunsQuota        int   // 0: unlimited
	// The key's own overrides (PUT /keys/{id}/quota) are marked "(key)".
	WorkspacesOwn, StorageOwn, RunsOwn bool
}

// handleKeys is GET /ui/keys (admins only): every key with its role,
// scope, expiry, parent, active workspaces against its quota and uploads
// in progress on this replica against the upload quota. Secrets are
// never stored, so never shown (the prefix is).
func (u *uiServer) handleKeys(c *gin.Context) {
	ctx := c.Request.Context()
	if err := auth.Require(auth.FromContext(ctx), lockstep.RoleAdmin); err != nil {
		u.fail(c, err)
		return
	}
	keys, err := u.s.Store.ListKeys(ctx)
	if err != nil {
		u.fail(c, err)
		return
	}
	names := make(map[string]string, len(keys))
	for _, k := range keys {
		names[k.ID] = k.Name
	}
	now := time.Now()
	rows := make([]keyRow, 0, len(keys))
	for _, k := range keys {
		n, err := u.s.Store.CountOwnedWorkspaces(ctx, k.ID)
		if err != nil {
			u.fail(c, err)
			return
		}
		r := keyRow{Key: k, Parent: names[k.ParentKeyID], Expired: k.ExpiresAt != nil && !k.ExpiresAt.After(now),
			WorkspacesActive: n, WorkspacesQuota: u.s.workspaceQuota(k), UploadsActive: u.s.keyUploads.count(k.ID)}
		if k.Role != lockstep.RoleAdmin {
			r.UploadsQuota = u.s.Config.QuotaUploads
		}
		var lim api.KeyLimits
		if err := u.s.fillKeyUsage(ctx, k, &lim); err != nil {
			u.fail(c, err)
			return
		}
		r.StorageBytes, r.StorageQuota, r.RunsActive, r.RunsQuota = lim.StorageBytesUsed, lim.StorageBytes, lim.RunsActive, lim.Runs
		r.WorkspacesOwn, r.StorageOwn, r.RunsOwn = k.QuotaWorkspaces != nil, lim.StorageBytesSource == quotaFromKey, lim.RunsSource == quotaFromKey
		if k.ParentKeyID != "" && r.Parent == "" {
			r.Parent = k.ParentKeyID
		}
		rows = append(rows, r)
	}
	u.render(c, http.StatusOK, "keys", view{Title: "API keys", Section: "keys", D: struct{ Keys []keyRow }{rows}})
}
