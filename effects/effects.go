// Package effects is the effects outbox: outward HTTP requests an agent
// stages on its workspace (a webhook, a pull request, a payment) are held
// by Lockstep and sent only when the workspace is promoted, in staging
// order, exactly once per effect as far as the receiver is concerned (a
// stable Idempotency-Key and webhook-id on every retry). A checkpoint
// restore discards what was staged after the checkpoint, a failed run
// what the run staged, a failed or abandoned workspace everything still
// staged. A gate policy can hold classes of effects for a reviewer's
// approval. A released effect may carry a compensating request that a
// rollback of the base offers to run (a new event, not an erasure).
//
// Staging, discards, approvals and compensations are operations-log
// entries; the release is written by the promote's own transaction
// (lockstep.StatusChange.Effects), and the worker (Run) claims outbox rows
// with a lease, so replicas never send the same row at the same time and
// a server killed after the promote committed delivers at restart.
package effects

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/api"
	"github.com/lockstep-hq/lockstep/auth"
	"github.com/lockstep-hq/lockstep/delivery"
	"github.com/lockstep-hq/lockstep/gate"
	"github.com/lockstep-hq/lockstep/repositories"
	"github.com/lockstep-hq/lockstep/telemetry"
)

// Config tunes staging and delivery.
type Config struct {
	// AllowHosts are effect targets allowed although internal
	// (--effect-allow-hosts).
	AllowHosts delivery.AllowList
	// MaxBodyBytes bounds an effect's body and its compensation's (default
	// 1 MiB).
	MaxBodyBytes int
	// MaxStaged bounds a workspace's staged effects (default 1000).
	MaxStaged int
	// Timeout bounds one delivery (default 10s); MaxAttempts before an
	// effect is failed (default 8); Backoff doubles from Backoff to
	// MaxBackoff with ±20% jitter (defaults 2s, 10m).
	Timeout     time.Duration
	MaxAttempts int
	Backoff     time.Duration
	MaxBackoff  time.Duration
	// PollInterval is how often the worker looks for due rows (500ms).
	PollInterval time.Duration
	// SigningSecret, when set, signs every delivery (Standard Webhooks
	// webhook-signature, v1 over id.timestamp.body).
	SigningSecret string
	// Resolver checks a target's host at staging (nil: the system's).
	Resolver *net.Resolver
}

// Service stages, lists, discards, approves and delivers effects.
type Service struct {
	store   lockstep.Store
	repos   *repositories.Service
	log     *slog.Logger
	metrics *telemetry.Metrics
	now     func() time.Time
	cfg     Config
	wake    chan struct{}
}

// New returns the effects service.
func New(cfg Config, store lockstep.Store, repos *repositories.Service, log *slog.Logger, metrics *telemetry.Metrics, now func() time.Time) *Service {
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = slog.Default()
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 1 << 20
	}
	if cfg.MaxStaged <= 0 {
		cfg.MaxStaged = 1000
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = 8
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = 2 * time.Second
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 10 * time.Minute
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 500 * time.Millisecond
	}
	return &Service{store: store, repos: repos, log: log, metrics: metrics, now: now, cfg: cfg, wake: make(chan struct{}, 1)}
}

// MaxRequestBytes bounds the JSON body of a staging request: two bodies
// in base64 plus room for headers.
func (s *Service) MaxRequestBytes() int64 { return int64(s.cfg.MaxBodyBytes)*2*4/3 + 256<<10 }

// Wake tells the worker that rows may be due (after a promote, an
// approval, a compensation).
func (s *Service) Wake() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// CanStage is the rule of staging and discarding: whoever may move the
// workspace's refs (its owner or an admin), the workspace active.
func CanStage(actor *lockstep.Key, ws *lockstep.Repo) error {
	if ws.ForkOf == "" {
		return lockstep.Errorf(lockstep.EINVALID, "%s is a base repository: effects are staged on workspaces, released when they are promoted", ws.Name)
	}
	return repositories.CanMoveRefs(actor, ws)
}

