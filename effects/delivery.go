package effects

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/gate"
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
	guarded, open := gate.Clients(s.cfg.Timeout, s.cfg.AllowHosts, "--effect-allow-hosts")
	// A live worker holds a row for one request (Timeout) and its record;
	// a row whose worker died is sent again once the lease ends, with
	// the same Idempotency-Key.
	lease := 2*s.cfg.Timeout + 5*time.Second
	gate.DrainOutbox(ctx, s.cfg.PollInterval, s.wake,
		func(ctx context.Context) ([]lockstep.EffectDelivery, error) {
			return s.store.ClaimEffectDeliveries(ctx, s.now(), lease, 16)
		},
		func(d lockstep.EffectDelivery) { s.deliver(ctx, guarded, open, d) },
		func(err error) { s.log.ErrorContext(ctx, "claim effects", "error", err) })
}

// deliver sends one attempt of a claimed row.
func (s *Service) deliver(ctx context.Context, guarded, open *http.Client, d lockstep.EffectDelivery) {
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
			req.Header.Set("webhook-signature", gate.SignStandard(s.cfg.SigningSecret, key, start, h.Body))
		}
		client := guarded
		if s.cfg.AllowHosts.HostAllowed(req.URL.Hostname()) {
			client = open
		}
		var resp *http.Response
		resp, err = client.Do(req)
		if err == nil {
			a.StatusCode = resp.StatusCode
			io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
			switch {
			case resp.StatusCode >= 300 && resp.StatusCode <= 399:
				err = fmt.Errorf("receiver answered %d (redirect to %q): redirects are not followed", resp.StatusCode, truncate(resp.Header.Get("Location"), 200))
			case resp.StatusCode < 200 || resp.StatusCode > 299:
				err = fmt.Errorf("receiver answered %d", resp.StatusCode)
			}
		} else {
			var ue interface{ Unwrap() error }
			if errors.As(err, &ue) && ctx.Err() == nil {
				err = ue.Unwrap()
			}
		}
	}
	if ctx.Err() != nil {
		return // shutting down: the lease ends and a worker retries
	}
	a.DurationMS = float64(s.now().Sub(start).Microseconds()) / 1000
	status, next := "succeeded", s.now()
	if err != nil {
		a.Error = truncate(err.Error(), 500)
		if a.Attempt >= s.cfg.MaxAttempts || (a.StatusCode >= 400 && a.StatusCode < 500 && a.StatusCode != 408 && a.StatusCode != 409 && a.StatusCode != 425 && a.StatusCode != 429) {
			status = "failed" // a 4xx other than a "try again" will not change
		} else {
			status = "pending"
			next = s.now().Add(s.backoff(a.Attempt))
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

// backoff is Backoff·2^(n-1) with ±20% jitter, capped.
func (s *Service) backoff(n int) time.Duration {
	d := s.cfg.Backoff
	for i := 1; i < n && d < s.cfg.MaxBackoff; i++ {
		d *= 2
	}
	if d > s.cfg.MaxBackoff {
		d = s.cfg.MaxBackoff
	}
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return strings.TrimSpace(s)
}
