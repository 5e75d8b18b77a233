package gate

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/auth"
	"github.com/lockstep-hq/lockstep/delivery"
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
// or on the allow list (Config.HookAllowHosts). The hook returned shows
// the URL redacted (lockstep.RedactURL); the store keeps its query sealed.
func (s *Service) CreateHook(ctx context.Context, actor *lockstep.Key, repoName string, req HookRequest) (*lockstep.Hook, error) {
	if err := CanManageHooks(actor, repoName); err != nil {
		return nil, err
	}
	r, err := s.repos.Repo(ctx, repoName)
	if err != nil {
		return nil, err
	}
	if err := delivery.CheckHookURL(ctx, req.URL, s.cfg.HookAllowHosts, s.cfg.Resolver); err != nil {
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
		Details: map[string]any{"hook_id": h.ID, "url": lockstep.RedactURL(h.URL), "events": h.Events}}
	// The answer (and the idempotent replay stored with it) shows the URL
	// as every view does: its query values redacted.
	shown := *h
	shown.URL = lockstep.RedactURL(h.URL)
	entry.Answer = &shown
	if err := s.store.CreateHook(ctx, h, entry); err != nil {
		return nil, err
	}
	return &shown, nil
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
// permission_denied). URLs are shown redacted (lockstep.RedactURL): query
// values, and credentials a URL registered before they were refused.
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
		hs[i].URL = lockstep.RedactURL(hs[i].URL)
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
	if err != nil {
		return nil, err
	}
	out := []lockstep.Delivery{}
	for _, d := range ds {
		if s.aboutScope(ctx, actor, d) {
			out = append(out, d)
		}
	}
	return out, nil
}

// aboutScope reports whether a scoped key may see delivery d: a hook of a
// task's base receives the events of every workspace forked from it, and
// their payloads name those workspaces (and their commits), so a scoped
// key sees only the deliveries about the repository itself or about a
// workspace of its scope (an unscoped key sees all; a payload that does
// not parse, or names a workspace that no longer exists, is hidden).
func (s *Service) aboutScope(ctx context.Context, actor *lockstep.Key, d lockstep.Delivery) bool {
	if actor == nil || actor.Scope == nil {
		return true
	}
	var p struct {
		Workspace string `json:"workspace"`
	}
	if err := json.Unmarshal([]byte(d.Payload), &p); err != nil {
		return false
	}
	if p.Workspace == "" {
		return true // about the hook's repository itself, which the route's scope check let through
	}
	ws, err := s.repos.Repo(ctx, p.Workspace)
	return err == nil && actor.InScope(ws) == nil
}

// CanManageHooks (create, rotate, delete a hook of repoName): admin or ci; a scoped key not on a task's base, whose
// hooks serve every task (it reads them, as a reviewer does, but a
// rotation would hand it the secret that signs other tasks' deliveries).
func CanManageHooks(actor *lockstep.Key, repoName string) error {
	if err := auth.Require(actor, lockstep.RoleAdmin, lockstep.RoleCI); err != nil {
		return err
	}
	if sc := actor.Scope; sc != nil && sc.Workspace == "" && repoName == sc.Base {
		return lockstep.Errorf(lockstep.EFORBIDDEN, "key %s is scoped to %s: it may not create, rotate or delete the hooks of base %s", actor.Name, sc, repoName)
	}
	return nil
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
	if err := CanManageHooks(actor, repoName); err != nil {
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
		req.Secret = delivery.NewSecret()
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
	h.URL = lockstep.RedactURL(h.URL)
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
	if err := CanManageHooks(actor, repoName); err != nil {
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

// Run drains the hook deliveries outbox until ctx ends (the worker is
// delivery.Hooks; Wake wakes it).
func (s *Service) Run(ctx context.Context) {
	delivery.NewHooks(delivery.HookConfig{
		Timeout: s.cfg.HookTimeout, MaxAttempts: s.cfg.HookMaxAttempts,
		Backoff: s.cfg.HookBackoff, MaxBackoff: s.cfg.HookMaxBackoff,
		PollInterval: s.cfg.PollInterval, AllowHosts: s.cfg.HookAllowHosts,
	}, s.store, s.log, s.metrics, s.now, s.wake).Run(ctx)
}
