// Package client is the Go client of the Lockstep HTTP API; the lockstep
// CLI is built on it. Errors from the server come back as *lockstep.Error
// with the contract's code, message and details, so callers switch on
// lockstep.ErrorCode(err) exactly as the server does.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/lockstep-hq/lockstep"
)

// Client talks to one Lockstep server with one API key.
type Client struct {
	BaseURL string // e.g. http://127.0.0.1:7070
	Key     string
	HTTP    *http.Client
}

// New returns a client; baseURL defaults to http://127.0.0.1:7070.
func New(baseURL, key string) *Client {
	if baseURL == "" {
		baseURL = "http://127.0.0.1:7070"
	}
	return &Client{BaseURL: strings.TrimRight(baseURL, "/"), Key: key, HTTP: &http.Client{Timeout: 0}}
}

// Request sends one request. body may be nil, an io.Reader (sent as is
// with contentType) or a value encoded as JSON. out, when non-nil, receives
// the decoded JSON answer; a *[]byte or io.Writer receives the raw body.
func (c *Client) Request(ctx context.Context, method, path string, query url.Values, body any, contentType string, out any) (*http.Response, error) {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case io.Reader:
		rd = b
	default:
		buf, err := json.Marshal(b)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(buf)
		contentType = "application/json"
	}
	u := c.BaseURL + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if c.Key != "" {
		req.Header.Set("Authorization", "Bearer "+c.Key)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 400 {
		return resp, decodeError(resp)
	}
	switch o := out.(type) {
	case nil:
		io.Copy(io.Discard, resp.Body)
	case io.Writer:
		_, err = io.Copy(o, resp.Body)
	case *[]byte:
		*o, err = io.ReadAll(resp.Body)
	default:
		err = json.NewDecoder(resp.Body).Decode(out)
	}
	return resp, err
}

func decodeError(resp *http.Response) error {
	var env struct {
		Error struct {
			Code    string         `json:"code"`
			Message string         `json:"message"`
			Details map[string]any `json:"details"`
		} `json:"error"`
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err := json.Unmarshal(b, &env); err != nil || env.Error.Code == "" {
		return &lockstep.Error{Code: lockstep.EINTERNAL, Message: fmt.Sprintf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(b)))}
	}
	return &lockstep.Error{Code: env.Error.Code, Message: env.Error.Message, Details: env.Error.Details}
}

func (c *Client) get(ctx context.Context, path string, q url.Values, out any) error {
	_, err := c.Request(ctx, http.MethodGet, path, q, nil, "", out)
	return err
}

func (c *Client) post(ctx context.Context, path string, body, out any) error {
	_, err := c.Request(ctx, http.MethodPost, path, nil, body, "", out)
	return err
}

// Key is a key as listed by the server.
type Key = lockstep.Key

// CreatedKey is a new key with its secret (shown once).
type CreatedKey struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Role   string `json:"role"`
	Prefix string `json:"prefix"`
	Secret string `json:"secret"`
}

// CreateKey issues a key (admin only).
func (c *Client) CreateKey(ctx context.Context, name, role string) (*CreatedKey, error) {
	var out CreatedKey
	return &out, c.post(ctx, "/api/v1/keys", map[string]string{"name": name, "role": role}, &out)
}

// Keys lists keys (admin only).
func (c *Client) Keys(ctx context.Context) ([]*Key, error) {
	var out struct {
		Keys []*Key `json:"keys"`
	}
	return out.Keys, c.get(ctx, "/api/v1/keys", nil, &out)
}

// RevokeKey revokes a key (admin only).
func (c *Client) RevokeKey(ctx context.Context, id string) error {
	_, err := c.Request(ctx, http.MethodDelete, "/api/v1/keys/"+url.PathEscape(id), nil, nil, "", nil)
	return err
}

// OplogPage is one page of the operations log.
type OplogPage struct {
	Entries   []*lockstep.OpEntry `json:"entries"`
	NextAfter int64               `json:"next_after"`
}

// Oplog reads the operations log.
func (c *Client) Oplog(ctx context.Context, f lockstep.OpFilter) (*OplogPage, error) {
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

// VerifyOplog checks the operations log's hash chain.
func (c *Client) VerifyOplog(ctx context.Context) (*lockstep.VerifyResult, error) {
	var out lockstep.VerifyResult
	return &out, c.get(ctx, "/api/v1/oplog/verify", nil, &out)
}

// WaitReady polls /healthz until the server answers or ctx ends.
func (c *Client) WaitReady(ctx context.Context) error {
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.BaseURL+"/healthz", nil)
		resp, err := c.HTTP.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("server at %s not ready: %w", c.BaseURL, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
