// Package web is the HTTP face of Lockstep: the JSON API of api/openapi.yaml
// (gin), git smart HTTP, the reviewers' UI, health and metrics. Domain
// errors become HTTP statuses in exactly one place (writeError); every
// route is declared in routes.go. Middleware order, declared once in
// Handler: recovery → request id → tracing → logging/metrics → auth.
package web

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/auth"
	"github.com/lockstep-hq/lockstep/checkpoints"
	"github.com/lockstep-hq/lockstep/effects"
	"github.com/lockstep-hq/lockstep/gate"
	"github.com/lockstep-hq/lockstep/repositories"
	"github.com/lockstep-hq/lockstep/telemetry"
	"github.com/lockstep-hq/lockstep/workspaces"
)

// Config holds the HTTP layer's limits.
type Config struct {
	// MaxJSONBytes caps a JSON request body (default 1 MiB).
	MaxJSONBytes int64
	// MaxEditBytes caps the JSON body of a file-edit batch (default 32 MiB).
	MaxEditBytes int64
	// MaxUploadBytes caps a worktree or pack upload body as sent.
	MaxUploadBytes int64
	// BodyTimeout and BodyMinRate bound how slowly a request body may
	// arrive (limits.go); 0 = the defaults, BodyTimeout < 0 = no bound.
	BodyTimeout time.Duration
	BodyMinRate int64
	// WriteTimeout and WriteMinRate bound how slowly a client may read a
	// response (writelimits.go); 0 = the defaults, WriteTimeout < 0 = no
	// bound.
	WriteTimeout time.Duration
	WriteMinRate int64
	// MaxSSEStreams and MaxSSEStreamsPerKey cap the UI's open event
	// streams in all and per key (429 beyond); SSEMaxLifetime ends a
	// stream after that long (the browser reconnects). 0 = the defaults
	// (streams.go).
	MaxSSEStreams       int
	MaxSSEStreamsPerKey int
	SSEMaxLifetime      time.Duration
	// Idempotency configures Idempotency-Key handling (idempotency.go).
	Idempotency IdempotencyConfig
	// MaxConcurrentUploads bounds the uploads (tar worktrees, object
	// packs, git pushes) served at once; more answer 503 unavailable
	// with Retry-After (default DefaultMaxConcurrentUploads).
	MaxConcurrentUploads int
	// QuotaWorkspaces is the number of active workspaces a non-admin key
	// may own (0: unlimited); a key's own quota overrides it.
	QuotaWorkspaces int
	// RateLimitRPS is each key's sustained requests per second (token
	// bucket, burst RateLimitBurst; 0: off).
	RateLimitRPS   float64
	RateLimitBurst int
	// Run jobs (runjobs.go): a command's default and longest timeout
	// (RunJobTimeout), the lease a runner renews while it runs a job
	// (RunnerLease), how long a runner's poll waits for a job
	// (RunnerPollWait) and how long a job waits for a runner to take it
	// (RunJobQueueTimeout); 0 = the Default* values.
	RunJobTimeout, RunnerLease, RunnerPollWait, RunJobQueueTimeout time.Duration
	// RunJobMaxOutputBytes bounds the output text one run job stores
	// (--run-job-max-output-bytes; 0 = DefaultRunJobMaxOutputBytes): the
	// rest is dropped after a line saying so.
	RunJobMaxOutputBytes int64
	// ObjectRetention is the default retention of POST /api/v1/gc
	// (--object-retention; 0 = repositories.DefaultObjectRetention).
	ObjectRetention time.Duration
	// QuotaUploads bounds the uploads one non-admin key has in progress
	// at once (0: unlimited, only MaxConcurrentUploads applies); more
	// answer 429 rate_limited with Retry-After.
	QuotaUploads int
	// QuotaStorageBytes bounds the bytes a non-admin key's active
	// workspaces have added to the object store (Store.KeyStorageBytes;
	// 0: unlimited): at or beyond it a write answers 429 rate_limited
	// before its body is read.
	QuotaStorageBytes int64
	// QuotaRuns bounds a non-admin key's run jobs queued or running at
	// once (0: unlimited); more answer 429 rate_limited.
	QuotaRuns int
}