// CanSee reports whether actor may read the effects of r (their targets,
// headers and bodies, which may carry customer data): admin, reviewer and
// CI keys, and an agent key only on a workspace it owns. Other agents get
// permission_denied, as for another agent's failed-run output.
func CanSee(actor *lockstep.Key, r *lockstep.Repo) error {
	if actor == nil {
		return lockstep.Errorf(lockstep.EUNAUTH, "no key")
	}
	if actor.Role != lockstep.RoleAgent || (r.ForkOf != "" && actor.Owns(r)) {
		return nil
	}
	return lockstep.Errorf(lockstep.EFORBIDDEN, "the effects of %s are visible to its owner, admins, reviewers and CI only", r.Name)
}

// Authorize checks that actor may stage on wsName, before the request
// body is read; it returns the workspace.
func (s *Service) Authorize(ctx context.Context, actor *lockstep.Key, wsName string) (*lockstep.Repo, error) {
	ws, err := s.repos.Repo(ctx, wsName)
	if err != nil {
		return nil, err
	}
	return ws, CanStage(actor, ws)
}

// secretHeaders are always sealed at rest and redacted when shown.
var secretHeaders = []string{"Authorization", "Cookie", "X-Api-Key", "Proxy-Authorization"}

// refusedHeaders are set by the transport or by Lockstep itself.
var refusedHeaders = map[string]bool{"Host": true, "Content-Length": true, "Transfer-Encoding": true, "Connection": true, "Upgrade": true,
	"Te": true, "Trailer": true, "Keep-Alive": true, "Proxy-Connection": true, "Webhook-Id": true, "Webhook-Timestamp": true, "Webhook-Signature": true,
	"X-Lockstep-Effect": true}

var methods = map[string]bool{http.MethodPost: true, http.MethodPut: true, http.MethodPatch: true, http.MethodDelete: true}

func validToken(s string) bool {
	if s == "" || len(s) > 100 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("!#$%&'*+-.^_`|~", c)) {
			return false
		}
	}
	return true
}

// buildHTTP validates one request description (part names it in errors).
func (s *Service) buildHTTP(ctx context.Context, part, method, rawURL string, headers map[string]string, body, body64 string, extraSecret []string) (lockstep.EffectHTTP, error) {
	h := lockstep.EffectHTTP{Method: strings.ToUpper(method), URL: rawURL}
	if !methods[h.Method] {
		return h, lockstep.Errorf(lockstep.EINVALID, "%s method %q: want POST, PUT, PATCH or DELETE (reads are not effects)", part, method)
	}
	if err := delivery.CheckTargetURL(ctx, rawURL, s.cfg.AllowHosts, s.cfg.Resolver, part, "--effect-allow-hosts (LOCKSTEP_EFFECT_ALLOW_HOSTS)"); err != nil {
		return h, err
	}
	if len(rawURL) > 4096 {
		return h, lockstep.Errorf(lockstep.EINVALID, "%s url: at most 4096 bytes", part)
	}
	if len(headers) > 64 {
		return h, lockstep.Errorf(lockstep.EINVALID, "%s: at most 64 headers", part)
	}
	secret := map[string]bool{}
	for _, k := range secretHeaders {
		secret[k] = true
	}
	for _, k := range extraSecret {
		if !validToken(k) {
			return h, lockstep.Errorf(lockstep.EINVALID, "secret_headers: %q is not a header name", k)
		}
		secret[http.CanonicalHeaderKey(k)] = true
	}
	total := 0
	if len(headers) > 0 {
		h.Headers = map[string]string{}
	}
	for k, v := range headers {
		if !validToken(k) {
			return h, lockstep.Errorf(lockstep.EINVALID, "%s header %q: not a valid header name", part, k)
		}
		ck := http.CanonicalHeaderKey(k)
		if refusedHeaders[ck] || strings.HasPrefix(ck, "Proxy-") && ck != "Proxy-Authorization" {
			return h, lockstep.Errorf(lockstep.EINVALID, "%s header %s is set by the transport or by Lockstep, not by an effect", part, ck)
		}
		if strings.ContainsAny(v, "\r\n\x00") {
			return h, lockstep.Errorf(lockstep.EINVALID, "%s header %s: the value may not contain CR, LF or NUL", part, ck)
		}
		if _, dup := h.Headers[ck]; dup {
			return h, lockstep.Errorf(lockstep.EINVALID, "%s header %s given twice", part, ck)
		}
		total += len(ck) + len(v)
		h.Headers[ck] = v
		if secret[ck] {
			h.Secret = append(h.Secret, ck)
		}
	}
	if total > 16<<10 {
		return h, lockstep.Errorf(lockstep.ETOOLARGE, "%s headers: over 16 KiB", part)
	}
	switch {
	case body != "" && body64 != "":
		return h, lockstep.Errorf(lockstep.EINVALID, "%s: body and body_base64 are exclusive", part)
	case body64 != "":
		b, err := base64.StdEncoding.DecodeString(body64)
		if err != nil {
			return h, lockstep.Errorf(lockstep.EINVALID, "%s body_base64: %v", part, err)
		}
		h.Body = b
	default:
		h.Body = []byte(body)
	}
	if len(h.Body) > s.cfg.MaxBodyBytes {
		return h, lockstep.Errorf(lockstep.ETOOLARGE, "%s body: %d bytes, limit %d (--effect-max-body-bytes)", part, len(h.Body), s.cfg.MaxBodyBytes)
	}
	return h, nil
}

