package client

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lockstep-hq/lockstep/api"
)

// DefaultWebhookTolerance is how far a delivery's webhook-timestamp may
// be from the receiver's clock (either way) before it is refused.
const DefaultWebhookTolerance = 5 * time.Minute

// Errors of VerifyWebhook and ReplayCache.Check.
var (
	// ErrWebhookSignature: headers missing or malformed, or no signature
	// matches any of the secrets (a forgery, or the wrong secret).
	ErrWebhookSignature = errors.New("webhook: no valid signature")
	// ErrWebhookTimestamp: the timestamp is outside the tolerance window
	// (a delivery captured and replayed later, or a badly wrong clock).
	ErrWebhookTimestamp = errors.New("webhook: timestamp outside the tolerance window")
	// ErrWebhookReplayed: this exact delivery (id and timestamp) was
	// already accepted: a replay. Refuse it.
	ErrWebhookReplayed = errors.New("webhook: delivery replayed")
	// ErrWebhookDuplicate: the id was accepted before with another
	// timestamp, so the sender signed it again: its own retry after it
	// did not see the answer. Do not act again, but answer 2xx so the
	// sender stops retrying.
	ErrWebhookDuplicate = errors.New("webhook: delivery already received")
)

// Webhook is a verified delivery's identity.
type Webhook struct {
	ID        string    // webhook-id: the delivery id, the same on every retry
	Timestamp time.Time // webhook-timestamp of this attempt
}

// VerifyWebhook checks a gate-hook delivery the Standard Webhooks way:
// webhook-signature holds space-separated "v1,<base64>" entries, each an
// HMAC-SHA256 of "<webhook-id>.<webhook-timestamp>.<body>"; one of them
// must match one of secrets (several during a rotation: pass the old and
// the new), and the timestamp must be within tolerance of now (0 means
// DefaultWebhookTolerance). A "whsec_" secret is base64 of the key bytes;
// any other secret is used as its bytes. Comparison is constant-time.
//
// Signatures do not stop a replay inside the window: pass the result to a
// ReplayCache.
func VerifyWebhook(secrets []string, h http.Header, body []byte, now time.Time, tolerance time.Duration) (Webhook, error) {
	if tolerance <= 0 {
		tolerance = DefaultWebhookTolerance
	}
	id, tsRaw, sigs := h.Get("webhook-id"), h.Get("webhook-timestamp"), h.Get("webhook-signature")
	if id == "" || tsRaw == "" || sigs == "" {
		return Webhook{}, fmt.Errorf("%w: webhook-id, webhook-timestamp and webhook-signature are required", ErrWebhookSignature)
	}
	sec, err := strconv.ParseInt(tsRaw, 10, 64)
	if err != nil {
		return Webhook{}, fmt.Errorf("%w: webhook-timestamp %q is not unix seconds", ErrWebhookSignature, tsRaw)
	}
	ts := time.Unix(sec, 0)
	if d := now.Sub(ts); d > tolerance || d < -tolerance {
		return Webhook{}, fmt.Errorf("%w: %s is %s from now (tolerance %s)", ErrWebhookTimestamp, ts.UTC().Format(time.RFC3339), d.Round(time.Second), tolerance)
	}
	for _, secret := range secrets {
		if secret == "" {
			continue
		}
		m := hmac.New(sha256.New, webhookKey(secret))
		m.Write([]byte(id + "." + tsRaw + "."))
		m.Write(body)
		want := m.Sum(nil)
		for _, f := range strings.Fields(sigs) {
			v, b64, ok := strings.Cut(f, ",")
			if !ok || v != "v1" {
				continue // other schemes (v1a …) are not ours
			}
			got, err := base64.StdEncoding.DecodeString(b64)
			if err == nil && hmac.Equal(got, want) {
				return Webhook{ID: id, Timestamp: ts}, nil
			}
		}
	}
	return Webhook{}, ErrWebhookSignature
}

// webhookKey is delivery.WebhookKey (kept here so the client needs no server
// package).
func webhookKey(secret string) []byte {
	if rest, ok := strings.CutPrefix(secret, "whsec_"); ok {
		if k, err := base64.StdEncoding.DecodeString(rest); err == nil && len(k) > 0 {
			return k
		}
	}
	return []byte(secret)
}

