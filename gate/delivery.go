package gate

import (
	"bytes"
	"context"
	"crypto/hmac"
	crand "crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/auth"
)

// Events a hook can subscribe to ("*" is every one).
var hookEvents = map[string]bool{"push": true, "promote": true, "rollback": true, "checkpoint": true, "*": true}

// HookRequest is the body of a hook registration.
type HookRequest struct {
	URL    string   `json:"url"`
	Secret string   `json:"secret"`
	Events []string `json:"events"`
}

// CreateHook registers a gate hook on a repository (admin or ci). The URL
// must be an absolute http(s) URL without credentials whose host is public
// or on the allow list (Config.HookAllowHosts).
func (s *Service) CreateHook(ctx context.Context, actor *lockstep.Key, repoName string, req HookRequest) (*lockstep.Hook, error) {
	if err := auth.Require(actor, lockstep.RoleAdmin, lockstep.RoleCI); err != nil {
		return nil, err
	}
	r, err := s.repos.Repo(ctx, repoName)
	if err != nil {
		return nil, err
	}
	if err := checkHookURL(ctx, req.URL, s.cfg.HookAllowHosts, s.cfg.Resolver); err != nil {
		return nil, err
	}
	if err := validSecret(req.Secret); err != nil {
		return nil, err
	}
	if len(req.Events) == 0 {
		req.Events = []string{"push", "promote", "rollback", "checkpoint"}
	}
	for _, e := range req.Events {
		if !hookEvents[e] {
			return nil, lockstep.Errorf(lockstep.EINVALID, "unknown hook event %q: want push, promote, rollback, checkpoint or *", e)
		}
	}
	h := &lockstep.Hook{ID: lockstep.NewID("hook_"), Repo: r.Name, RepoID: r.ID, URL: req.URL, Secret: req.Secret, Events: req.Events, Active: true}
	entry := &lockstep.OpEntry{KeyID: actor.ID, KeyName: actor.Name, Op: "hook.create", Repo: r.Name,
		Details: map[string]any{"hook_id": h.ID, "url": logURL(h.URL), "events": h.Events}}
	lockstep.StageResult(ctx, h)
	if err := s.store.CreateHook(ctx, h, entry); err != nil {
		return nil, err
	}
	return h, nil
}

// logURL is a hook URL as the operations log (readable by agents) keeps
// it: without a query, which may carry a receiver's token.
func logURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	if u.RawQuery != "" {
		u.RawQuery = "redacted"
	}
	u.User, u.Fragment = nil, ""
	return u.String()
}

func validSecret(secret string) error {
	if len(secret) < 16 {
		return lockstep.Errorf(lockstep.EINVALID, "hook secret must be at least 16 characters (it signs every delivery)")
	}
	if len(secret) > 1024 {
		return lockstep.Errorf(lockstep.EINVALID, "hook secret must be at most 1024 characters")
	}
	if strings.HasPrefix(secret, lockstep.SealPrefix) {
		return lockstep.Errorf(lockstep.EINVALID, "hook secret may not start with %q", lockstep.SealPrefix)
	}
	return nil
}

// canSeeHooks: hook URLs and delivery payloads are for the people who run
// CI, not for agents (403).
func canSeeHooks(actor *lockstep.Key) error {
	if actor == nil {
		return lockstep.Errorf(lockstep.EFORBIDDEN, "hooks are visible to admin, ci and reviewer keys")
	}
	return auth.Require(actor, lockstep.RoleAdmin, lockstep.RoleCI, lockstep.RoleReviewer)
}

// Hooks lists a repository's hooks (admin, ci, reviewer; agents get
// permission_denied). Credentials a URL registered before they were
// refused are redacted.
func (s *Service) Hooks(ctx context.Context, actor *lockstep.Key, repoName string) ([]lockstep.Hook, error) {
	if err := canSeeHooks(actor); err != nil {
		return nil, err
	}
	r, err := s.repos.Repo(ctx, repoName)
	if err != nil {
		return nil, err
	}
	hs, err := s.store.Hooks(ctx, r.ID)
	if hs == nil && err == nil {
		hs = []lockstep.Hook{}
	}
	for i := range hs {
		if u, perr := url.Parse(hs[i].URL); perr == nil {
			hs[i].URL = u.Redacted()
		}
		if hs[i].PrevSecretUntil != nil && !hs[i].PrevSecretUntil.After(s.now()) {
			hs[i].PrevSecretUntil = nil
		}
	}
	return hs, err
}

// Deliveries lists a hook's deliveries with every attempt (admin, ci,
// reviewer).
func (s *Service) Deliveries(ctx context.Context, actor *lockstep.Key, repoName, hookID string, limit int) ([]lockstep.Delivery, error) {
	if err := canSeeHooks(actor); err != nil {
		return nil, err
	}
	h, err := s.store.Hook(ctx, hookID)
	if err != nil {
		return nil, err
	}
	if h.Repo != repoName {
		return nil, lockstep.Errorf(lockstep.ENOTFOUND, "hook %s not found on %s", hookID, repoName)
	}
	ds, err := s.store.Deliveries(ctx, hookID, limit)
	if ds == nil && err == nil {
		ds = []lockstep.Delivery{}
	}
	return ds, err
}