func validLabel(what, v string, n int) error {
	if len(v) > n || !utf8.ValidString(v) || strings.ContainsAny(v, "\x00\r\n") {
		return lockstep.Errorf(lockstep.EINVALID, "%s: at most %d bytes of UTF-8 on one line", what, n)
	}
	return nil
}

// Stage validates req and stages it on the workspace. Errors:
// permission_denied, invalid_argument (method, URL, target, headers, a
// workspace not active), too_large (body, headers, the workspace's cap).
func (s *Service) Stage(ctx context.Context, actor *lockstep.Key, ws *lockstep.Repo, req api.EffectRequest) (*lockstep.Effect, error) {
	if err := CanStage(actor, ws); err != nil {
		return nil, err
	}
	main, err := s.buildHTTP(ctx, "effect", req.Method, req.URL, req.Headers, req.Body, req.BodyBase64, req.SecretHeaders)
	if err != nil {
		return nil, err
	}
	e := &lockstep.Effect{ID: lockstep.NewID("eff_"), RepoID: ws.ID, Repo: ws.Name, Request: main, Label: req.Label, Class: req.Class,
		RunID: req.RunID, Consuming: req.Consuming, KeyName: actor.Name}
	if c := req.Compensation; c != nil {
		comp, err := s.buildHTTP(ctx, "compensation", c.Method, c.URL, c.Headers, c.Body, c.BodyBase64, req.SecretHeaders)
		if err != nil {
			return nil, err
		}
		e.Compensation = &comp
	}
	if err := validLabel("label", req.Label, 200); err != nil {
		return nil, err
	}
	if err := validLabel("run_id", req.RunID, 128); err != nil {
		return nil, err
	}
	if req.Class != "" && !gate.ValidEffectClass(req.Class) {
		return nil, lockstep.Errorf(lockstep.EINVALID, "class %q: 1-64 of a-z, 0-9, '.', '_' and '-'", req.Class)
	}
	entry := &lockstep.OpEntry{KeyID: actor.ID, KeyName: actor.Name, Op: "effect.stage", Repo: ws.Name, TraceID: telemetry.TraceID(ctx),
		Details: map[string]any{"effect": e.ID, "method": main.Method, "url": lockstep.RedactURL(main.URL), "bytes": len(main.Body), "class": req.Class,
			"label": req.Label, "run_id": req.RunID, "consuming": req.Consuming, "compensation": e.Compensation != nil}}
	entry.Answer = (*Staged)(e)
	if err := s.store.StageEffect(ctx, e, s.cfg.MaxStaged, entry); err != nil {
		return nil, err
	}
	return e, nil
}

// List lists a repository's effects after a seq (any key may read; secret
// headers are redacted in the views).
func (s *Service) List(ctx context.Context, actor *lockstep.Key, repoName string, after int64, limit int) ([]lockstep.Effect, int64, error) {
	r, err := s.repos.Repo(ctx, repoName)
	if err != nil {
		return nil, 0, err
	}
	if actor != nil { // nil: an internal count (the task page shows counts only)
		if err := CanSee(actor, r); err != nil {
			return nil, 0, err
		}
	}
	if limit <= 0 {
		limit = 100
	}
	if limit > 1000 {
		return nil, 0, lockstep.Errorf(lockstep.EINVALID, "limit %d: at most 1000", limit)
	}
	list, err := s.store.Effects(ctx, r.ID, after, limit+1)
	if err != nil {
		return nil, 0, err
	}
	var next int64
	if len(list) > limit {
		list = list[:limit]
		next = list[limit-1].Seq
	}
	return list, next, nil
}

