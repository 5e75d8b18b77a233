// Package gate decides what reaches a base branch. A policy per branch
// names required checks (results posted by CI for the exact commit) and
// built-in rules (changed files and lines limits, protected paths, a clean
// merge). Promote evaluates every rule on the exact commit, reports every
// unmet one at once (gate_failed), and otherwise lands the commit through
// a per-branch landing queue, first come first served, so concurrent
// promotes neither lose updates nor spin in retry loops. Gate hooks tell
// CI about workspace events: deliveries are written to an outbox in the
// same transaction as the event and sent, signed with HMAC-SHA256 (the
// Standard Webhooks headers and the legacy X-Lockstep-Signature), by a
// worker with exponential backoff and jitter (delivery.go), only to public
// addresses or allowed hosts, checked on the address dialed
// (hooktarget.go).
//
// Landing is the gate's, in one path (landing.go): Promote takes the
// branch's lane (and, across replicas, a lockstep.Locker lock), resolves
// the Target, Evaluates it and lands it; the base branch's ref move and the
// workspace's status change to promoted commit in one transaction
// (repositories.LandCommit with a status change).
package gate

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/bmatcuk/doublestar/v4"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/auth"
	"github.com/lockstep-hq/lockstep/delivery"
	"github.com/lockstep-hq/lockstep/repositories"
	"github.com/lockstep-hq/lockstep/telemetry"
)

// Service implements policies, checks, hooks and promote.
type Service struct {
	store   lockstep.Store
	repos   *repositories.Service
	log     *slog.Logger
	metrics *telemetry.Metrics
	now     func() time.Time
	cfg     Config

	lanesMu sync.Mutex
	lanes   map[string]*lane

	// AfterPromote is called after a promote landed (database template
	// refresh); nil when unused.
	AfterPromote func(ctx context.Context, base *lockstep.Repo, ws *lockstep.Repo)
	// Locker, when set (Redis configured), also serializes a branch's
	// landings across replicas.
	Locker lockstep.Locker
	wake   chan struct{}
}

// Config tunes hook deliveries.
type Config struct {
	// HookTimeout bounds one delivery request (default 10s).
	HookTimeout time.Duration
	// HookMaxAttempts before a delivery is marked failed (default 8).
	HookMaxAttempts int
	// HookBackoff is the first retry delay; it doubles each attempt, with
	// ±20% jitter, up to HookMaxBackoff (defaults 2s and 10m).
	HookBackoff    time.Duration
	HookMaxBackoff time.Duration
	// PollInterval is how often the worker looks for due deliveries when
	// nothing woke it (default 500ms).
	PollInterval time.Duration
	// HookAllowHosts are hook targets allowed although internal (loopback,
	// private, link-local …): by host name, IP or CIDR.
	HookAllowHosts delivery.AllowList
	// Resolver checks a hook's host at registration (nil: the system's).
	Resolver *net.Resolver
}

// New returns the gate service.
func New(cfg Config, store lockstep.Store, repos *repositories.Service, log *slog.Logger, metrics *telemetry.Metrics, now func() time.Time) *Service {
	if now == nil {
		now = time.Now
	}
	if cfg.HookTimeout <= 0 {
		cfg.HookTimeout = 10 * time.Second
	}
	if cfg.HookMaxAttempts <= 0 {
		cfg.HookMaxAttempts = 8
	}
	if cfg.HookBackoff <= 0 {
		cfg.HookBackoff = 2 * time.Second
	}
	if cfg.HookMaxBackoff <= 0 {
		cfg.HookMaxBackoff = 10 * time.Minute
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 500 * time.Millisecond
	}
	s := &Service{store: store, repos: repos, log: log, metrics: metrics, now: now, cfg: cfg, lanes: map[string]*lane{}, wake: make(chan struct{}, 1)}
	repos.OnEvent(func(ctx context.Context, ev repositories.Event) { s.Wake() })
	return s
}