// RotateRequest is the body of a secret rotation.
type RotateRequest struct {
	// Secret is the new secret; empty: a random "whsec_" secret is made.
	Secret string `json:"secret"`
	// OverlapSeconds is how long the old secret keeps signing too (a
	// second v1 signature); nil: 24 hours; 0: no overlap.
	OverlapSeconds *int64 `json:"overlap_seconds"`
}

// RotateResult is the answer of a rotation: the new secret, shown once.
type RotateResult struct {
	Hook                *lockstep.Hook `json:"hook"`
	Secret              string         `json:"secret"`
	PreviousSecretUntil *time.Time     `json:"previous_secret_until,omitempty"`
}

// MaxRotationOverlap bounds OverlapSeconds.
const MaxRotationOverlap = 30 * 24 * time.Hour

// RotateHook replaces a hook's secret (admin or ci). During the overlap
// every delivery carries a signature with each secret, so a receiver can
// switch to the new secret at any moment of it without refusing a
// delivery.
func (s *Service) RotateHook(ctx context.Context, actor *lockstep.Key, repoName, hookID string, req RotateRequest) (*RotateResult, error) {
	if err := auth.Require(actor, lockstep.RoleAdmin, lockstep.RoleCI); err != nil {
		return nil, err
	}
	h, err := s.store.Hook(ctx, hookID)
	if err != nil {
		return nil, err
	}
	if h.Repo != repoName {
		return nil, lockstep.Errorf(lockstep.ENOTFOUND, "hook %s not found on %s", hookID, repoName)
	}
	if !h.Active {
		return nil, lockstep.Errorf(lockstep.EINVALID, "hook %s is deleted", hookID)
	}
	overlap := 24 * time.Hour
	if req.OverlapSeconds != nil {
		if *req.OverlapSeconds < 0 || time.Duration(*req.OverlapSeconds)*time.Second > MaxRotationOverlap {
			return nil, lockstep.Errorf(lockstep.EINVALID, "overlap_seconds must be between 0 and %d", int64(MaxRotationOverlap/time.Second))
		}
		overlap = time.Duration(*req.OverlapSeconds) * time.Second
	}
	if req.Secret == "" {
		req.Secret = NewSecret()
	}
	if err := validSecret(req.Secret); err != nil {
		return nil, err
	}
	if req.Secret == h.Secret {
		return nil, lockstep.Errorf(lockstep.EINVALID, "the new secret is the current one")
	}
	prev, until := "", time.Time{}
	if overlap > 0 {
		prev, until = h.Secret, lockstep.TruncateTime(s.now().Add(overlap))
	}
	entry := &lockstep.OpEntry{KeyID: actor.ID, KeyName: actor.Name, Op: "hook.rotate", Repo: repoName,
		Details: map[string]any{"hook_id": hookID, "overlap_seconds": int64(overlap / time.Second)}}
	if err := s.store.RotateHookSecret(ctx, hookID, req.Secret, prev, until, entry); err != nil {
		return nil, err
	}
	h.Secret, h.PrevSecret, h.PrevSecretUntil = req.Secret, prev, nil
	if u, perr := url.Parse(h.URL); perr == nil {
		h.URL = u.Redacted()
	}
	res := &RotateResult{Hook: h, Secret: req.Secret}
	if prev != "" {
		h.PrevSecretUntil = &until
		res.PreviousSecretUntil = &until
	}
	return res, nil
}

// DeleteHook deactivates a hook (admin or ci); its deliveries stay
// readable.
func (s *Service) DeleteHook(ctx context.Context, actor *lockstep.Key, repoName, hookID string) error {
	if err := auth.Require(actor, lockstep.RoleAdmin, lockstep.RoleCI); err != nil {
		return err
	}
	h, err := s.store.Hook(ctx, hookID)
	if err != nil {
		return err
	}
	if h.Repo != repoName {
		return lockstep.Errorf(lockstep.ENOTFOUND, "hook %s not found on %s", hookID, repoName)
	}
	return s.store.DeactivateHook(ctx, hookID, &lockstep.OpEntry{KeyID: actor.ID, KeyName: actor.Name, Op: "hook.delete", Repo: repoName,
		Details: map[string]any{"hook_id": hookID}})
}

// NewSecret returns a random Standard Webhooks secret ("whsec_" + base64
// of 32 random bytes).
func NewSecret() string {
	b := make([]byte, 32)
	crand.Read(b)
	return "whsec_" + base64.StdEncoding.EncodeToString(b)
}

