package client

import (
	"context"
	"net/url"
	"strconv"

	"github.com/lockstep-hq/lockstep/api"
)

// StageEffect stages an outward HTTP effect on a workspace: it is sent
// only when the workspace is promoted (and discarded by a checkpoint
// restore to before it, a failed run, or the workspace failing).
// invalid_argument for a bad method, URL or target; too_large for a body
// over the server's limit.
func (c *Client) StageEffect(ctx context.Context, ws string, req api.EffectRequest) (api.Effect, error) {
	var out api.Effect
	err := c.post(ctx, repoPath(ws, "effects"), req, &out)
	return out, err
}

// Effects lists one page of a workspace's effects in staging order
// (after: a seq, 0 for the start; limit 0: the server's default) and the
// after of the next page (0 on the last).
func (c *Client) Effects(ctx context.Context, ws string, after int64, limit int) ([]api.Effect, int64, error) {
	q := url.Values{}
	if after > 0 {
		q.Set("after", strconv.FormatInt(after, 10))
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out api.EffectList
	err := c.get(ctx, repoPath(ws, "effects"), q, &out)
	if out.Effects == nil {
		out.Effects = []api.Effect{}
	}
	return out.Effects, out.NextAfter, err
}

// Effect returns one effect with its delivery attempts.
func (c *Client) Effect(ctx context.Context, repo, id string) (api.Effect, error) {
	var out api.Effect
	err := c.get(ctx, repoPath(repo, "effects", url.PathEscape(id)), nil, &out)
	return out, err
}

// DiscardEffects discards a workspace's pending effects staged after
// req.AfterSeq (0: all), only those of req.RunID when set.
func (c *Client) DiscardEffects(ctx context.Context, ws string, req api.EffectDiscard) (api.EffectDiscardResult, error) {
	var out api.EffectDiscardResult
	err := c.post(ctx, repoPath(ws, "effects", "discard"), req, &out)
	if out.Discarded == nil {
		out.Discarded = []string{}
	}
	return out, err
}

// ApproveEffect releases a held effect (reviewer or admin).
func (c *Client) ApproveEffect(ctx context.Context, repo, id, reason string) (api.Effect, error) {
	var out api.Effect
	err := c.post(ctx, repoPath(repo, "effects", url.PathEscape(id), "approve"), api.EffectDecision{Reason: reason}, &out)
	return out, err
}

// RejectEffect discards a held effect (reviewer or admin).
func (c *Client) RejectEffect(ctx context.Context, repo, id, reason string) (api.Effect, error) {
	var out api.Effect
	err := c.post(ctx, repoPath(repo, "effects", url.PathEscape(id), "reject"), api.EffectDecision{Reason: reason}, &out)
	return out, err
}

// CompensateEffect queues the compensation of one released effect
// (admin or the workspace's owner): a new request, not an erasure.
func (c *Client) CompensateEffect(ctx context.Context, repo, id string) (api.Effect, error) {
	var out api.Effect
	err := c.post(ctx, repoPath(repo, "effects", url.PathEscape(id), "compensate"), nil, &out)
	return out, err
}

// CompensateCommit queues the compensations of every effect a promoted
// commit of the base released, newest first.
func (c *Client) CompensateCommit(ctx context.Context, base, commit string) (api.CompensateResult, error) {
	var out api.CompensateResult
	err := c.post(ctx, repoPath(base, "effects", "compensate"), api.CompensateRequest{Commit: commit}, &out)
	if out.Effects == nil {
		out.Effects = []api.Effect{}
	}
	return out, err
}
