//go:build lockstep_server

package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/agentmcp"
	"github.com/lockstep-hq/lockstep/auth"
	"github.com/lockstep-hq/lockstep/branches"
	"github.com/lockstep-hq/lockstep/bucket"
	"github.com/lockstep-hq/lockstep/checkpoints"
	"github.com/lockstep-hq/lockstep/dbbranch"
	"github.com/lockstep-hq/lockstep/delivery"
	"github.com/lockstep-hq/lockstep/effects"
	"github.com/lockstep-hq/lockstep/filebucket"
	"github.com/lockstep-hq/lockstep/gate"
	"github.com/lockstep-hq/lockstep/gitobj"
	"github.com/lockstep-hq/lockstep/gitstore"
	"github.com/lockstep-hq/lockstep/redisbranch"
	"github.com/lockstep-hq/lockstep/redislock"
	"github.com/lockstep-hq/lockstep/replica"
	"github.com/lockstep-hq/lockstep/repositories"
	"github.com/lockstep-hq/lockstep/s3packs"
	"github.com/lockstep-hq/lockstep/sqlstore"
	"github.com/lockstep-hq/lockstep/telemetry"
	"github.com/lockstep-hq/lockstep/web"
	"github.com/lockstep-hq/lockstep/workspaces"
)

// serveConfig is every setting of `lockstep serve`. Each is a flag and an
// environment variable (the flag wins); the README lists them.
type serveConfig struct {
	Data              string
	Addr              string
	DatabaseURL       string
	RedisURL          string
	BranchDatabaseURL string
	MaxUploadBytes    int64
	MaxFileBytes      int64
	MaxFiles          int
	MaxJSONBytes      int64
	MaxEditBytes      int64
	MaxUploads        int
	QuotaWorkspaces   int // issue 28: per-key bounds
	RateLimitRPS      int
	RateLimitBurst    int
	QuotaUploads      int
	QuotaStorage      int64
	QuotaRuns         int
	Fsync             bool
	LogLevel          string
	ShutdownTimeout   time.Duration
	MergeRetries      int
	MergeMaxFileBytes int64
	MergeRenameLimit  int
	ScopedCommitSkew  time.Duration
	PreflightBatchMax int
	ComparePatchBytes int64
	CompactPacks      int
	HookTimeout       time.Duration
	HookMaxAttempts   int
	HookBackoff       time.Duration
	HookMaxBackoff    time.Duration
	BranchSecret      string
	BranchPrefix      string
	BranchWarm        bool
	BranchMaxSnaps    int
	BranchSpares      int
	HookAllowHosts    string
	SecretKeyFile     string
	ReadHeaderTimeout time.Duration
	IdleTimeout       time.Duration
	BodyTimeout       time.Duration
	BodyMinRate       int64
	WriteTimeout      time.Duration
	WriteMinRate      int64
	MaxSSE            int
	MaxSSEPerKey      int
	SSELifetime       time.Duration
	// Idempotent writes (web/idempotency.go, docs/idempotency.md).
	IdemRetention time.Duration
	IdemLease     time.Duration
	IdemWait      time.Duration
	// Run jobs on runners (web/runjobs.go).
	RunJobTimeout, RunnerLease, RunnerPollWait, RunJobQueueTimeout time.Duration
	RunJobMaxOutputBytes                                           int64
	ObjectStore                                                    string
	ObjectGrace                                                    time.Duration
	ObjectGC                                                       time.Duration
	ObjectInlineMax                                                int64
	// Object GC (issue 28): unreachable objects older than
	// ObjectRetention are dropped every GCInterval (0 = never).
	ObjectRetention time.Duration
	GCInterval      time.Duration
	// RetentionInterval: how often the workspace retention sweeper runs
	// (issue 28 item 2; 0 = never).
	RetentionInterval time.Duration
	// CheckpointRetention: checkpoints' database and Redis snapshots
	// older than this are dropped by the retention sweeper (0: kept
	// until their workspace goes).
	CheckpointRetention time.Duration
	// idemPausePrefix is test-only fault injection, read from
	// LOCKSTEP_TEST_PAUSE_AFTER_COMMIT (not a setting).
	idemPausePrefix string
	idemPauseRun    string // LOCKSTEP_TEST_PAUSE_BEFORE_RUN
	// objEnv gives the object store's keys (AWS_ACCESS_KEY_ID, …); nil:
	// the process environment (lockstep bench passes its own).
	objEnv    func(string) string
	TempGrace time.Duration
	// MCP over HTTP (agentmcp.HTTPOptions).
	MCPStateful       bool
	MCPMaxSessions    int
	MCPMaxSessionsKey int
	MCPSessionIdle    time.Duration
	MCPMaxReadBytes   int64

	// The effects outbox (effects/).
	EffectAllowHosts    string
	EffectMaxBodyBytes  int
	EffectMaxStaged     int
	EffectTimeout       time.Duration
	EffectMaxAttempts   int
	EffectBackoff       time.Duration
	EffectMaxBackoff    time.Duration
	EffectSigningSecret string
	EffectDelivery      bool

	// A Redis outage fails fast (issue 21 item 14): redislock.NewClient.
	RedisTimeout  time.Duration
	RedisCooldown time.Duration

	// Redis branches (issue 22 item 4): redisbranch.
	BranchRedis      string
	BranchRedisDir   string
	BranchRedisPorts string
}