// Sign returns the X-Lockstep-Signature value of a body.
func Sign(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// Verify checks a signature in constant time (for receivers such as the
// runner).
func Verify(secret string, body []byte, signature string) bool {
	return hmac.Equal([]byte(Sign(secret, body)), []byte(signature))
}

// Body is the exact JSON sent for a delivery: its payload plus its id.
// Retries send the same bytes.
func Body(d lockstep.Delivery) []byte {
	var m map[string]any
	json.Unmarshal([]byte(d.Payload), &m)
	if m == nil {
		m = map[string]any{}
	}
	m["delivery_id"] = d.ID
	b, _ := json.Marshal(m)
	return b
}

// Run drains the outbox until ctx ends: it claims due deliveries (a lease
// in the metadata store, so replicas never send the same delivery at the
// same time), sends them, and records every attempt.
func (s *Service) Run(ctx context.Context) {
	guarded, open := hookClients(s.cfg.HookTimeout, s.cfg.HookAllowHosts)
	lease := s.cfg.HookTimeout + 30*time.Second
	DrainOutbox(ctx, s.cfg.PollInterval, s.wake,
		func(ctx context.Context) ([]lockstep.Delivery, error) {
			return s.store.ClaimDeliveries(ctx, s.now(), lease, 16)
		},
		func(d lockstep.Delivery) { s.deliver(ctx, guarded, open, d) },
		func(err error) { s.log.ErrorContext(ctx, "claim deliveries", "error", err) })
}

// deliver sends one attempt. The receiver gets the legacy
// X-Lockstep-Signature (HMAC of the body with the current secret) and the
// Standard Webhooks headers: webhook-id (the delivery id, the same on
// every retry), webhook-timestamp (this attempt's time) and
// webhook-signature (one v1 entry per secret in use: two during a
// rotation's overlap).
func (s *Service) deliver(ctx context.Context, guarded, open *http.Client, d lockstep.Delivery) {
	h, err := s.store.Hook(ctx, d.HookID)
	if err != nil {
		s.log.ErrorContext(ctx, "delivery hook", "delivery", d.ID, "error", err)
		return
	}
	if !h.Active {
		return // deleted after the claim: DeactivateHook already marked it failed
	}
	body := Body(d)
	start := s.now()
	attempt := lockstep.DeliveryAttempt{Attempt: d.Attempts + 1, At: lockstep.TruncateTime(start)}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.URL, bytes.NewReader(body))
	if err == nil {
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("User-Agent", "lockstep-hooks")
		req.Header.Set("X-Lockstep-Event", d.Event)
		req.Header.Set("X-Lockstep-Delivery", d.ID)
		req.Header.Set("X-Lockstep-Signature", Sign(h.Secret, body))
		sigs := SignStandard(h.Secret, d.ID, start, body)
		if h.PrevSecret != "" && h.PrevSecretUntil != nil && start.Before(*h.PrevSecretUntil) {
			sigs += " " + SignStandard(h.PrevSecret, d.ID, start, body)
		}
		req.Header.Set("webhook-id", d.ID)
		req.Header.Set("webhook-timestamp", strconv.FormatInt(start.Unix(), 10))
		req.Header.Set("webhook-signature", sigs)
		client := guarded
		if s.cfg.HookAllowHosts.hostAllowed(req.URL.Hostname()) {
			client = open
		}
		var resp *http.Response
		resp, err = client.Do(req)
		if err == nil {
			attempt.StatusCode = resp.StatusCode
			io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
			switch {
			case resp.StatusCode >= 300 && resp.StatusCode <= 399:
				err = fmt.Errorf("receiver answered %d (redirect to %q): redirects are not followed; register the final URL", resp.StatusCode, truncate(resp.Header.Get("Location"), 200))
			case resp.StatusCode < 200 || resp.StatusCode > 299:
				err = fmt.Errorf("receiver answered %d", resp.StatusCode)
			}
		} else {
			var be *blockedError
			if errors.As(err, &be) {
				err = be // the reason, without the transport's wrapping
			}
		}
	}
	if ctx.Err() != nil {
		return // shutting down: the lease expires and another run retries
	}
	attempt.DurationMS = float64(s.now().Sub(start).Microseconds()) / 1000
	status, next := lockstep.DeliverySucceeded, s.now()
	if err != nil {
		attempt.Error = truncate(err.Error(), 500)
		if attempt.Attempt >= s.cfg.HookMaxAttempts {
			status = lockstep.DeliveryFailed
		} else {
			status = lockstep.DeliveryPending
			next = s.now().Add(s.backoff(attempt.Attempt))
			n := lockstep.TruncateTime(next)
			attempt.NextRetryAt = &n
		}
	}
	result := "ok"
	if err != nil {
		result = "error"
	}
	s.metrics.ObserveOp("hook.delivery", result, s.now().Sub(start))
	if rerr := s.store.RecordAttempt(context.WithoutCancel(ctx), d.ID, attempt, status, next); rerr != nil {
		s.log.ErrorContext(ctx, "record delivery attempt", "delivery", d.ID, "error", rerr)
	}
}

// backoff is HookBackoff·2^(n-1) with ±20% jitter, capped.
func (s *Service) backoff(n int) time.Duration {
	d := s.cfg.HookBackoff
	for i := 1; i < n && d < s.cfg.HookMaxBackoff; i++ {
		d *= 2
	}
	if d > s.cfg.HookMaxBackoff {
		d = s.cfg.HookMaxBackoff
	}
	j := 0.8 + 0.4*rand.Float64()
	return time.Duration(float64(d) * j)
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return strings.TrimSpace(s)
}