// ReplayCache remembers accepted delivery ids so a delivery is acted on
// once. An id is kept for twice the tolerance after its timestamp: older
// copies fail VerifyWebhook's window anyway. Safe for concurrent use.
type ReplayCache struct {
	mu        sync.Mutex
	tolerance time.Duration
	seen      map[string]time.Time // id → timestamp first accepted
	max       int
}

// NewReplayCache returns a cache for deliveries verified with tolerance
// (0: DefaultWebhookTolerance) holding at most max ids (0: 100,000); when
// full, expired ids are dropped first and then the check refuses rather
// than forget (ErrWebhookReplayed).
func NewReplayCache(tolerance time.Duration, max int) *ReplayCache {
	if tolerance <= 0 {
		tolerance = DefaultWebhookTolerance
	}
	if max <= 0 {
		max = 100_000
	}
	return &ReplayCache{tolerance: tolerance, seen: map[string]time.Time{}, max: max}
}

// Check records a verified delivery. It returns nil the first time an id
// is seen, ErrWebhookReplayed when the same id and timestamp were seen (a
// replay: refuse), and ErrWebhookDuplicate when the id was seen with
// another timestamp (the sender's own retry: acknowledge, do nothing).
func (c *ReplayCache) Check(w Webhook, now time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if first, ok := c.seen[w.ID]; ok {
		if first.Equal(w.Timestamp) {
			return ErrWebhookReplayed
		}
		return ErrWebhookDuplicate
	}
	if len(c.seen) >= c.max {
		for id, ts := range c.seen {
			if now.Sub(ts) > 2*c.tolerance {
				delete(c.seen, id)
			}
		}
		if len(c.seen) >= c.max {
			return fmt.Errorf("%w: replay cache full", ErrWebhookReplayed)
		}
	}
	c.seen[w.ID] = w.Timestamp
	return nil
}

// Hook is a gate hook as the API shows it (the secret is never shown
// after creation or rotation).
type Hook = api.Hook

// CreateHook registers a gate hook (admin or ci); events nil means all.
// Returns invalid_argument for a bad URL, a short secret or an unknown
// event.
func (c *Client) CreateHook(ctx context.Context, repo, url, secret string, events []string) (*Hook, error) {
	var h Hook
	err := c.post(ctx, repoPath(repo, "hooks"), api.HookRequest{URL: url, Secret: secret, Events: events}, &h)
	return &h, err
}

// Hooks lists a repository's hooks (admin, ci, reviewer).
func (c *Client) Hooks(ctx context.Context, repo string) ([]Hook, error) {
	var out api.HookList
	err := c.get(ctx, repoPath(repo, "hooks"), nil, &out)
	return out.Hooks, err
}

// DeleteHook deactivates a hook (not_found for an unknown id).
func (c *Client) DeleteHook(ctx context.Context, repo, id string) error {
	return c.del(ctx, repoPath(repo, "hooks", url.PathEscape(id)), nil, nil)
}

// RotatedHook is the answer of RotateHook: the new secret, shown once.
type RotatedHook = api.RotateResult

// RotateHook replaces a hook's secret; secret "" lets the server make one.
// The old secret keeps signing (a second signature) for overlap (rounded
// down to seconds; negative: the server's default, 24 h; 0: none).
func (c *Client) RotateHook(ctx context.Context, repo, id, secret string, overlap time.Duration) (*RotatedHook, error) {
	body := api.RotateRequest{Secret: secret}
	if overlap >= 0 {
		s := int64(overlap / time.Second)
		body.OverlapSeconds = &s
	}
	var out RotatedHook
	err := c.post(ctx, repoPath(repo, "hooks", url.PathEscape(id), "rotate"), body, &out)
	return &out, err
}

// HookDeliveries lists a hook's newest deliveries with every attempt
// (limit 0: the server's default).
func (c *Client) HookDeliveries(ctx context.Context, repo, id string, limit int) ([]api.Delivery, error) {
	var out api.DeliveryList
	q := url.Values{}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	err := c.get(ctx, repoPath(repo, "hooks", url.PathEscape(id), "deliveries"), q, &out)
	return out.Deliveries, err
}
