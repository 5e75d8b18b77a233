package client

import (
	"context"
	"net/url"

	"github.com/lockstep-hq/lockstep/api"
)

// SetGate stores the gate policy of a base's branch (admin only;
// invalid_argument for a bad mode or glob).
func (c *Client) SetGate(ctx context.Context, repo string, p api.Policy) (*api.Policy, error) {
	var out api.Policy
	return &out, c.put(ctx, repoPath(repo, "gate"), p, &out)
}

// Gate returns a branch's gate policy ("" for the default branch;
// not_found when it has none).
func (c *Client) Gate(ctx context.Context, repo, branch string) (*api.Policy, error) {
	var q url.Values
	if branch != "" {
		q = url.Values{"branch": {branch}}
	}
	var out api.Policy
	return &out, c.get(ctx, repoPath(repo, "gate"), q, &out)
}

// EvaluateGate evaluates a workspace's commit ("" for its tip) against
// the gate of its base, without promoting.
func (c *Client) EvaluateGate(ctx context.Context, ws, commit string) (*api.Evaluation, error) {
	var q url.Values
	if commit != "" {
		q = url.Values{"commit": {commit}}
	}
	var out api.Evaluation
	return &out, c.get(ctx, repoPath(ws, "gate", "evaluate"), q, &out)
}

// PostCheck records a check result for a commit (role ci or admin;
// invalid_argument for an unknown status).
func (c *Client) PostCheck(ctx context.Context, repo, commit string, req api.CheckRequest) (*api.Check, error) {
	var out api.Check
	return &out, c.post(ctx, repoPath(repo, "commits", url.PathEscape(commit), "checks"), req, &out)
}

// Checks lists a commit's check results: the latest per name, and all.
func (c *Client) Checks(ctx context.Context, repo, commit string) (*api.CheckSet, error) {
	var out api.CheckSet
	return &out, c.get(ctx, repoPath(repo, "commits", url.PathEscape(commit), "checks"), nil, &out)
}

// Promote lands a workspace's commit in its base's branch through the
// gate: gate_failed (details: reasons) when the gate refuses,
// ref_conflict when the commit is no longer the tip asked for.
func (c *Client) Promote(ctx context.Context, ws string, req api.PromoteRequest) (*api.PromoteResult, error) {
	var out api.PromoteResult
	return &out, c.post(ctx, repoPath(ws, "promote"), req, &out)
}