// Wake tells the delivery worker that new deliveries may be due.
func (s *Service) Wake() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// SetPolicy validates and stores a branch policy (admin only, logged).
func (s *Service) SetPolicy(ctx context.Context, actor *lockstep.Key, repoName string, p lockstep.Policy) (*lockstep.Policy, error) {
	if err := auth.Require(actor, lockstep.RoleAdmin); err != nil {
		return nil, err
	}
	r, err := s.repos.Repo(ctx, repoName)
	if err != nil {
		return nil, err
	}
	if p.Branch == "" {
		p.Branch = r.DefaultBranch
	}
	if err := lockstep.ValidateBranch(p.Branch); err != nil {
		return nil, err
	}
	if p.MaxChangedFiles < 0 || p.MaxChangedLines < 0 {
		return nil, lockstep.Errorf(lockstep.EINVALID, "max_changed_files and max_changed_lines must be >= 0 (0 = no limit)")
	}
	for _, c := range p.RequiredChecks {
		if err := validCheckName(c); err != nil {
			return nil, err
		}
	}
	for _, g := range p.ProtectedPaths {
		if g == "" || !doublestar.ValidatePattern(g) {
			return nil, lockstep.Errorf(lockstep.EINVALID, "protected path glob %q does not parse", g)
		}
	}
	switch p.PromoteMode {
	case "":
		p.PromoteMode = "merge"
	case "merge", "squash", "fast_forward":
	default:
		return nil, lockstep.Errorf(lockstep.EINVALID, "promote_mode %q: want merge, squash or fast_forward", p.PromoteMode)
	}
	for _, c := range p.HoldEffectClasses {
		if !ValidEffectClass(c) {
			return nil, lockstep.Errorf(lockstep.EINVALID, "hold_effect_classes: %q is not an effect class (1-64 of a-z, 0-9, '.', '_' and '-')", c)
		}
	}
	if p.RequiredChecks == nil {
		p.RequiredChecks = []string{}
	}
	if p.ProtectedPaths == nil {
		p.ProtectedPaths = []string{}
	}
	t := true
	if p.RequireCleanMerge == nil {
		p.RequireCleanMerge = &t
	}
	entry := &lockstep.OpEntry{KeyID: actor.ID, KeyName: actor.Name, Op: "gate.set", Repo: r.Name,
		Details: map[string]any{"branch": p.Branch, "required_checks": p.RequiredChecks, "max_changed_files": p.MaxChangedFiles,
			"max_changed_lines": p.MaxChangedLines, "protected_paths": p.ProtectedPaths, "require_clean_merge": *p.RequireCleanMerge, "promote_mode": p.PromoteMode}}
	if len(p.HoldEffectClasses) > 0 {
		entry.Details["hold_effect_classes"] = p.HoldEffectClasses
	}
	entry.Answer = &p
	if err := s.store.SetPolicy(ctx, r.ID, p, entry); err != nil {
		return nil, err
	}
	return &p, nil
}

// Policy returns a branch's policy, or the default one (no required
// checks, no limits, clean merge required, mode merge).
func (s *Service) Policy(ctx context.Context, repoName, branch string) (*lockstep.Policy, error) {
	r, err := s.repos.Repo(ctx, repoName)
	if err != nil {
		return nil, err
	}
	if branch == "" {
		branch = r.DefaultBranch
	}
	p, err := s.store.Policy(ctx, r.ID, branch)
	if lockstep.ErrorCode(err) == lockstep.ENOTFOUND {
		t := true
		return &lockstep.Policy{Branch: branch, RequiredChecks: []string{}, ProtectedPaths: []string{}, RequireCleanMerge: &t, PromoteMode: "merge"}, nil
	}
	if err != nil {
		return nil, err
	}
	return &p, nil
}

func validCheckName(n string) error {
	if n == "" || len(n) > 100 || strings.ContainsAny(n, "\x00\n\r\t") {
		return lockstep.Errorf(lockstep.EINVALID, "invalid check name %q: 1-100 printable characters", n)
	}
	return nil
}