// Server holds the services the handlers call.
type Server struct {
	Config Config
	Store  lockstep.Store
	Keys   *auth.Service
	Redis  *redis.Client // nil when not configured
	// ObjectStore is the bucket in object-storage mode (nil: local disk),
	// reported by /readyz.
	ObjectStore interface {
		Ping(ctx context.Context) error
	}
	// EventsChannel is the Redis pub/sub channel of the UI's live
	// updates (default DefaultEventsChannel; replicas must agree).
	EventsChannel string
	Logger        *slog.Logger
	Metrics       *telemetry.Metrics
	Repos         *repositories.Service
	Workspaces    *workspaces.Service
	Gate          *gate.Service
	Checkpoints   *checkpoints.Service
	Effects       *effects.Service     // the effects outbox (nil: its routes answer 503)
	Jobs          lockstep.RunJobStore // runners and run jobs (nil: their routes answer not_configured)
	// MCP, when set, builds the handler served at /mcp (behind the API's
	// authentication) from the API handler its tools call in-process.
	MCP func(api http.Handler) http.Handler

	tracer     trace.Tracer
	drain      chan struct{} // closed by Drain: long polls and job streams end
	drainOnce  sync.Once
	uiNotFound gin.HandlerFunc // the UI's HTML 404 for unknown /ui/ paths
	uploads    chan struct{}   // one token per upload in progress (uploadSlot)
	buckets    keyBuckets      // per-key request rate (ratelimit.go)
	keyUploads keyCounts       // uploads in progress per key (uploadSlot)
	gitCaps    gitCaps         // upload-pack's v0 capabilities (git.go)
	// exhaustedAt is when (unix ns) a request last failed for want of
	// file descriptors or memory; /readyz reports it for a while.
	exhaustedAt atomic.Int64
}

// DefaultEventsChannel is the Redis channel of the UI's live updates.
const DefaultEventsChannel = "lockstep:ui-events"

// Handler builds the gin engine with every route.
func (s *Server) Handler() http.Handler {
	gin.SetMode(gin.ReleaseMode)
	if s.Config.MaxEditBytes <= 0 {
		s.Config.MaxEditBytes = 32 << 20
	}
	if s.Config.MaxJSONBytes <= 0 {
		s.Config.MaxJSONBytes = 1 << 20
	}
	if s.Config.MaxConcurrentUploads <= 0 {
		s.Config.MaxConcurrentUploads = DefaultMaxConcurrentUploads
	}
	s.uploads = make(chan struct{}, s.Config.MaxConcurrentUploads)
	s.runJobDefaults()
	s.drain = make(chan struct{})
	if s.Logger == nil {
		s.Logger = slog.Default()
	}
	if s.Metrics == nil {
		s.Metrics = telemetry.NewMetrics()
	}
	s.tracer = otel.Tracer("lockstep/web")
	e := gin.New()
	e.ContextWithFallback = true
	e.HandleMethodNotAllowed = true
	// Match on the escaped path so that a revision with a slash (the
	// side branch conflicts/main) can be named as conflicts%2Fmain in
	// /tree/:rev, /blob/:rev/*path, /archive/:rev and /commits/:rev;
	// parameters are unescaped before handlers see them.
	e.UseRawPath = true
	e.UnescapePathValues = true
	e.Use(s.recovery, s.requestID, s.tracing, s.logging, s.bodyLimits, s.writeLimits)
	e.NoRoute(func(c *gin.Context) {
		if s.uiNotFound != nil && c.Request.URL.Path == "/" && (c.Request.Method == http.MethodGet || c.Request.Method == http.MethodHead) {
			// The address the server prints at start, opened in a
			// browser: the reviewers' UI (it was a 404 JSON answer).
			c.Redirect(http.StatusFound, "/ui/")
			return
		}
		if s.uiNotFound != nil && strings.HasPrefix(c.Request.URL.Path, "/ui/") {
			s.uiNotFound(c)
			return
		}
		writeError(c, lockstep.Errorf(lockstep.ENOTFOUND, "no route %s %s", c.Request.Method, c.Request.URL.Path))
	})
	e.NoMethod(func(c *gin.Context) {
		writeErrorStatus(c, http.StatusMethodNotAllowed, lockstep.Errorf(lockstep.EINVALID, "method %s not allowed on %s", c.Request.Method, c.Request.URL.Path))
	})
	s.registerRoutes(e)
	return e
}

