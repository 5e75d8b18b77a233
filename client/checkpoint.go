package client

import (
	"context"
	"net/url"
	"strconv"

	"github.com/lockstep-hq/lockstep/api"
)

// BindDatabase binds a base to a template database on the branch server
// (admin only; unavailable when database branching is off).
func (c *Client) BindDatabase(ctx context.Context, repo, template string) (*api.Database, error) {
	var out api.Database
	return &out, c.put(ctx, repoPath(repo, "database"), api.DatabaseRequest{Template: template}, &out)
}

// Database shows a repository's database binding: a base's template, a
// workspace's branch and DSN (not_found when there is none).
func (c *Client) Database(ctx context.Context, repo string) (*api.Database, error) {
	var out api.Database
	return &out, c.get(ctx, repoPath(repo, "database"), nil, &out)
}

// Redis returns a workspace's Redis branch and its URL (created on first
// use; not_configured when the server has no Redis branching).
func (c *Client) Redis(ctx context.Context, ws string) (*api.Redis, error) {
	var out api.Redis
	return &out, c.get(ctx, repoPath(ws, "redis"), nil, &out)
}

// RefreshDatabase re-reads a base's template (admin only).
func (c *Client) RefreshDatabase(ctx context.Context, repo string) (*api.Database, error) {
	var out api.Database
	return &out, c.post(ctx, repoPath(repo, "database", "refresh"), nil, &out)
}

// CreateCheckpoint records a checkpoint of a workspace: its branch's
// commit, a database snapshot (when it has a branch) and the id of a
// filesystem snapshot taken by the caller.
func (c *Client) CreateCheckpoint(ctx context.Context, ws string, req api.CheckpointRequest) (*api.Checkpoint, error) {
	var out api.Checkpoint
	return &out, c.post(ctx, repoPath(ws, "checkpoints"), req, &out)
}

// Checkpoints lists a workspace's checkpoints, newest first (limit 0:
// the server's default); never nil.
func (c *Client) Checkpoints(ctx context.Context, ws string, limit int) ([]api.Checkpoint, error) {
	var q url.Values
	if limit > 0 {
		q = url.Values{"limit": {strconv.Itoa(limit)}}
	}
	var out api.CheckpointList
	err := c.get(ctx, repoPath(ws, "checkpoints"), q, &out)
	if out.Checkpoints == nil {
		out.Checkpoints = []api.Checkpoint{}
	}
	return out.Checkpoints, err
}

// RestoreCheckpoint rolls a workspace's code and database back to a
// checkpoint (not_found for an unknown id; ref_conflict when ExpectOID no
// longer holds; a partial restore's error details say which part failed).
func (c *Client) RestoreCheckpoint(ctx context.Context, ws, id string, req api.RestoreRequest) (*api.RestoreResult, error) {
	var out api.RestoreResult
	return &out, c.post(ctx, repoPath(ws, "checkpoints", url.PathEscape(id), "restore"), req, &out)
}
