package gate

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/auth"
	"github.com/lockstep-hq/lockstep/sqlstore"
)

// Events a hook can subscribe to ("*" is every one).
var hookEvents = map[string]bool{"push": true, "promote": true, "rollback": true, "checkpoint": true, "*": true}

// HookRequest is the body of a hook registration.
type HookRequest struct {
	URL    string   `json:"url"`
	Secret string   `json:"secret"`
	Events []string `json:"events"`
}

// CreateHook registers a gate hook on a repository (admin or ci).
func (s *Service) CreateHook(ctx context.Context, actor *lockstep.Key, repoName string, req HookRequest) (*lockstep.Hook, error) {
	if err := auth.Require(actor, lockstep.RoleAdmin, lockstep.RoleCI); err != nil {
		return nil, err
	}
	r, err := s.repos.Repo(ctx, repoName)
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(req.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, lockstep.Errorf(lockstep.EINVALID, "hook url %q: want an absolute http(s) URL", req.URL)
	}
	if len(req.Secret) < 16 {
		return nil, lockstep.Errorf(lockstep.EINVALID, "hook secret must be at least 16 characters (it signs every delivery)")
	}
	if len(req.Events) == 0 {
		req.Events = []string{"push", "promote", "rollback", "checkpoint"}
	}
	for _, e := range req.Events {
		if !hookEvents[e] {
			return nil, lockstep.Errorf(lockstep.EINVALID, "unknown hook event %q: want push, promote, rollback, checkpoint or *", e)
		}
	}
	h := &lockstep.Hook{ID: sqlstore.NewID("hook_"), Repo: r.Name, RepoID: r.ID, URL: req.URL, Secret: req.Secret, Events: req.Events, Active: true}
	entry := &lockstep.OpEntry{KeyID: actor.ID, KeyName: actor.Name, Op: "hook.create", Repo: r.Name,
		Details: map[string]any{"hook_id": h.ID, "url": h.URL, "events": h.Events}}
	lockstep.StageResult(ctx, h)
	if err := s.store.CreateHook(ctx, h, entry); err != nil {
		return nil, err
	}
	return h, nil
}

// Hooks lists a repository's hooks.
func (s *Service) Hooks(ctx context.Context, repoName string) ([]lockstep.Hook, error) {
	r, err := s.repos.Repo(ctx, repoName)
	if err != nil {
		return nil, err
	}
	hs, err := s.store.Hooks(ctx, r.ID)
	if hs == nil && err == nil {
		hs = []lockstep.Hook{}
	}
	return hs, err
}

// Deliveries lists a hook's deliveries with every attempt.
func (s *Service) Deliveries(ctx context.Context, repoName, hookID string, limit int) ([]lockstep.Delivery, error) {
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
	client := &http.Client{Timeout: s.cfg.HookTimeout}
	lease := s.cfg.HookTimeout + 30*time.Second
	t := time.NewTicker(s.cfg.PollInterval)
	defer t.Stop()
	for {
		for {
			ds, err := s.store.ClaimDeliveries(ctx, s.now(), lease, 16)
			if err != nil {
				if ctx.Err() == nil {
					s.log.ErrorContext(ctx, "claim deliveries", "error", err)
				}
				break
			}
			if len(ds) == 0 {
				break
			}
			var wg sync.WaitGroup
			for _, d := range ds {
				wg.Add(1)
				go func(d lockstep.Delivery) {
					defer wg.Done()
					s.deliver(ctx, client, d)
				}(d)
			}
			wg.Wait()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.wake:
		}
	}
}

func (s *Service) deliver(ctx context.Context, client *http.Client, d lockstep.Delivery) {
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
		var resp *http.Response
		resp, err = client.Do(req)
		if err == nil {
			attempt.StatusCode = resp.StatusCode
			io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
			if resp.StatusCode < 200 || resp.StatusCode > 299 {
				err = fmt.Errorf("receiver answered %d", resp.StatusCode)
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