// Get returns one effect of a repository (staged on it, or released into
// it) with its attempts.
func (s *Service) Get(ctx context.Context, actor *lockstep.Key, repoName, id string) (*lockstep.Effect, error) {
	r, err := s.repos.Repo(ctx, repoName)
	if err != nil {
		return nil, err
	}
	if err := CanSee(actor, r); err != nil {
		return nil, err
	}
	e, err := s.get(ctx, repoName, id)
	if err != nil {
		return nil, err
	}
	return e, s.inScope(ctx, actor, e)
}

// inScope: a scoped key reaches an effect released into a base only when
// the workspace that staged it is in its scope (a task-scoped key names
// the base, whose released effects come from every task's workspaces).
// It answers not_found, as for an effect of another repository.
func (s *Service) inScope(ctx context.Context, actor *lockstep.Key, e *lockstep.Effect) error {
	if actor == nil || actor.Scope == nil {
		return nil
	}
	ws, err := s.repos.Repo(ctx, e.Repo)
	if err == nil && actor.InScope(ws) == nil {
		return nil
	}
	return lockstep.Errorf(lockstep.ENOTFOUND, "effect %s not found", e.ID)
}

// get is Get without the visibility rule (the caller applies its own).
func (s *Service) get(ctx context.Context, repoName, id string) (*lockstep.Effect, error) {
	e, err := s.store.Effect(ctx, id)
	if err != nil {
		return nil, err
	}
	if e.Repo != repoName && e.ReleasedInto != repoName {
		return nil, lockstep.Errorf(lockstep.ENOTFOUND, "effect %s not found on %s", id, repoName)
	}
	return e, nil
}

// Discard discards the workspace's staged effects after req.AfterSeq, of
// req.RunID when set (a failed run), as one log entry.
func (s *Service) Discard(ctx context.Context, actor *lockstep.Key, wsName string, req api.EffectDiscard) ([]string, error) {
	ws, err := s.Authorize(ctx, actor, wsName)
	if err != nil {
		return nil, err
	}
	if req.AfterSeq < 0 {
		return nil, lockstep.Errorf(lockstep.EINVALID, "after_seq must be >= 0")
	}
	if err := validLabel("run_id", req.RunID, 128); err != nil {
		return nil, err
	}
	if err := validLabel("reason", req.Reason, 500); err != nil {
		return nil, err
	}
	reason := req.Reason
	if reason == "" {
		reason = "discarded by " + actor.Name
	}
	entry := &lockstep.OpEntry{KeyID: actor.ID, KeyName: actor.Name, Op: "effect.discard", Repo: ws.Name, TraceID: telemetry.TraceID(ctx),
		Details: map[string]any{"after_seq": req.AfterSeq, "run_id": req.RunID}}
	entry.Answer = discardAnswer{entry}
	ids, err := s.store.DiscardEffects(ctx, lockstep.EffectFilter{RepoID: ws.ID, AfterSeq: req.AfterSeq, RunID: req.RunID, Reason: reason}, entry)
	if err != nil {
		return nil, err
	}
	return ids, nil
}

// Decide approves or rejects a held effect (reviewer or admin).
func (s *Service) Decide(ctx context.Context, actor *lockstep.Key, repoName, id string, approve bool, reason string) (*lockstep.Effect, error) {
	if err := auth.Require(actor, lockstep.RoleReviewer, lockstep.RoleAdmin); err != nil {
		return nil, err
	}
	e, err := s.get(ctx, repoName, id)
	if err != nil {
		return nil, err
	}
	if err := s.inScope(ctx, actor, e); err != nil {
		return nil, err
	}
	if err := validLabel("reason", reason, 500); err != nil {
		return nil, err
	}
	op := "effect.approve"
	if !approve {
		op = "effect.reject"
	}
	e, err = s.store.DecideEffect(ctx, id, approve, &lockstep.OpEntry{KeyID: actor.ID, KeyName: actor.Name, Op: op, Repo: repoName, TraceID: telemetry.TraceID(ctx),
		Details: map[string]any{"effect": id, "reason": reason}})
	if err != nil {
		return nil, err
	}
	if approve {
		s.Wake()
	}
	return e, nil
}