// PostCheck records a check result for the exact commit (ci or admin).
func (s *Service) PostCheck(ctx context.Context, actor *lockstep.Key, repoName, commit string, c lockstep.Check) (*lockstep.Check, error) {
	if err := auth.Require(actor, lockstep.RoleCI, lockstep.RoleAdmin); err != nil {
		return nil, err
	}
	r, err := s.repos.Repo(ctx, repoName)
	if err != nil {
		return nil, err
	}
	if err := lockstep.ValidateOID("commit", commit); err != nil {
		return nil, err
	}
	if err := validCheckName(c.Name); err != nil {
		return nil, err
	}
	switch c.Status {
	case lockstep.CheckPending, lockstep.CheckSuccess, lockstep.CheckFailure, lockstep.CheckError:
	default:
		return nil, lockstep.Errorf(lockstep.EINVALID, "check status %q: want pending, success, failure or error", c.Status)
	}
	if len(c.Summary) > 64<<10 {
		return nil, lockstep.Errorf(lockstep.ETOOLARGE, "check summary over 64 KiB")
	}
	if c.DetailsURL != "" {
		if u, err := url.Parse(c.DetailsURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") {
			return nil, lockstep.Errorf(lockstep.EINVALID, "details_url %q: want an http(s) URL", c.DetailsURL)
		}
	}
	if _, err := s.repos.Resolve(ctx, r, commit); err != nil {
		return nil, lockstep.Errorf(lockstep.ENOTFOUND, "commit %s not found in %s", commit, r.Name)
	}
	c.Commit, c.KeyName = commit, actor.Name
	entry := &lockstep.OpEntry{KeyID: actor.ID, KeyName: actor.Name, Op: "check", Repo: r.Name,
		Details: map[string]any{"commit": commit, "name": c.Name, "status": c.Status}}
	entry.Answer = &c
	if err := s.store.AddCheck(ctx, r.Network, &c, entry); err != nil {
		return nil, err
	}
	return &c, nil
}

// CheckSet is a commit's checks: the latest result per name, and all.
type CheckSet struct {
	Commit  string           `json:"commit"`
	Latest  []lockstep.Check `json:"checks"`
	History []lockstep.Check `json:"history"`
}

// Checks lists a commit's checks.
func (s *Service) Checks(ctx context.Context, repoName, commit string) (*CheckSet, error) {
	r, err := s.repos.Repo(ctx, repoName)
	if err != nil {
		return nil, err
	}
	h, err := s.repos.Resolve(ctx, r, commit)
	if err != nil {
		return nil, err
	}
	all, err := s.store.Checks(ctx, r.Network, h.String())
	if err != nil {
		return nil, err
	}
	set := &CheckSet{Commit: h.String(), Latest: []lockstep.Check{}, History: all}
	if set.History == nil {
		set.History = []lockstep.Check{}
	}
	idx := map[string]int{}
	for _, c := range all {
		if i, ok := idx[c.Name]; ok {
			set.Latest[i] = c
		} else {
			idx[c.Name] = len(set.Latest)
			set.Latest = append(set.Latest, c)
		}
	}
	return set, nil
}

// Reason is one unmet gate rule.
type Reason struct {
	Rule    string `json:"rule"`
	Message string `json:"message"`
	Path    string `json:"path,omitempty"`
}

// Evaluation is the gate's verdict on one commit.
type Evaluation struct {
	Workspace    string   `json:"workspace"`
	Commit       string   `json:"commit"`
	Into         string   `json:"into"`
	Passed       bool     `json:"passed"`
	Reasons      []Reason `json:"reasons"`
	ChangedFiles int      `json:"changed_files"`
	ChangedLines int      `json:"changed_lines"`
	MergeClean   bool     `json:"merge_clean"`
}

