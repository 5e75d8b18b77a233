package effects

import (
	"bytes"
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/delivery"
)

// IdempotencyKey is the key every attempt of an outbox row carries: the
// effect id, with ".compensation" for its compensation. It is also the
// webhook-id.
func IdempotencyKey(e *lockstep.Effect, kind string) string {
	if kind == lockstep.EffectKindCompensation {
		return e.ID + ".compensation"
	}
	return e.ID
}

// Run drains the effects outbox until ctx ends: it claims due rows (a
// lease in the metadata store: replicas never send the same row at the
// same time; a row whose worker died is taken over when its lease ends),
// sends them and records every attempt. Rows of one workspace go in
// staging order (compensations newest first).
func (s *Service) Run(ctx context.Context) {
	sender := delivery.NewSender(s.cfg.Timeout, s.cfg.AllowHosts, "--effect-allow-hosts")
	// A live worker holds a row for one request (Timeout) and its record;
	// a row whose worker died is sent again once the lease ends, with
	// the same Idempotency-Key.
	lease := 2*s.cfg.Timeout + 5*time.Second
	delivery.DrainOutbox(ctx, s.cfg.PollInterval, s.wake,
		func(ctx context.Context) ([]lockstep.EffectDelivery, error) {
			return s.store.ClaimEffectDeliveries(ctx, s.now(), lease, 16)
		},
		func(d lockstep.EffectDelivery) { s.deliver(ctx, sender, d) },
		func(err error) { s.log.ErrorContext(ctx, "claim effects", "error", err) })
}

// deliver sends one attempt of a claimed row.
func (s *Service) deliver(ctx context.Context, sender *delivery.Sender, d lockstep.EffectDelivery) {
	e := &d.Effect
	h := e.Request
	if d.Kind == lockstep.EffectKindCompensation {
		if e.Compensation == nil {
			s.record(ctx, d, lockstep.EffectAttempt{Kind: d.Kind, Attempt: d.Attempts + 1, At: lockstep.TruncateTime(s.now()), Error: "no compensation"}, "failed", s.now())
			return
		}
		h = *e.Compensation
	}
	start := s.now()
	a := lockstep.EffectAttempt{Kind: d.Kind, Attempt: d.Attempts + 1, At: lockstep.TruncateTime(start)}
	req, err := http.NewRequestWithContext(ctx, h.Method, h.URL, bytes.NewReader(h.Body))
	if err == nil {
		key := IdempotencyKey(e, d.Kind)
		for k, v := range h.Headers {
			req.Header.Set(k, v)
		}
		if req.Header.Get("User-Agent") == "" {
			req.Header.Set("User-Agent", "lockstep-effects")
		}
		if req.Header.Get("Idempotency-Key") == "" {
			req.Header.Set("Idempotency-Key", key)
		}
		req.Header.Set("X-Lockstep-Effect", e.ID)
		req.Header.Set("X-Lockstep-Effect-Kind", d.Kind)
		req.Header.Set("X-Lockstep-Workspace", e.Repo)
		req.Header.Set("webhook-id", key)
		req.Header.Set("webhook-timestamp", strconv.FormatInt(start.Unix(), 10))
		if s.cfg.SigningSecret != "" {
			req.Header.Set("webhook-signature", delivery.SignStandard(s.cfg.SigningSecret, key, start, h.Body))
		}
		a.StatusCode, err = sender.Send(req)
	}
	if ctx.Err() != nil {
		return // shutting down: the lease ends and a worker retries
	}
	a.DurationMS = float64(s.now().Sub(start).Microseconds()) / 1000
	status, next := "succeeded", s.now()
	if err != nil {
		a.Error = delivery.Truncate(err.Error(), 500)
		if a.Attempt >= s.cfg.MaxAttempts || (a.StatusCode >= 400 && a.StatusCode < 500 && a.StatusCode != 408 && a.StatusCode != 409 && a.StatusCode != 425 && a.StatusCode != 429) {
			status = "failed" // a 4xx other than a "try again" will not change
		} else {
			status = "pending"
			next = s.now().Add(delivery.Backoff(a.Attempt, s.cfg.Backoff, s.cfg.MaxBackoff))
		}
	}
	result := "ok"
	if err != nil {
		result = "error"
	}
	if s.metrics != nil {
		s.metrics.ObserveOp("effect.delivery", result, s.now().Sub(start))
	}
	s.record(ctx, d, a, status, next)
}

func (s *Service) record(ctx context.Context, d lockstep.EffectDelivery, a lockstep.EffectAttempt, status string, next time.Time) {
	if err := s.store.RecordEffectAttempt(context.WithoutCancel(ctx), d, a, status, next); err != nil {
		s.log.ErrorContext(ctx, "record effect attempt", "effect", d.Effect.ID, "error", err)
	}
	if status != "pending" {
		s.Wake() // the next row of the lane may be due now
	}
}