func (s *Server) recovery(c *gin.Context) {
	defer func() {
		if r := recover(); r != nil {
			if r == http.ErrAbortHandler {
				panic(r)
			}
			s.Logger.ErrorContext(c, "panic", "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			if !c.Writer.Written() {
				writeError(c, fmt.Errorf("panic: %v", r))
			}
			c.Abort()
		}
	}()
	c.Next()
}

type requestIDKey struct{}

func (s *Server) requestID(c *gin.Context) {
	id := c.GetHeader("X-Request-Id")
	if id == "" || len(id) > 64 {
		var b [8]byte
		rand.Read(b[:])
		id = hex.EncodeToString(b[:])
	}
	c.Header("X-Request-Id", id)
	ctx := context.WithValue(c.Request.Context(), requestIDKey{}, id)
	// Object-storage mode: one cache check per request (see
	// lockstep.WithRequestStart).
	c.Request = c.Request.WithContext(lockstep.WithRequestStart(ctx, time.Now()))
	c.Next()
}

func (s *Server) tracing(c *gin.Context) {
	ctx := otel.GetTextMapPropagator().Extract(c.Request.Context(), propagation.HeaderCarrier(c.Request.Header))
	route := c.FullPath()
	if route == "" {
		route = "unmatched"
	}
	ctx, span := s.tracer.Start(ctx, c.Request.Method+" "+route, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("http.request.method", c.Request.Method), attribute.String("http.route", route)))
	defer span.End()
	c.Request = c.Request.WithContext(ctx)
	c.Next()
	status := c.Writer.Status()
	span.SetAttributes(attribute.Int("http.response.status_code", status))
	if status >= 500 {
		span.SetStatus(codes.Error, http.StatusText(status))
	}
}

func (s *Server) logging(c *gin.Context) {
	start := time.Now()
	c.Next()
	if c.GetBool(exhaustedKey) {
		s.exhaustedAt.Store(time.Now().UnixNano())
	}
	route := c.FullPath()
	if route == "" {
		route = "unmatched"
	}
	d := time.Since(start)
	status := c.Writer.Status()
	s.Metrics.Requests.WithLabelValues(route, c.Request.Method, fmt.Sprint(status)).Inc()
	s.Metrics.RequestDuration.WithLabelValues(route, c.Request.Method).Observe(d.Seconds())
	if route == "/healthz" || route == "/metrics" {
		return
	}
	attrs := []any{"method", c.Request.Method, "path", c.Request.URL.Path, "route", route, "status", status,
		"duration_ms", float64(d.Microseconds()) / 1000, "request_id", c.Request.Context().Value(requestIDKey{})}
	if k := auth.FromContext(c.Request.Context()); k != nil {
		attrs = append(attrs, "key", k.Name, "key_id", k.ID)
	}
	if id := telemetry.TraceID(c.Request.Context()); id != "" {
		attrs = append(attrs, "trace_id", id)
	}
	if v, ok := c.Get("error"); ok {
		attrs = append(attrs, "error", fmt.Sprint(v))
	}
	if v, ok := c.Get("error_op"); ok {
		attrs = append(attrs, "error_op", fmt.Sprint(v))
	}
	level := slog.LevelInfo
	if status >= 500 {
		level = slog.LevelError
	}
	s.Logger.Log(c.Request.Context(), level, "request", attrs...)
}