// Evaluate checks every rule of the base branch's policy on the target
// commit and lists every unmet one.
func (s *Service) Evaluate(ctx context.Context, t *PromoteTarget) (*Evaluation, *lockstep.Policy, error) {
	p, err := s.Policy(ctx, t.Base.Name, t.Branch)
	if err != nil {
		return nil, nil, err
	}
	ev := &Evaluation{Workspace: t.Workspace.Name, Commit: t.Commit.String(), Into: t.Base.Name + ":" + t.Branch, Reasons: []Reason{}}
	if len(p.RequiredChecks) > 0 {
		all, err := s.store.Checks(ctx, t.Base.Network, t.Commit.String())
		if err != nil {
			return nil, nil, err
		}
		latest := map[string]lockstep.Check{}
		for _, c := range all {
			latest[c.Name] = c
		}
		for _, name := range p.RequiredChecks {
			c, ok := latest[name]
			switch {
			case !ok:
				ev.Reasons = append(ev.Reasons, Reason{Rule: "required_check", Message: fmt.Sprintf("check %q has no result for commit %s", name, t.Commit.String()[:12])})
			case c.Status == lockstep.CheckPending:
				ev.Reasons = append(ev.Reasons, Reason{Rule: "required_check", Message: fmt.Sprintf("check %q is still pending", name)})
			case c.Status != lockstep.CheckSuccess:
				msg := fmt.Sprintf("check %q: %s", name, c.Status)
				if c.Summary != "" {
					msg += ": " + lastLines(c.Summary, 5)
				}
				ev.Reasons = append(ev.Reasons, Reason{Rule: "required_check", Message: msg})
			}
		}
	}
	changes, err := s.PromoteChanges(ctx, t)
	if err != nil {
		return nil, nil, err
	}
	ev.ChangedFiles = len(changes)
	for _, c := range changes {
		ev.ChangedLines += c.Added + c.Removed
	}
	if p.MaxChangedFiles > 0 && ev.ChangedFiles > p.MaxChangedFiles {
		ev.Reasons = append(ev.Reasons, Reason{Rule: "max_changed_files", Message: fmt.Sprintf("%d files changed, limit %d", ev.ChangedFiles, p.MaxChangedFiles)})
	}
	if p.MaxChangedLines > 0 && ev.ChangedLines > p.MaxChangedLines {
		ev.Reasons = append(ev.Reasons, Reason{Rule: "max_changed_lines", Message: fmt.Sprintf("%d lines changed, limit %d", ev.ChangedLines, p.MaxChangedLines)})
	}
	for _, c := range changes {
		for _, g := range p.ProtectedPaths {
			if ok, _ := doublestar.Match(g, c.Path); ok {
				ev.Reasons = append(ev.Reasons, Reason{Rule: "protected_path", Path: c.Path, Message: fmt.Sprintf("%s is protected (%s)", c.Path, g)})
				break
			}
		}
	}
	pre, err := s.PromotePreflight(ctx, t)
	if err != nil {
		return nil, nil, err
	}
	ev.MergeClean = pre.Clean
	if p.CleanMergeRequired() && !pre.Clean {
		var paths []string
		for _, c := range pre.Conflicts {
			paths = append(paths, c.Path+" ("+c.Kind+")")
		}
		ev.Reasons = append(ev.Reasons, Reason{Rule: "clean_merge", Message: fmt.Sprintf("merge into %s is not clean: %s", t.Branch, strings.Join(paths, ", "))})
	}
	ev.Passed = len(ev.Reasons) == 0
	return ev, p, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// PromoteRequest is the body of a promote.
type PromoteRequest struct {
	Commit  string `json:"commit"`
	Message string `json:"message"`
	Mode    string `json:"mode"`
}

// PromoteResult is the answer of a successful promote.
type PromoteResult struct {
	*repositories.MergeResponse
	Evaluation *Evaluation `json:"gate"`
	Workspace  string      `json:"workspace"`
	Into       string      `json:"into"`
	QueuedMS   float64     `json:"queued_ms"`
}

// Promote lands a workspace commit into its base's default branch when
// every gate rule passes. Promotions into one branch run one at a time in
// arrival order (the landing queue). Errors: gate_failed (details.reasons
// lists every unmet rule), invalid_argument (not a workspace, not active,
// bad mode), permission_denied, not_found.
func (s *Service) Promote(ctx context.Context, actor *lockstep.Key, wsName string, req PromoteRequest) (*PromoteResult, error) {
	start := s.now()
	switch req.Mode {
	case "", "merge", "squash", "fast_forward":
	default:
		return nil, lockstep.Errorf(lockstep.EINVALID, "mode %q: want merge, squash or fast_forward", req.Mode)
	}
	if req.Commit != "" {
		if err := lockstep.ValidateOID("commit", req.Commit); err != nil {
			return nil, err
		}
	}
	ws, err := s.repos.Repo(ctx, wsName)
	if err != nil {
		return nil, err
	}
	if ws.ForkOf == "" {
		return nil, lockstep.Errorf(lockstep.EINVALID, "%s is a base repository, not a workspace: only workspaces are promoted", ws.Name)
	}
	base, err := s.repos.Repo(ctx, ws.ForkOf)
	if err != nil {
		return nil, err
	}
	// Refused before queueing; Land checks the same rule again on what it
	// re-read inside the queue, and the store once more in the transaction.
	if err := repositories.CanPromote(actor, ws, base); err != nil {
		return nil, err
	}
	l := s.lane(base.Name + "\x00" + base.DefaultBranch)
	if err := l.acquire(ctx); err != nil {
		return nil, err
	}
	defer l.release()
	if s.Locker != nil {
		unlock, err := s.Locker.Lock(ctx, "lane:"+base.Name+":"+base.DefaultBranch)
		if err != nil {
			return nil, lockstep.E("gate.Promote", lockstep.EUNAVAILABLE, "the landing queue lock (Redis) is unavailable; retry later", err)
		}
		defer unlock()
	}
	queued := s.now().Sub(start)

	t, err := s.Target(ctx, wsName, req.Commit)
	if err != nil {
		return nil, err
	}
	ev, p, err := s.Evaluate(ctx, t)
	if err != nil {
		return nil, err
	}
	if !ev.Passed {
		var msgs []string
		for _, r := range ev.Reasons {
			msgs = append(msgs, r.Message)
		}
		gerr := lockstep.Errorf(lockstep.EGATEFAILED, "gate of %s refused %s: %s", ev.Into, ev.Commit[:12], strings.Join(msgs, "; ")).
			WithDetails(map[string]any{"reasons": ev.Reasons, "commit": ev.Commit, "into": ev.Into})
		e := &lockstep.OpEntry{KeyID: actor.ID, KeyName: actor.Name, Op: "promote", Result: lockstep.EGATEFAILED, Repo: ws.Name,
			DurationUS: s.now().Sub(start).Microseconds(), Details: map[string]any{"commit": ev.Commit, "into": ev.Into, "reasons": ev.Reasons}}
		e.Answer = gerr
		if err := s.store.AppendOp(ctx, e); err != nil {
			s.log.ErrorContext(ctx, "log gate failure", "error", err)
		}
		s.metrics.ObserveOp("promote", lockstep.EGATEFAILED, s.now().Sub(start))
		return nil, gerr
	}
	mode := req.Mode
	if mode == "" {
		mode = p.PromoteMode
	}
	t.HoldEffectClasses = p.HoldEffectClasses
	// Under an Idempotency-Key the landing's commit stores this answer.
	answer := func(inner any) any {
		if mr, ok := inner.(*repositories.MergeResponse); ok {
			return &PromoteResult{MergeResponse: mr, Evaluation: ev, Workspace: ws.Name, Into: ev.Into, QueuedMS: float64(queued.Microseconds()) / 1000}
		}
		return inner
	}
	res, err := s.land(ctx, actor, t, mode, req.Message, map[string]any{"checks": p.RequiredChecks, "queued_ms": float64(queued.Microseconds()) / 1000}, answer)
	if err != nil {
		return nil, err
	}
	if s.AfterPromote != nil {
		s.AfterPromote(ctx, t.Base, t.Workspace)
	}
	s.Wake()
	return &PromoteResult{MergeResponse: res, Evaluation: ev, Workspace: ws.Name, Into: ev.Into, QueuedMS: float64(queued.Microseconds()) / 1000}, nil
}

var traceID = telemetry.TraceID

// ValidEffectClass reports whether c is a valid effect class name (the
// gate's hold rules name classes; the effects outbox, which builds on the
// gate, checks staged effects with it too).
func ValidEffectClass(c string) bool {
	if c == "" || len(c) > 64 {
		return false
	}
	for _, r := range c {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}