func (c *serveConfig) declare(f *flagger) {
	f.str(&c.Data, "data", "LOCKSTEP_DATA", "./lockstep-data", "data directory: git object stores, SQLite metadata, admin.key")
	f.str(&c.Addr, "addr", "LOCKSTEP_ADDR", "127.0.0.1:7070", "listen address")
	f.url(&c.DatabaseURL, "database-url", "LOCKSTEP_DATABASE_URL", "", "postgres:// URL for metadata; empty = embedded SQLite in the data directory")
	f.url(&c.RedisURL, "redis-url", "LOCKSTEP_REDIS_URL", "", "redis:// URL shared by replicas; empty = none")
	f.url(&c.BranchDatabaseURL, "branch-database-url", "LOCKSTEP_BRANCH_DATABASE_URL", "", "postgres:// URL of a server where Lockstep may create branch databases; empty = database branching off")
	f.i64(&c.MaxUploadBytes, "max-upload-bytes", "LOCKSTEP_MAX_UPLOAD_BYTES", 512<<20, "largest worktree or pack upload (body and decompressed)")
	f.i64(&c.MaxFileBytes, "max-file-bytes", "LOCKSTEP_MAX_FILE_BYTES", 100<<20, "largest single file in an upload")
	f.int(&c.MaxFiles, "max-files", "LOCKSTEP_MAX_FILES", 100_000, "most entries in one upload")
	f.int(&c.MaxUploads, "max-concurrent-uploads", "LOCKSTEP_MAX_CONCURRENT_UPLOADS", web.DefaultMaxConcurrentUploads, "uploads (tar, object packs, git pushes) served at once; more answer 503 with Retry-After")
	f.int(&c.QuotaWorkspaces, "quota-workspaces", "LOCKSTEP_QUOTA_WORKSPACES", 100, "active workspaces one non-admin key may own (0: unlimited; PUT /keys/{id}/quota overrides per key); more answer 429")
	f.int(&c.RateLimitRPS, "rate-limit-rps", "LOCKSTEP_RATE_LIMIT_RPS", 0, "requests per second one key may make, per replica (token bucket; 0: off); more answer 429 with Retry-After")
	f.int(&c.RateLimitBurst, "rate-limit-burst", "LOCKSTEP_RATE_LIMIT_BURST", 0, "requests one key may make at once above --rate-limit-rps (0: the rate itself)")
	f.i64(&c.QuotaStorage, "quota-storage-bytes", "LOCKSTEP_QUOTA_STORAGE_BYTES", 0, "bytes the successful writes into one non-admin key's active workspaces may add to the object store (0: unlimited); at or beyond it writes answer 429")
	f.int(&c.QuotaRuns, "quota-runs", "LOCKSTEP_QUOTA_RUNS", 0, "run jobs one non-admin key may have queued or running at once (0: unlimited); more answer 429")
	f.int(&c.QuotaUploads, "quota-uploads", "LOCKSTEP_QUOTA_UPLOADS", 0, "uploads (tar, objects, edits, git push) one non-admin key may have in progress at once (0: unlimited); more answer 429")
	f.i64(&c.MaxJSONBytes, "max-json-bytes", "LOCKSTEP_MAX_JSON_BYTES", 1<<20, "largest JSON request body")
	f.i64(&c.MaxEditBytes, "max-edit-bytes", "LOCKSTEP_MAX_EDIT_BYTES", 32<<20, "largest file-edit batch (POST /edits; JSON with file contents)")
	f.bool(&c.Fsync, "fsync", "LOCKSTEP_FSYNC", true, "fsync objects before a ref moves (the ref mirror is rebuilt from the store at start-up)")
	f.str(&c.LogLevel, "log-level", "LOCKSTEP_LOG_LEVEL", "info", "debug, info, warn or error")
	f.dur(&c.ShutdownTimeout, "shutdown-timeout", "LOCKSTEP_SHUTDOWN_TIMEOUT", 30*time.Second, "time in-flight requests get to finish on SIGINT/SIGTERM")
	f.int(&c.MergeRetries, "merge-retries", "LOCKSTEP_MERGE_RETRIES", 8, "how often a materialize recomputes when the target branch moved meanwhile")
	f.int(&c.MergeRenameLimit, "merge-rename-limit", "LOCKSTEP_MERGE_RENAME_LIMIT", 7000, "rename detection in merges compares at most this many squared deleted×added files by similarity (git's merge.renameLimit); exact renames are always found")
	f.dur(&c.ScopedCommitSkew, "scoped-commit-skew", "LOCKSTEP_SCOPED_COMMIT_SKEW", repositories.DefaultScopedCommitSkew, "a scoped key's commit id is found reachable from its repository's refs only if committer times run backwards along the history by no more than this (the walk stops that far below the commit); more costs a refusal more of the history")
	f.int(&c.PreflightBatchMax, "preflight-batch-max", "LOCKSTEP_PREFLIGHT_BATCH_MAX", repositories.DefaultPreflightBatchMax, "most workspaces one batch preflight (POST /repos/{base}/merges/preflight) takes; more is invalid_argument")
	f.i64(&c.MergeMaxFileBytes, "merge-max-file-bytes", "LOCKSTEP_MERGE_MAX_FILE_BYTES", 8<<20, "larger files are not merged line by line (a path-level conflict instead)")
	f.i64(&c.ComparePatchBytes, "compare-patch-bytes", "LOCKSTEP_COMPARE_PATCH_BYTES", 1<<20, "unified diffs returned by one compare (later files: counts only)")
	f.int(&c.CompactPacks, "compact-packs", "LOCKSTEP_COMPACT_PACKS", 64, "fold a network's packs into one (git repack) once it has more than this; 0 = never")
	f.dur(&c.HookTimeout, "hook-timeout", "LOCKSTEP_HOOK_TIMEOUT", 10*time.Second, "timeout of one gate-hook delivery")
	f.int(&c.HookMaxAttempts, "hook-max-attempts", "LOCKSTEP_HOOK_MAX_ATTEMPTS", 8, "attempts before a delivery is marked failed")
	f.dur(&c.HookBackoff, "hook-backoff", "LOCKSTEP_HOOK_BACKOFF", 2*time.Second, "first retry delay of a failed delivery (doubles, ±20% jitter)")
	f.secret(&c.BranchSecret, "branch-secret", "LOCKSTEP_BRANCH_SECRET", "secret deriving branch roles' passwords (default: generated once into <data>/branch.secret; replicas must share it)")
	f.str(&c.BranchPrefix, "branch-prefix", "LOCKSTEP_BRANCH_PREFIX", "", "prefix of every database and role Lockstep creates on the branch server (default: \"ls\" and 4 characters derived from the branch secret, kept in <data>/branch.prefix)")
	f.bool(&c.BranchWarm, "branch-warm", "LOCKSTEP_BRANCH_WARM", true, "keep pre-made database copies so fork and restore-latest are a rename")
	f.int(&c.BranchSpares, "branch-spares", "LOCKSTEP_BRANCH_SPARES", dbbranch.DefaultMaxSpares, "most pre-made copies kept per repository template with --branch-warm (the pool follows demand: as many as forks arrived at once)")
	f.int(&c.BranchMaxSnaps, "branch-max-snapshots", "LOCKSTEP_BRANCH_MAX_SNAPSHOTS", 20, "database snapshots kept per workspace (oldest dropped)")
	f.dur(&c.TempGrace, "temp-grace", "LOCKSTEP_TEMP_GRACE", 15*time.Minute, "temp files in the data directory untouched this long are taken as left by a crash and removed (at start-up, then every grace/2)")
	f.dur(&c.HookMaxBackoff, "hook-max-backoff", "LOCKSTEP_HOOK_MAX_BACKOFF", 10*time.Minute, "longest retry delay")
	f.str(&c.HookAllowHosts, "hook-allow-hosts", "LOCKSTEP_HOOK_ALLOW_HOSTS", "", "hook targets allowed although internal (loopback, private, link-local): comma-separated host names, IPs, CIDRs")
	f.str(&c.EffectAllowHosts, "effect-allow-hosts", "LOCKSTEP_EFFECT_ALLOW_HOSTS", "", "effect targets allowed although internal (loopback, private, link-local): comma-separated host names, IPs, CIDRs (as --hook-allow-hosts)")
	f.int(&c.EffectMaxBodyBytes, "effect-max-body-bytes", "LOCKSTEP_EFFECT_MAX_BODY_BYTES", 1<<20, "largest body of a staged effect (and of its compensation)")
	f.int(&c.EffectMaxStaged, "effect-max-staged", "LOCKSTEP_EFFECT_MAX_STAGED", 1000, "most staged (not yet released or discarded) effects per workspace")
	f.dur(&c.EffectTimeout, "effect-timeout", "LOCKSTEP_EFFECT_TIMEOUT", 10*time.Second, "timeout of one effect delivery")
	f.int(&c.EffectMaxAttempts, "effect-max-attempts", "LOCKSTEP_EFFECT_MAX_ATTEMPTS", 8, "attempts before a released effect is marked failed")
	f.dur(&c.EffectBackoff, "effect-backoff", "LOCKSTEP_EFFECT_BACKOFF", 2*time.Second, "first retry delay of a failed effect delivery (doubles, ±20% jitter)")
	f.dur(&c.EffectMaxBackoff, "effect-max-backoff", "LOCKSTEP_EFFECT_MAX_BACKOFF", 10*time.Minute, "longest effect retry delay")
	f.secret(&c.EffectSigningSecret, "effect-signing-secret", "LOCKSTEP_EFFECT_SIGNING_SECRET", "secret signing every effect delivery (Standard Webhooks webhook-signature; a whsec_ secret is base64 of the key); empty = unsigned")
	f.bool(&c.EffectDelivery, "effect-delivery", "LOCKSTEP_EFFECT_DELIVERY", true, "run the effects outbox worker on this replica (false: this replica stages and releases, others deliver)")
	f.str(&c.SecretKeyFile, "secret-key-file", "LOCKSTEP_SECRET_KEY_FILE", "", "file with the key (64 hex digits) that encrypts hook secrets at rest (default: generated once into <data>/secret.key; replicas must share it)")
	f.dur(&c.ReadHeaderTimeout, "read-header-timeout", "LOCKSTEP_READ_HEADER_TIMEOUT", 10*time.Second, "time a client gets to send a request's headers")
	f.dur(&c.IdleTimeout, "idle-timeout", "LOCKSTEP_IDLE_TIMEOUT", 2*time.Minute, "an idle keep-alive connection is closed after this")
	f.dur(&c.BodyTimeout, "body-timeout", "LOCKSTEP_BODY_TIMEOUT", web.DefaultBodyTimeout, "longest silence of a request body, and the grace before --body-min-rate applies")
	f.i64(&c.BodyMinRate, "body-min-rate", "LOCKSTEP_BODY_MIN_RATE", web.DefaultBodyMinRate, "slowest average rate (bytes/s) a request body may arrive at after the grace")
	f.dur(&c.WriteTimeout, "write-timeout", "LOCKSTEP_WRITE_TIMEOUT", web.DefaultWriteTimeout, "longest a response write may wait for the client to read, and the grace before --write-min-rate applies; beyond it the client is disconnected (and a git fetch's upload-pack killed)")
	f.int(&c.MaxSSE, "max-sse-streams", "LOCKSTEP_MAX_SSE_STREAMS", web.DefaultMaxSSEStreams, "the UI's live-update streams (/ui/events) open at once; more answer 429 with Retry-After")
	f.int(&c.MaxSSEPerKey, "max-sse-streams-per-key", "LOCKSTEP_MAX_SSE_STREAMS_PER_KEY", web.DefaultMaxSSEStreamsPerKey, "the UI's live-update streams one key may hold open; more answer 429 with Retry-After")
	f.dur(&c.SSELifetime, "sse-max-lifetime", "LOCKSTEP_SSE_MAX_LIFETIME", web.DefaultSSEMaxLifetime, "a live-update stream is ended after this (the browser reconnects)")
	f.i64(&c.WriteMinRate, "write-min-rate", "LOCKSTEP_WRITE_MIN_RATE", web.DefaultWriteMinRate, "slowest average rate (bytes/s) a client may read a response at after the grace")
	f.dur(&c.RunJobTimeout, "run-job-timeout", "LOCKSTEP_RUN_JOB_TIMEOUT", web.DefaultRunJobTimeout, "a run job's command is killed after this (its default and longest timeout)")
	f.dur(&c.RunnerLease, "runner-lease", "LOCKSTEP_RUNNER_LEASE", web.DefaultRunnerLease, "a runner running a job renews its lease within this; a job whose lease ends fails (its runner died)")
	f.dur(&c.RunnerPollWait, "runner-poll-wait", "LOCKSTEP_RUNNER_POLL_WAIT", web.DefaultRunnerPollWait, "how long a runner's long poll waits for a job; a runner not seen for 2×this+--runner-lease is not alive")
	f.i64(&c.RunJobMaxOutputBytes, "run-job-max-output-bytes", "LOCKSTEP_RUN_JOB_MAX_OUTPUT_BYTES", web.DefaultRunJobMaxOutputBytes, "output text one run job stores (its lines, what GET …/jobs/{id} and the stream show); the rest is dropped after a line saying so")
	f.dur(&c.RunJobQueueTimeout, "run-job-queue-timeout", "LOCKSTEP_RUN_JOB_QUEUE_TIMEOUT", web.DefaultRunJobQueueTimeout, "a run job no runner takes within this fails")
	f.dur(&c.IdemRetention, "idempotency-retention", "LOCKSTEP_IDEMPOTENCY_RETENTION", 24*time.Hour, "how long an Idempotency-Key's answer is kept (then cleaned up)")
	f.dur(&c.IdemLease, "idempotency-lease", "LOCKSTEP_IDEMPOTENCY_LEASE", 30*time.Second, "a running keyed request's lease (renewed while it runs); after a crash its key is free again once this passed, if nothing committed")
	f.str(&c.ObjectStore, "object-store", s3packs.Setting, "", "s3://bucket/prefix?endpoint=host:port[&insecure=true&region=…&path_style=true] or file:///dir: keep each network's packs in this S3-compatible bucket or directory (several replicas; needs --database-url, a shared --secret-key-file; keys from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY); empty = the local disk")
	f.dur(&c.ObjectGrace, "object-grace", "LOCKSTEP_OBJECT_GRACE", replica.DefaultGrace, "object store: a retired or never-registered pack is deleted only once older than this; a write whose upload takes over half of it fails (must exceed the longest upload)")
	f.i64(&c.ObjectInlineMax, "object-inline-max", "LOCKSTEP_OBJECT_INLINE_MAX", replica.DefaultInlineMax, "object store: a pack of at most this many bytes (pack plus index; a rollback's commit is ~1.2 KiB) is kept in the metadata database with its record instead of the bucket: one transaction instead of two PUTs and a transaction; 0 = every pack goes to the bucket")
	f.dur(&c.ObjectRetention, "object-retention", "LOCKSTEP_OBJECT_RETENTION", repositories.DefaultObjectRetention, "unreachable objects (abandoned and deleted workspaces' attempts, lost races) older than this are dropped by the object GC (`lockstep gc`, --gc-interval); 0 is refused (use `lockstep gc --prune now`)")
	f.dur(&c.GCInterval, "gc-interval", "LOCKSTEP_GC_INTERVAL", 24*time.Hour, "how often the object GC runs (one replica at a time, lease in the database); 0 = never (run `lockstep gc`)")
	f.dur(&c.CheckpointRetention, "checkpoint-retention", "LOCKSTEP_CHECKPOINT_RETENTION", checkpoints.DefaultSnapshotRetention, "checkpoints' database and Redis snapshots older than this are dropped every --retention-interval (the checkpoint stays, its restore skips those parts); 0 = kept until their workspace is abandoned, promoted or deleted")
	f.dur(&c.RetentionInterval, "retention-interval", "LOCKSTEP_RETENTION_INTERVAL", time.Hour, "how often the workspace retention sweeper applies the repositories' retention policies (`lockstep repo retention`; one replica at a time, lease in the database); 0 = never")
	f.dur(&c.ObjectGC, "object-gc-interval", "LOCKSTEP_OBJECT_GC_INTERVAL", 10*time.Minute, "object store: how often garbage collection of the bucket runs (one replica at a time); 0 = never")
	f.bool(&c.MCPStateful, "mcp-stateful", "LOCKSTEP_MCP_STATEFUL", false, "keep MCP sessions (Mcp-Session-Id, SSE on GET) in this process; default stateless: every /mcp POST stands alone, so restarts and replicas are invisible to clients")
	f.int(&c.MCPMaxSessions, "mcp-max-sessions", "LOCKSTEP_MCP_MAX_SESSIONS", agentmcp.DefaultMaxSessions, "stateful MCP sessions open at once; more answer 429 rate_limited with Retry-After")
	f.int(&c.MCPMaxSessionsKey, "mcp-max-sessions-per-key", "LOCKSTEP_MCP_MAX_SESSIONS_PER_KEY", agentmcp.DefaultMaxSessionsPerKey, "stateful MCP sessions one API key may have open; more answer 429 rate_limited with Retry-After")
	f.dur(&c.MCPSessionIdle, "mcp-session-idle-timeout", "LOCKSTEP_MCP_SESSION_IDLE_TIMEOUT", agentmcp.DefaultSessionTimeout, "a stateful MCP session without requests for this long is closed")
	f.i64(&c.MCPMaxReadBytes, "mcp-max-read-bytes", "LOCKSTEP_MCP_MAX_READ_BYTES", agentmcp.DefaultMaxReadBytes, "largest file the MCP file_read tool and file resource return")
	f.dur(&c.RedisTimeout, "redis-timeout", "LOCKSTEP_REDIS_TIMEOUT", redislock.DefaultTimeout, "bound of one Redis dial, read or write (a command is tried twice at most)")
	f.dur(&c.RedisCooldown, "redis-cooldown", "LOCKSTEP_REDIS_COOLDOWN", redislock.DefaultCooldown, "after Redis fails, how long it is skipped (notifications not sent, promotes 503) before it is tried again")
	f.dur(&c.IdemWait, "idempotency-wait", "LOCKSTEP_IDEMPOTENCY_WAIT", 10*time.Second, "how long a concurrent duplicate waits for the first request before 409 in_progress")
	f.str(&c.BranchRedis, "branch-redis", "LOCKSTEP_BRANCH_REDIS", "", "Redis branching: on (redis-server from PATH) or the path of a redis-server binary; empty = off")
	f.str(&c.BranchRedisDir, "branch-redis-dir", "LOCKSTEP_BRANCH_REDIS_DIR", "", "Redis branches' data (templates/<repo>.rdb, branches/<workspace>/); empty = <data>/redis-branches")
	f.str(&c.BranchRedisPorts, "branch-redis-ports", "LOCKSTEP_BRANCH_REDIS_PORTS", "16400-16999", "127.0.0.1 port range of the per-workspace redis-server instances")
}