// canCompensate: an admin, or the owner of the workspace that staged it.
func canCompensate(actor *lockstep.Key, e *lockstep.Effect, ws *lockstep.Repo) error {
	if actor != nil && (actor.Role == lockstep.RoleAdmin || ws != nil && actor.Owns(ws)) {
		return nil
	}
	return lockstep.Errorf(lockstep.EFORBIDDEN, "only an admin or the owner of %s may run the compensation of %s", e.Repo, e.ID)
}

// Compensate queues the compensation of one released effect (admin or
// its workspace's owner). invalid_argument when it has none, is not
// released, or was compensated already.
func (s *Service) Compensate(ctx context.Context, actor *lockstep.Key, repoName, id string) (*lockstep.Effect, error) {
	e, err := s.get(ctx, repoName, id)
	if err != nil {
		return nil, err
	}
	ws, err := s.repos.Repo(ctx, e.Repo)
	if err != nil {
		return nil, err
	}
	if err := canCompensate(actor, e, ws); err != nil {
		return nil, err
	}
	switch {
	case e.Compensation == nil:
		return nil, lockstep.Errorf(lockstep.EINVALID, "effect %s has no compensation", id)
	case e.Status != lockstep.EffectReleased:
		return nil, lockstep.Errorf(lockstep.EINVALID, "effect %s is %s: only a released effect is compensated", id, e.Status)
	case e.CompensationStatus != "":
		return nil, lockstep.Errorf(lockstep.EINVALID, "the compensation of effect %s is already %s", id, e.CompensationStatus)
	}
	if _, err := s.store.QueueCompensations(ctx, []string{id}, s.compEntry(ctx, actor, repoName, "")); err != nil {
		return nil, err
	}
	s.Wake()
	return s.store.Effect(ctx, id)
}

func (s *Service) compEntry(ctx context.Context, actor *lockstep.Key, repo, commit string) *lockstep.OpEntry {
	d := map[string]any{"note": "a compensation is a new request, not an erasure of the first"}
	if commit != "" {
		d["commit"] = commit
	}
	return &lockstep.OpEntry{KeyID: actor.ID, KeyName: actor.Name, Op: "effect.compensate", Repo: repo, TraceID: telemetry.TraceID(ctx), Details: d}
}

// CompensateCommit queues, newest first, the compensations of every
// effect a commit of the base released (admin).
func (s *Service) CompensateCommit(ctx context.Context, actor *lockstep.Key, baseName, commit string) ([]lockstep.Effect, error) {
	if err := auth.Require(actor, lockstep.RoleAdmin); err != nil {
		return nil, err
	}
	if err := lockstep.ValidateOID("commit", commit); err != nil {
		return nil, err
	}
	base, err := s.repos.Repo(ctx, baseName)
	if err != nil {
		return nil, err
	}
	list, err := s.store.EffectsReleasedBy(ctx, base.ID, commit)
	if err != nil {
		return nil, err
	}
	var ids []string
	for i := len(list) - 1; i >= 0; i-- {
		if list[i].Compensation != nil && list[i].Status == lockstep.EffectReleased && list[i].CompensationStatus == "" {
			ids = append(ids, list[i].ID)
		}
	}
	out := []lockstep.Effect{}
	if len(ids) == 0 {
		return out, nil
	}
	queued, err := s.store.QueueCompensations(ctx, ids, s.compEntry(ctx, actor, baseName, commit))
	if err != nil {
		return nil, err
	}
	s.Wake()
	for _, id := range queued {
		e, err := s.store.Effect(ctx, id)
		if err != nil {
			return nil, err
		}
		out = append(out, *e)
	}
	return out, nil
}

// discardAnswer is a discard's answer, carried by its entry before the
// store knows the ids: encoded at commit, from the entry the store filled in.
type discardAnswer struct{ e *lockstep.OpEntry }

// MarshalJSON encodes api.EffectDiscardResult.
func (d discardAnswer) MarshalJSON() ([]byte, error) {
	ids, _ := d.e.Details["effects"].([]string)
	if ids == nil {
		ids = []string{}
	}
	return json.Marshal(api.EffectDiscardResult{Discarded: ids})
}