// authenticate resolves the caller's key from "Authorization: Bearer" (or,
// for git clients under /git only, the basic-auth password) and puts it
// in the context. Basic auth is refused on /api: browsers cache and
// replay it, which would turn every API route into a CSRF target.
func (s *Server) authenticate(c *gin.Context) {
	secret := ""
	h := c.GetHeader("Authorization")
	git := strings.HasPrefix(c.Request.URL.Path, "/git/")
	switch {
	case strings.HasPrefix(h, "Bearer "):
		secret = strings.TrimSpace(strings.TrimPrefix(h, "Bearer "))
	case strings.HasPrefix(h, "Basic ") && git:
		if _, p, ok := c.Request.BasicAuth(); ok {
			secret = p
		}
	case strings.HasPrefix(h, "Basic "):
		c.Header("WWW-Authenticate", `Bearer realm="lockstep"`)
		writeError(c, lockstep.Errorf(lockstep.EUNAUTH, "basic auth is for /git only: send Authorization: Bearer <key>"))
		c.Abort()
		return
	}
	// RFC 6750: a 401 names its scheme, so that clients (MCP SDKs) know
	// an API key is wanted, not an interactive OAuth flow.
	scheme := `Bearer realm="lockstep"`
	if git {
		scheme = `Basic realm="lockstep"`
	}
	if secret == "" {
		c.Header("WWW-Authenticate", scheme)
		writeError(c, lockstep.Errorf(lockstep.EUNAUTH, "missing API key: send Authorization: Bearer <key>"))
		c.Abort()
		return
	}
	k, err := s.Keys.Authenticate(c.Request.Context(), secret)
	if err != nil {
		if git || lockstep.ErrorCode(err) == lockstep.EUNAUTH {
			c.Header("WWW-Authenticate", scheme)
		}
		writeError(c, err)
		c.Abort()
		return
	}
	// A scoped key acts only on its workspace(s): every route naming a
	// repository (API, git smart HTTP; MCP tools call the API) checks it
	// here, before any body is read.
	name := c.Param("repo")
	if git {
		name = strings.TrimSuffix(name, ".git")
	}
	if err := s.scopeCheck(c.Request.Context(), k, name); err != nil {
		if git {
			// git prints a text/plain reason as "remote: <reason>".
			gitAdvertiseError(c, err)
			c.Abort()
			return
		}
		writeError(c, err)
		c.Abort()
		return
	}
	if err := s.rateLimit(c, k); err != nil {
		if git {
			gitAdvertiseError(c, err) // "remote: rate limit: …"
			c.Abort()
			return
		}
		writeError(c, err)
		c.Abort()
		return
	}
	ctx := auth.WithKey(c.Request.Context(), k)
	trace.SpanFromContext(ctx).SetAttributes(attribute.String("lockstep.key", k.Name))
	c.Request = c.Request.WithContext(ctx)
	c.Next()
}

// scopeCheck returns permission_denied when k is a scoped key and the
// repository named by a route (name, "" for none) is outside its scope:
// the API, git smart HTTP and UI middlewares all call it before the
// handler runs. An unknown name passes (the handler answers not_found).
func (s *Server) scopeCheck(ctx context.Context, k *lockstep.Key, name string) error {
	if k == nil || k.Scope == nil || name == "" {
		return nil
	}
	r, err := s.Store.RepoByName(ctx, name)
	if err == nil {
		err = k.InScope(r)
	}
	if err != nil && lockstep.ErrorCode(err) != lockstep.ENOTFOUND {
		return err
	}
	return nil
}

// caller returns the authenticated key of the request.
func caller(c *gin.Context) *lockstep.Key { return auth.FromContext(c.Request.Context()) }