func (c *serveConfig) metadataURL() string {
	if c.DatabaseURL != "" {
		return c.DatabaseURL
	}
	return sqlstore.SQLitePath(c.Data)
}

func cmdMigrate(ctx context.Context, e *env, args []string) error {
	var c serveConfig
	f := newFlagger("migrate", e)
	// Only what migrate uses (serve's ~40 others would only confuse -h).
	f.str(&c.Data, "data", "LOCKSTEP_DATA", "./lockstep-data", "data directory (its SQLite metadata when --database-url is empty)")
	f.url(&c.DatabaseURL, "database-url", "LOCKSTEP_DATABASE_URL", "", "postgres:// URL for metadata; empty = embedded SQLite in the data directory")
	if err := f.parse(args); err != nil {
		return err
	}
	db, err := sqlstore.Open(ctx, c.metadataURL(), sqlstore.Options{Migrate: true})
	if err != nil {
		return err
	}
	defer db.Close()
	v, _, err := db.SchemaVersion()
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "metadata schema (%s) at version %d\n", db.Dialect(), v)
	return nil
}

func cmdServe(ctx context.Context, e *env, args []string) error {
	var c serveConfig
	f := newFlagger("serve", e)
	c.declare(f)
	if err := f.parse(args); err != nil {
		return err
	}
	c.idemPausePrefix = e.getenv("LOCKSTEP_TEST_PAUSE_AFTER_COMMIT")
	c.idemPauseRun = e.getenv("LOCKSTEP_TEST_PAUSE_BEFORE_RUN")
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.LogLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	logger := slog.New(slog.NewJSONHandler(e.stderr, &slog.HandlerOptions{Level: level}))
	fdLimit := raiseFileLimit()
	a, err := startApp(ctx, &c, logger)
	if err != nil {
		return err
	}
	defer a.close()

	ln, err := net.Listen("tcp", c.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", c.Addr, err)
	}
	srv := &http.Server{Handler: a.handler, ReadHeaderTimeout: c.ReadHeaderTimeout, IdleTimeout: c.IdleTimeout,
		ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
	errc := make(chan error, 1)
	for _, f := range a.onShutdown {
		srv.RegisterOnShutdown(f) // MCP sessions' streams end, so Shutdown need not wait for them
	}
	go func() { errc <- srv.Serve(ln) }()
	fdLimit.log(logger)
	logger.Info("lockstep serving", "addr", ln.Addr().String(), "data", c.Data, "metadata", a.store.Dialect(),
		"redis", c.RedisURL != "", "database_branching", c.BranchDatabaseURL != "")
	if a.adminKeyPath != "" {
		fmt.Fprintf(e.stdout, "created the first admin key: %s (mode 0600)\n", a.adminKeyPath)
	}
	fmt.Fprintf(e.stdout, "lockstep listening on http://%s\n", ln.Addr())
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	logger.Info("shutting down: waiting for in-flight requests", "timeout", c.ShutdownTimeout.String())
	sctx, cancel := context.WithTimeout(context.Background(), c.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}

// app is the wired service.
type app struct {
	store        *sqlstore.DB
	repos        *repositories.Service
	handler      http.Handler
	adminKeyPath string
	closers      []func()
	onShutdown   []func()
}

func (a *app) close() {
	for i := len(a.closers) - 1; i >= 0; i-- {
		a.closers[i]()
	}
}

func startApp(ctx context.Context, c *serveConfig, logger *slog.Logger) (*app, error) {
	a := &app{}
	ok := false
	defer func() {
		if !ok {
			a.close()
		}
	}()
	privateUmask()
	if err := secureDataDir(c.Data, logger); err != nil {
		return nil, err
	}
	var objLoc bucket.Location
	if c.ObjectStore != "" {
		// Refused before anything starts: replicas cannot share these.
		if c.DatabaseURL == "" {
			return nil, fmt.Errorf("%s needs LOCKSTEP_DATABASE_URL (postgres://…): replicas share the metadata database, and the embedded SQLite cannot be shared", s3packs.Setting)
		}
		if c.SecretKeyFile == "" {
			return nil, fmt.Errorf("%s needs LOCKSTEP_SECRET_KEY_FILE: every replica must encrypt hook secrets with the same key (64 hex digits, e.g. `openssl rand -hex 32`)", s3packs.Setting)
		}
		if c.ObjectGrace <= 0 {
			return nil, fmt.Errorf("--object-grace (LOCKSTEP_OBJECT_GRACE) must be positive, got %s", c.ObjectGrace)
		}
		if c.ObjectInlineMax < 0 || c.ObjectInlineMax > 16<<20 {
			return nil, fmt.Errorf("--object-inline-max (LOCKSTEP_OBJECT_INLINE_MAX) must be between 0 (off) and 16777216 bytes, got %d", c.ObjectInlineMax)
		}
		if c.ObjectGC < 0 {
			return nil, fmt.Errorf("--object-gc-interval (LOCKSTEP_OBJECT_GC_INTERVAL) must not be negative, got %s", c.ObjectGC)
		}
		getenv := c.objEnv
		if getenv == nil {
			getenv = os.Getenv
		}
		var err error
		if objLoc, err = objectBackends().Parse(s3packs.Setting, c.ObjectStore, getenv); err != nil {
			return nil, err
		}
	}
	allow, err := delivery.ParseAllowList(c.HookAllowHosts)
	if err != nil {
		return nil, fmt.Errorf("--hook-allow-hosts: %w", err)
	}
	secretKey, err := loadSecretKey(c)
	if err != nil {
		return nil, err
	}
	shutdownTraces, err := telemetry.Setup(ctx, os.Getenv)
	if err != nil {
		return nil, err
	}
	a.closers = append(a.closers, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		shutdownTraces(sctx)
	})
	db, err := sqlstore.Open(ctx, c.metadataURL(), sqlstore.Options{Migrate: true, SecretKey: secretKey})
	if err != nil {
		return nil, err
	}
	if n := db.SealedAtOpen(); n > 0 {
		logger.Info("encrypted secrets stored in plaintext by an older version (hook secrets, target URL queries)", "rows", n)
	}
	a.store = db
	a.closers = append(a.closers, func() { db.Close() })

	var rdb *redis.Client
	if c.RedisURL != "" {
		opt, err := redis.ParseURL(c.RedisURL)
		if err != nil {
			return nil, fmt.Errorf("LOCKSTEP_REDIS_URL: %w", err)
		}
		rdb, _ = redislock.NewClient(opt, redislock.ClientOptions{Timeout: c.RedisTimeout, Cooldown: c.RedisCooldown})
		a.closers = append(a.closers, func() { rdb.Close() })
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err = rdb.Ping(pctx).Err()
		cancel()
		if err != nil {
			return nil, fmt.Errorf("redis at LOCKSTEP_REDIS_URL does not answer: %w", err)
		}
	}
	// The object store of every network: the one line that picks an
	// implementation of gitobj.Opener (docs/architecture.md).
	var objects gitobj.Opener = gitstore.Local{}
	var sweepBucket func(context.Context) (int, error) // object storage: the bucket GC, run at the end of an object GC
	var objectStore bucket.Bucket
	if c.ObjectStore != "" {
		bkt, err := objLoc.Open(ctx)
		if err != nil {
			return nil, err
		}
		objectStore = bkt
		packs, ok := any(db).(lockstep.PackStore)
		if !ok {
			return nil, fmt.Errorf("%s: this metadata store keeps no pack lists", s3packs.Setting)
		}
		rc := replica.Config{Objects: bkt, Packs: packs, Grace: c.ObjectGrace, GCInterval: c.ObjectGC, InlineMax: c.ObjectInlineMax, Log: logger}
		if rdb != nil {
			rc.Notify = redislock.NewNotifier(rdb, "lockstep:net:")
		}
		mgr := replica.New(rc)
		sweepBucket = func(ctx context.Context) (int, error) {
			st, err := mgr.GC(ctx)
			return st.Deleted, err
		}
		a.closers = append(a.closers, mgr.Close)
		objects = mgr
		logger.Info("objects in object storage", "store", objLoc.String(), "grace", c.ObjectGrace.String(), "inline_max", c.ObjectInlineMax, "gc_interval", c.ObjectGC.String())
	}
	metrics := telemetry.NewMetrics()
	keys := auth.New(db, nil)
	a.adminKeyPath, err = bootstrapAdmin(ctx, db, keys, c.Data)
	if err != nil {
		return nil, err
	}
	if c.ObjectRetention <= 0 {
		return nil, fmt.Errorf("--object-retention (LOCKSTEP_OBJECT_RETENTION) must be positive, got %s", c.ObjectRetention)
	}
	if c.QuotaStorage < 0 {
		return nil, fmt.Errorf("--quota-storage-bytes (LOCKSTEP_QUOTA_STORAGE_BYTES) must not be negative (0: unlimited), got %d", c.QuotaStorage)
	}
	if c.QuotaRuns < 0 {
		return nil, fmt.Errorf("--quota-runs (LOCKSTEP_QUOTA_RUNS) must not be negative (0: unlimited), got %d", c.QuotaRuns)
	}
	if c.CheckpointRetention < 0 {
		return nil, fmt.Errorf("--checkpoint-retention (LOCKSTEP_CHECKPOINT_RETENTION) must not be negative (0: no age limit), got %s", c.CheckpointRetention)
	}
	if c.RetentionInterval < 0 {
		return nil, fmt.Errorf("--retention-interval (LOCKSTEP_RETENTION_INTERVAL) must not be negative, got %s", c.RetentionInterval)
	}
	if c.GCInterval < 0 {
		return nil, fmt.Errorf("--gc-interval (LOCKSTEP_GC_INTERVAL) must not be negative, got %s", c.GCInterval)
	}
	a.repos = repositories.New(repositories.Config{DataDir: c.Data, Fsync: c.Fsync, MergeRetries: c.MergeRetries,
		MergeMaxFileBytes: c.MergeMaxFileBytes, MergeRenameLimit: c.MergeRenameLimit, ScopedCommitSkew: c.ScopedCommitSkew, PreflightBatchMax: c.PreflightBatchMax, ComparePatchBytes: c.ComparePatchBytes, CompactPacks: c.CompactPacks, TempGrace: c.TempGrace,
		Objects: objects, SweepBucket: sweepBucket,
		Limits: gitobj.Limits{MaxUploadBytes: c.MaxUploadBytes, MaxFileBytes: c.MaxFileBytes, MaxFiles: c.MaxFiles}},
		db, logger, metrics, nil)
	a.closers = append(a.closers, func() { a.repos.Close() })
	if c.TempGrace <= 0 {
		return nil, fmt.Errorf("--temp-grace (LOCKSTEP_TEMP_GRACE) must be positive, got %s", c.TempGrace)
	}
	// Temp files first: on a full disk they are what frees space.
	a.repos.SweepTemps()
	// Refs the mirror cannot hold are logged and skipped (see /readyz):
	// only a store error stops the start.
	if err := a.repos.ResyncMirrors(ctx); err != nil {
		return nil, fmt.Errorf("re-sync ref mirrors: %w", err)
	}
	sweepCtx, stopSweep := context.WithCancel(context.Background())
	sweepDone := make(chan struct{})
	go func() {
		defer close(sweepDone)
		t := time.NewTicker(c.TempGrace / 2)
		defer t.Stop()
		for {
			select {
			case <-sweepCtx.Done():
				return
			case <-t.C:
				a.repos.SweepTemps()
			}
		}
	}()
	a.closers = append(a.closers, func() { stopSweep(); <-sweepDone })
	if c.GCInterval > 0 {
		gcCtx, stopGC := context.WithCancel(context.Background())
		gcDone := make(chan struct{})
		go func() {
			defer close(gcDone)
			t := time.NewTicker(c.GCInterval)
			defer t.Stop()
			for {
				select {
				case <-gcCtx.Done():
					return
				case <-t.C:
					res, err := a.repos.GC(gcCtx, auth.System, repositories.GCOptions{Retention: c.ObjectRetention})
					if err != nil {
						logger.Error("object gc", "error", err)
					} else if !res.Skipped {
						logger.Info("object gc", "networks", res.Networks, "objects", res.Objects, "packs", res.Packs, "loose", res.Loose, "bytes", res.Bytes, "busy", res.Busy)
					}
				}
			}
		}()
		a.closers = append(a.closers, func() { stopGC(); <-gcDone })
	}
	g := gate.New(gate.Config{HookTimeout: c.HookTimeout, HookMaxAttempts: c.HookMaxAttempts, HookBackoff: c.HookBackoff, HookMaxBackoff: c.HookMaxBackoff,
		HookAllowHosts: allow},
		db, a.repos, logger, metrics, nil)
	if rdb != nil {
		g.Locker = redislock.New(rdb, "lockstep:", 30*time.Second)
	}
	wctx, stopWorker := context.WithCancel(context.Background())
	workerDone := make(chan struct{})
	go func() { g.Run(wctx); close(workerDone) }()
	a.closers = append(a.closers, func() { stopWorker(); <-workerDone })
	var brancher lockstep.Brancher // stays nil (not a nil *Manager) when branching is off
	if c.BranchDatabaseURL != "" {
		secret, generated, err := branchSecret(c)
		if err != nil {
			return nil, err
		}
		prefix, err := branchPrefix(c, secret, generated)
		if err != nil {
			return nil, err
		}
		if c.BranchSpares < 1 {
			return nil, fmt.Errorf("--branch-spares (LOCKSTEP_BRANCH_SPARES) must be at least 1, got %d", c.BranchSpares)
		}
		logger.Info("database branching", "prefix", prefix)
		dbs, err := dbbranch.New(ctx, dbbranch.Config{AdminURL: c.BranchDatabaseURL, Prefix: prefix, Secret: secret,
			Warm: c.BranchWarm, MaxSpares: c.BranchSpares, MaxSnapshots: c.BranchMaxSnaps})
		if err != nil {
			return nil, fmt.Errorf("database branching (LOCKSTEP_BRANCH_DATABASE_URL): %w", err)
		}
		a.closers = append(a.closers, dbs.Close)
		brancher = dbbranch.Brancher{M: dbs}
	}
	// One room holds every rule of a workspace's data branches (package
	// branches): the workspaces and checkpoints services and the gate's
	// promote callback below share it.
	room := branches.New(brancher, nil, a.repos, logger, nil)
	if rb, err := redisBrancher(c); err != nil {
		return nil, err
	} else if rb != nil {
		// Closed after the room (closers run in reverse): instances are
		// shut down saving their dataset, restarted lazily on next use.
		a.closers = append(a.closers, rb.Close)
		room.SetRedis(rb)
	}
	// Closed before the branch managers (closers run in reverse): the
	// background branch creations, drops and template refreshes end first.
	a.closers = append(a.closers, room.Close)
	wss := workspaces.New(db, a.repos, nil, logger, metrics, nil)
	wss.UseBranches(room)
	a.closers = append(a.closers, func() { wss.Close() })
	cps := checkpoints.New(db, a.repos, nil, logger, metrics, nil)
	cps.UseBranches(room)
	a.closers = append(a.closers, func() { cps.Close() })
	effectAllow, err := delivery.ParseAllowList(c.EffectAllowHosts)
	if err != nil {
		return nil, fmt.Errorf("--effect-allow-hosts: %w", err)
	}
	fx := effects.New(effects.Config{AllowHosts: effectAllow, MaxBodyBytes: c.EffectMaxBodyBytes, MaxStaged: c.EffectMaxStaged, Timeout: c.EffectTimeout,
		MaxAttempts: c.EffectMaxAttempts, Backoff: c.EffectBackoff, MaxBackoff: c.EffectMaxBackoff, SigningSecret: c.EffectSigningSecret}, db, a.repos, logger, metrics, nil)
	if c.EffectDelivery {
		ectx, stopEffects := context.WithCancel(context.Background())
		effectsDone := make(chan struct{})
		go func() { fx.Run(ectx); close(effectsDone) }()
		a.closers = append(a.closers, func() { stopEffects(); <-effectsDone })
	}
	a.startRetention(wss, cps, c.RetentionInterval, c.CheckpointRetention, logger) // retentionloop.go
	g.AfterPromote = func(ctx context.Context, base, ws *lockstep.Repo) {
		room.AfterPromote(ctx, base.Name, ws.Name)
		fx.Wake()
	}
	srv := &web.Server{
		Config: web.Config{MaxJSONBytes: c.MaxJSONBytes, MaxEditBytes: c.MaxEditBytes, MaxUploadBytes: c.MaxUploadBytes, BodyTimeout: c.BodyTimeout, BodyMinRate: c.BodyMinRate, WriteTimeout: c.WriteTimeout, WriteMinRate: c.WriteMinRate,
			MaxSSEStreams: c.MaxSSE, MaxSSEStreamsPerKey: c.MaxSSEPerKey, SSEMaxLifetime: c.SSELifetime, MaxConcurrentUploads: c.MaxUploads,
			QuotaWorkspaces: c.QuotaWorkspaces, RateLimitRPS: float64(c.RateLimitRPS), RateLimitBurst: c.RateLimitBurst, ObjectRetention: c.ObjectRetention, QuotaUploads: c.QuotaUploads,
			QuotaStorageBytes: c.QuotaStorage, QuotaRuns: c.QuotaRuns,
			RunJobTimeout: c.RunJobTimeout, RunnerLease: c.RunnerLease, RunnerPollWait: c.RunnerPollWait, RunJobQueueTimeout: c.RunJobQueueTimeout, RunJobMaxOutputBytes: c.RunJobMaxOutputBytes,
			Idempotency: web.IdempotencyConfig{Retention: c.IdemRetention, Lease: c.IdemLease, Wait: c.IdemWait, PauseAfterCommitPrefix: c.idemPausePrefix, PauseBeforeRunPrefix: c.idemPauseRun}},
		Store: db, Keys: keys, Redis: rdb, ObjectStore: objectStore, Logger: logger, Metrics: metrics, Repos: a.repos, Workspaces: wss, Gate: g, Checkpoints: cps, Effects: fx, Jobs: db,
		MCP: func(api http.Handler) http.Handler {
			h := agentmcp.HTTPHandler(api, agentmcp.HTTPOptions{Version: readVersion().short(), MaxRequestBytes: c.MaxEditBytes, MaxReadBytes: c.MCPMaxReadBytes,
				Stateful: c.MCPStateful, MaxSessions: c.MCPMaxSessions, MaxSessionsPerKey: c.MCPMaxSessionsKey, SessionTimeout: c.MCPSessionIdle})
			a.onShutdown = append(a.onShutdown, h.Shutdown)
			return h
		},
	}
	a.handler = srv.Handler()
	a.onShutdown = append(a.onShutdown, srv.Drain) // runners' long polls and job streams end at once
	pctx, stopPurge := context.WithCancel(context.Background())
	purgeDone := make(chan struct{})
	go func() { srv.PurgeIdempotencyKeys(pctx, min(c.IdemRetention/4, 10*time.Minute)); close(purgeDone) }()
	a.closers = append(a.closers, func() { stopPurge(); <-purgeDone })
	ok = true
	return a, nil
}

// redisBrancher starts Redis branching when --branch-redis is set.
func redisBrancher(c *serveConfig) (*redisbranch.Manager, error) {
	switch strings.ToLower(c.BranchRedis) {
	case "", "off", "false", "no":
		return nil, nil
	}
	secret, _, err := branchSecret(c)
	if err != nil {
		return nil, err
	}
	var lo, hi int
	if _, err := fmt.Sscanf(c.BranchRedisPorts, "%d-%d", &lo, &hi); err != nil {
		return nil, fmt.Errorf("--branch-redis-ports %q: want FIRST-LAST, e.g. 16400-16999", c.BranchRedisPorts)
	}
	dir := c.BranchRedisDir
	if dir == "" {
		dir = filepath.Join(c.Data, "redis-branches")
	}
	m, err := redisbranch.New(redisbranch.Config{Binary: c.BranchRedis, Dir: dir, Secret: append([]byte("redis:"), secret...), PortMin: lo, PortMax: hi,
		MaxSnapshots: c.BranchMaxSnaps})
	if err != nil {
		return nil, fmt.Errorf("redis branching (LOCKSTEP_BRANCH_REDIS): %w", err)
	}
	return m, nil
}

// branchSecret returns the secret that derives branch roles' passwords:
// the setting, or a random one generated once into <data>/branch.secret
// (generated reports that it was made now).
func branchSecret(c *serveConfig) (secret []byte, generated bool, err error) {
	if c.BranchSecret != "" {
		return []byte(c.BranchSecret), false, nil
	}
	path := filepath.Join(c.Data, "branch.secret")
	if b, err := os.ReadFile(path); err == nil && len(b) >= 32 {
		return b, false, nil
	}
	b := make([]byte, 32)
	rand.Read(b)
	enc := []byte(hex.EncodeToString(b))
	if err := os.WriteFile(path, enc, 0o600); err != nil {
		return nil, false, fmt.Errorf("write branch secret: %w", err)
	}
	return enc, true, nil
}

// legacyBranchPrefix is the prefix every service used before it was
// derived: data directories that branched then keep it.
const legacyBranchPrefix = "ls"

// derivedBranchPrefix is "ls" and four characters [a-z0-9] of
// SHA-256(secret): services sharing a Postgres server get different names
// (1 in 1.7 million pairs collide: set --branch-prefix to be sure), and
// replicas, which share the secret, the same.
func derivedBranchPrefix(secret []byte) string {
	sum := sha256.Sum256(append([]byte("lockstep branch prefix\x00"), secret...))
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	p := []byte(legacyBranchPrefix)
	for _, b := range sum[:4] {
		p = append(p, alphabet[int(b)%len(alphabet)])
	}
	return string(p)
}

// branchPrefix returns the prefix of every database and role on the
// branch server: --branch-prefix, or the one this data directory chose
// when it first branched (<data>/branch.prefix), chosen as
// derivedBranchPrefix, except that a data directory whose branch.secret
// predates branch.prefix keeps "ls" (its databases have those names).
func branchPrefix(c *serveConfig, secret []byte, generatedSecret bool) (string, error) {
	if c.BranchPrefix != "" {
		return c.BranchPrefix, nil
	}
	path := filepath.Join(c.Data, "branch.prefix")
	if b, err := os.ReadFile(path); err == nil {
		if p := strings.TrimSpace(string(b)); p != "" {
			return p, nil
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("read branch prefix: %w", err)
	}
	// Only a data directory that made its secret just now is new for sure:
	// a secret found on disk or given by the setting (replicas) may have
	// branched under the old fixed prefix, so it keeps it (losing track of
	// existing databases is worse than a name collision, which
	// --branch-prefix avoids).
	p := derivedBranchPrefix(secret)
	if !generatedSecret {
		p = legacyBranchPrefix
	}
	if err := os.WriteFile(path, []byte(p+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write branch prefix: %w", err)
	}
	return p, nil
}

// bootstrapAdmin creates the first admin key when the store has none.
// Replicas starting together on one database take turns (a lease), so
// exactly one of them creates it.
func bootstrapAdmin(ctx context.Context, db *sqlstore.DB, keys *auth.Service, data string) (string, error) {
	if db.Dialect() != "postgres" {
		return keys.Bootstrap(ctx, data)
	}
	host, _ := os.Hostname()
	holder := fmt.Sprintf("%s-%d-%s", host, os.Getpid(), rand.Text())
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok, err := db.ClaimLease(ctx, "bootstrap-admin-key", holder, 30*time.Second)
		if err != nil {
			return "", fmt.Errorf("first admin key: %w", err)
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("first admin key: another replica has held the bootstrap lease for 30s")
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	defer db.ReleaseLease(context.WithoutCancel(ctx), "bootstrap-admin-key", holder)
	return keys.Bootstrap(ctx, data)
}

// objectBackends is the bucket registry of --object-store: one line per
// backend, chosen by the URL's scheme.
func objectBackends() bucket.Backends {
	return bucket.Backends{
		"s3":   s3packs.Location,
		"file": filebucket.Location,
	}
}
