package delivery

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/telemetry"
)

// HookConfig tunes hook deliveries (gate.Config carries it, with its
// defaults applied).
type HookConfig struct {
	// Timeout bounds one delivery request.
	Timeout time.Duration
	// MaxAttempts before a delivery is marked failed.
	MaxAttempts int
	// Backoff is the first retry delay; it doubles each attempt, with
	// ±20% jitter, up to MaxBackoff.
	Backoff, MaxBackoff time.Duration
	// PollInterval is how often the worker looks for due deliveries when
	// nothing woke it.
	PollInterval time.Duration
	// AllowHosts are targets allowed although internal.
	AllowHosts AllowList
}

// Hooks is the hook delivery worker: it drains the deliveries outbox the
// gate fills (hook registration and its rules stay in package gate).
type Hooks struct {
	cfg     HookConfig
	store   lockstep.Store
	log     *slog.Logger
	metrics *telemetry.Metrics
	now     func() time.Time
	wake    <-chan struct{}
}

// NewHooks returns a hook delivery worker; a value on wake makes it look
// for due deliveries before the next poll.
func NewHooks(cfg HookConfig, store lockstep.Store, log *slog.Logger, metrics *telemetry.Metrics, now func() time.Time, wake <-chan struct{}) *Hooks {
	return &Hooks{cfg: cfg, store: store, log: log, metrics: metrics, now: now, wake: wake}
}

// Run drains the outbox until ctx ends: it claims due deliveries (a lease
// in the metadata store, so replicas never send the same delivery at the
// same time), sends them, and records every attempt.
func (s *Hooks) Run(ctx context.Context) {
	sender := NewSender(s.cfg.Timeout, s.cfg.AllowHosts, "--hook-allow-hosts")
	lease := s.cfg.Timeout + 30*time.Second
	DrainOutbox(ctx, s.cfg.PollInterval, s.wake,
		func(ctx context.Context) ([]lockstep.Delivery, error) {
			return s.store.ClaimDeliveries(ctx, s.now(), lease, 16)
		},
		func(d lockstep.Delivery) { s.deliver(ctx, sender, d) },
		func(err error) { s.log.ErrorContext(ctx, "claim deliveries", "error", err) })
}

// deliver sends one attempt. The receiver gets the legacy
// X-Lockstep-Signature (HMAC of the body with the current secret) and the
// Standard Webhooks headers: webhook-id (the delivery id, the same on
// every retry), webhook-timestamp (this attempt's time) and
// webhook-signature (one v1 entry per secret in use: two during a
// rotation's overlap).
func (s *Hooks) deliver(ctx context.Context, sender *Sender, d lockstep.Delivery) {
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
		attempt.StatusCode, err = sender.Send(req)
	}
	if ctx.Err() != nil {
		return // shutting down: the lease expires and another run retries
	}
	attempt.DurationMS = float64(s.now().Sub(start).Microseconds()) / 1000
	status, next := lockstep.DeliverySucceeded, s.now()
	if err != nil {
		attempt.Error = Truncate(err.Error(), 500)
		if attempt.Attempt >= s.cfg.MaxAttempts {
			status = lockstep.DeliveryFailed
		} else {
			status = lockstep.DeliveryPending
			next = s.now().Add(Backoff(attempt.Attempt, s.cfg.Backoff, s.cfg.MaxBackoff))
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
