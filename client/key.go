package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/api"
)

// Key is a key as listed by the server.
type Key = api.Key

// CreatedKey is a new key with its secret (shown once).
type CreatedKey = api.CreatedKey

// OplogPage is one page of the operations log.
type OplogPage = api.OplogPage

// CreateKey issues a key (admin only; permission_denied otherwise,
// invalid_argument for an unknown role). The secret is shown once: when
// the answer carrying it was lost and a retry got the replay (which never
// holds a secret), the error is already_exists naming the key to revoke.
func (c *Client) CreateKey(ctx context.Context, name, role string) (*CreatedKey, error) {
	var out CreatedKey
	if err := c.post(ctx, "/api/v1/keys", api.KeyCreateRequest{Name: name, Role: role}, &out); err != nil {
		return &out, err
	}
	if out.Secret == "" {
		return &out, lockstep.Errorf(lockstep.ECONFLICT, "key %s (%s) was created, but the answer carrying its secret was lost on the way and secrets are shown once: revoke it (lockstep keys revoke %s) and create another", out.ID, out.Name, out.ID)
	}
	return &out, nil
}

// Keys lists keys (admin only).
func (c *Client) Keys(ctx context.Context) ([]*Key, error) {
	var out api.KeyList
	return out.Keys, c.get(ctx, "/api/v1/keys", nil, &out)
}

// RevokeKey revokes a key (admin only; not_found for an unknown id).
func (c *Client) RevokeKey(ctx context.Context, id string) error {
	return c.del(ctx, "/api/v1/keys/"+url.PathEscape(id), nil, nil)
}

// Whoami returns the key the client authenticates with
// (unauthenticated for an unknown or revoked key).
func (c *Client) Whoami(ctx context.Context) (*Key, error) {
	var out Key
	return &out, c.get(ctx, "/api/v1/whoami", nil, &out)
}

// Oplog reads one page of the operations log (an agent key sees only its
// own operations; invalid_argument for a limit outside 1-1000).
func (c *Client) Oplog(ctx context.Context, f api.OplogQuery) (*OplogPage, error) {
	q := url.Values{}
	if f.Repo != "" {
		q.Set("repo", f.Repo)
	}
	if f.KeyID != "" {
		q.Set("key", f.KeyID)
	}
	if f.Op != "" {
		q.Set("op", f.Op)
	}
	if f.After > 0 {
		q.Set("after", fmt.Sprint(f.After))
	}
	if f.Limit > 0 {
		q.Set("limit", fmt.Sprint(f.Limit))
	}
	if f.Newest {
		q.Set("order", "desc")
	}
	var out OplogPage
	return &out, c.get(ctx, "/api/v1/oplog", q, &out)
}

// VerifyOplog checks the operations log's hash chain (admin, reviewer or
// ci; permission_denied for an agent key).
func (c *Client) VerifyOplog(ctx context.Context) (*api.VerifyResult, error) {
	var out api.VerifyResult
	return &out, c.get(ctx, "/api/v1/oplog/verify", nil, &out)
}

// Health asks GET /healthz (no key needed).
func (c *Client) Health(ctx context.Context) (*api.Health, error) {
	var out api.Health
	return &out, c.get(ctx, "/healthz", nil, &out)
}

// Ready asks GET /readyz once (no retry: a 503 here is an answer, not a
// passing failure). A server that is up but not ready answers 503 with
// the readiness in the body: the error is then unavailable and the value
// still says which check failed.
func (c *Client) Ready(ctx context.Context) (*api.Readiness, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.BaseURL+"/readyz", nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	var out api.Readiness
	if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusServiceUnavailable {
		if err := json.Unmarshal(b, &out); err == nil {
			if !out.Ready {
				return &out, newError(resp.StatusCode, lockstep.EUNAVAILABLE, "server not ready", map[string]any{"checks": out.Checks})
			}
			return &out, nil
		}
	}
	return nil, decodeErrorBody(resp.StatusCode, b)
}

// Metrics returns the Prometheus text exposition of GET /metrics.
func (c *Client) Metrics(ctx context.Context) ([]byte, error) {
	var raw []byte
	return raw, c.get(ctx, "/metrics", nil, &raw)
}

// OpenAPI returns the API's OpenAPI document as JSON
// (GET /api/v1/openapi.json).
func (c *Client) OpenAPI(ctx context.Context) ([]byte, error) {
	var raw []byte
	return raw, c.get(ctx, "/api/v1/openapi.json", nil, &raw)
}

// MintKey issues a key that expires after ttl (0: never) and, with a
// scope, acts only on one workspace or one task's workspaces. An agent
// key mints only scoped agent keys (ttl at most 24h); revoking the
// minting key revokes it.
func (c *Client) MintKey(ctx context.Context, name, role string, ttl time.Duration, scope *api.KeyScope) (*CreatedKey, error) {
	req := api.KeyCreateRequest{Name: name, Role: role, Scope: scope}
	if ttl > 0 {
		req.TTL = ttl.String()
	}
	var out CreatedKey
	if err := c.post(ctx, "/api/v1/keys", req, &out); err != nil {
		return &out, err
	}
	if out.Secret == "" {
		return &out, lockstep.Errorf(lockstep.ECONFLICT, "key %s (%s) was created, but the answer carrying its secret was lost on the way and secrets are shown once: revoke it (lockstep keys revoke %s) and create another", out.ID, out.Name, out.ID)
	}
	return &out, nil
}

// SetKeyQuota replaces a key's quota overrides (admin): active
// workspaces, storage bytes, concurrent runs; each nil restores the
// server's setting, 0 is unlimited.
func (c *Client) SetKeyQuota(ctx context.Context, id string, q api.KeyQuotaRequest) error {
	return c.put(ctx, "/api/v1/keys/"+url.PathEscape(id)+"/quota", q, nil)
}
