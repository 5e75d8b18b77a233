// Package checkpoints ties code, data and machine state together. A
// checkpoint records, in one step, a workspace branch's commit, a snapshot
// of the workspace's database and Redis branches (when it has them; the
// rules are package branches') and the id of a filesystem snapshot the client took on its machine
// (package fssnap). Restoring it makes a rollback commit to the
// checkpoint's tree (compare-and-swap, history kept), restores the
// database under the same name (the agent's DSN stays valid), and hands
// the filesystem snapshot id back for the client to restore. Every part's
// outcome is reported: never a silent half-rollback. The operations log
// links checkpoint → run failure → restore through Follows.
package checkpoints

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/branches"
	"github.com/lockstep-hq/lockstep/internal/lazyre"
	"github.com/lockstep-hq/lockstep/repositories"
	"github.com/lockstep-hq/lockstep/telemetry"
)

// Service implements checkpoints and the database routes.
type Service struct {
	store   lockstep.Store
	repos   *repositories.Service
	br      *branches.Room // the rules of the workspace's data branches
	log     *slog.Logger
	metrics *telemetry.Metrics
	now     func() time.Time
	tracer  trace.Tracer
}

// New returns the service; dbs may be nil (database branching off), now
// may be nil.
func New(store lockstep.Store, repos *repositories.Service, dbs lockstep.Brancher, log *slog.Logger, metrics *telemetry.Metrics, now func() time.Time) *Service {
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = slog.Default()
	}
	return &Service{store: store, repos: repos, br: branches.New(dbs, nil, repos, log, now), log: log, metrics: metrics, now: now, tracer: otel.Tracer("lockstep/checkpoints")}
}

// UseBranches makes the service apply the branch rules through room (the
// one cmd shares with the workspaces service). Call before serving.
func (s *Service) UseBranches(room *branches.Room) { s.br = room }

// Close cancels the background template refreshes and waits for them.
func (s *Service) Close() error {
	s.br.Close()
	return nil
}

// ErrBranchingOff is the answer of every database route without a branch
// server: not_configured (501), a final answer clients do not retry.
var ErrBranchingOff = branches.ErrDatabaseOff

var fsIDRE = lazyre.New(`^[A-Za-z0-9._:-]{1,128}$`)

// CreateRequest is the body of a checkpoint.
type CreateRequest struct {
	Branch     string `json:"branch"`
	FSSnapshot string `json:"fs_snapshot"`
	Label      string `json:"label"`
}

func newID() string {
	var b [6]byte
	rand.Read(b[:])
	return "cp-" + hex.EncodeToString(b[:])
}

// Create records a checkpoint of a workspace. Errors: not_found (unknown
// workspace or branch), permission_denied, invalid_argument.
func (s *Service) Create(ctx context.Context, actor *lockstep.Key, wsName string, req CreateRequest) (*lockstep.Checkpoint, error) {
	start := s.now()
	ctx, span := s.tracer.Start(ctx, "checkpoint.create", trace.WithAttributes(attribute.String("workspace", wsName)))
	defer span.End()
	ws, err := s.repos.Repo(ctx, wsName)
	if err != nil {
		return nil, err
	}
	if err := repositories.CanWrite(actor, ws); err != nil {
		return nil, err
	}
	if req.Branch == "" {
		req.Branch = ws.DefaultBranch
	}
	if err := lockstep.ValidateBranch(req.Branch); err != nil {
		return nil, err
	}
	if req.FSSnapshot != "" && !fsIDRE.MatchString(req.FSSnapshot) {
		return nil, lockstep.Errorf(lockstep.EINVALID, "fs_snapshot %q: want 1-128 of [A-Za-z0-9._:-]", req.FSSnapshot)
	}
	if len(req.Label) > 200 {
		return nil, lockstep.Errorf(lockstep.EINVALID, "label over 200 characters")
	}
	commit, tree, err := s.repos.BranchTip(ctx, ws, req.Branch)
	if err != nil {
		return nil, err
	}
	c := &lockstep.Checkpoint{ID: newID(), Repo: ws.Name, RepoID: ws.ID, Branch: req.Branch, Commit: commit, Tree: tree,
		FSSnapshot: req.FSSnapshot, Label: req.Label, KeyName: actor.Name}
	snaps, err := s.br.Snapshot(ctx, ws, c.ID)
	if err != nil {
		return nil, err
	}
	c.DBSnapshot, c.RedisSnapshot = snaps.Database, snaps.Redis
	dbMS, redisMS := snaps.DatabaseMS, snaps.RedisMS
	c.DurationMS = msSince(s.now(), start)
	entry := &lockstep.OpEntry{KeyID: actor.ID, KeyName: actor.Name, Op: "checkpoint", Repo: ws.Name, TraceID: traceID(ctx),
		DurationUS: s.now().Sub(start).Microseconds(),
		Details: map[string]any{"checkpoint": c.ID, "branch": c.Branch, "commit": commit, "tree": tree, "db_snapshot": c.DBSnapshot,
			"fs_snapshot": c.FSSnapshot, "label": c.Label, "db_ms": dbMS, "redis_snapshot": c.RedisSnapshot, "redis_ms": redisMS}}
	entry.Answer = c
	ev := s.repos.HookEvent(ws, "checkpoint", c.Branch, commit, tree, map[string]any{"checkpoint": c.ID})
	if err := s.store.CreateCheckpoint(ctx, c, []lockstep.HookEvent{ev}, entry); err != nil {
		s.br.DropSnapshots(ctx, ws.Name, c.DBSnapshot, c.RedisSnapshot)
		return nil, err
	}
	s.metrics.ObserveOp("checkpoint", "ok", s.now().Sub(start))
	return c, nil
}

// List returns a workspace's checkpoints, newest first.
func (s *Service) List(ctx context.Context, wsName string, limit int) ([]lockstep.Checkpoint, error) {
	ws, err := s.repos.Repo(ctx, wsName)
	if err != nil {
		return nil, err
	}
	cs, err := s.store.Checkpoints(ctx, ws.ID, limit)
	if cs == nil && err == nil {
		cs = []lockstep.Checkpoint{}
	}
	return cs, err
}

// Failure describes why a run failed, reported with the restore.
type Failure struct {
	Command    []string `json:"command,omitempty"`
	ExitCode   int      `json:"exit_code"`
	Signal     string   `json:"signal,omitempty"`
	TimedOut   bool     `json:"timed_out,omitempty"`
	Reason     string   `json:"reason,omitempty"`
	DurationMS float64  `json:"duration_ms,omitempty"`
	// The last bytes of the command's output (at most MaxOutputTail each;
	// longer tails are cut at the front).
	StdoutTail string `json:"stdout_tail,omitempty"`
	StderrTail string `json:"stderr_tail,omitempty"`
	// Evidence is the commit that keeps the failed worktree, if one was
	// pushed before the restore.
	Evidence string `json:"evidence,omitempty"`
}

// MaxOutputTail bounds each output tail a failure record keeps.
const MaxOutputTail = 8 << 10

// tail keeps the last n bytes of s, starting on a rune boundary.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[len(s)-n:]
	for i := 0; i < len(s) && i < 4; i++ {
		if utf8.RuneStart(s[i]) {
			return s[i:]
		}
	}
	return s
}

// RestoreRequest is the body of a restore.
type RestoreRequest struct {
	ExpectOID string   `json:"expect_oid"`
	Failure   *Failure `json:"failure,omitempty"`
}

// PartResult is the outcome of one part of a restore.
type PartResult struct {
	Restored bool   `json:"restored"`
	Skipped  string `json:"skipped,omitempty"`
	Error    string `json:"error,omitempty"`
}

// RestoreResult says what was restored.
type RestoreResult struct {
	Checkpoint string     `json:"checkpoint"`
	Commit     string     `json:"commit"`
	Tree       string     `json:"tree"`
	Code       PartResult `json:"code"`
	Database   PartResult `json:"database"`
	DBRestored bool       `json:"db_restored"`
	FSSnapshot string     `json:"fs_snapshot"`
	OpID       string     `json:"op_id"`
	DurationMS float64    `json:"duration_ms"`
	CodeMS     float64    `json:"code_ms"`
	DatabaseMS float64    `json:"database_ms"`

	Redis         PartResult `json:"redis"`
	RedisRestored bool       `json:"redis_restored"`
	RedisMS       float64    `json:"redis_ms"`
}

// Restore rolls a workspace back to a checkpoint: code first (a
// compare-and-swap rollback commit to the checkpoint's tree; a stale
// expect_oid fails here with nothing restored), then the database. If the
// database part fails, the error says the code part was restored
// (details.parts). The log entry follows the checkpoint (or the failure
// it reports).
func (s *Service) Restore(ctx context.Context, actor *lockstep.Key, wsName, id string, req RestoreRequest) (*RestoreResult, error) {
	start := s.now()
	ctx, span := s.tracer.Start(ctx, "checkpoint.restore", trace.WithAttributes(attribute.String("workspace", wsName), attribute.String("checkpoint", id)))
	defer span.End()
	ws, err := s.repos.Repo(ctx, wsName)
	if err != nil {
		return nil, err
	}
	if err := repositories.CanMoveRefs(actor, ws); err != nil {
		return nil, err
	}
	if req.ExpectOID != "" {
		if err := lockstep.ValidateOID("expect_oid", req.ExpectOID); err != nil {
			return nil, err
		}
	}
	c, err := s.store.Checkpoint(ctx, ws.ID, id)
	if err != nil {
		return nil, err
	}
	follows := c.OpID
	if f := req.Failure; f != nil {
		if f.Evidence != "" {
			if err := lockstep.ValidateOID("failure.evidence", f.Evidence); err != nil {
				return nil, err
			}
		}
		d := map[string]any{"checkpoint": c.ID, "command": f.Command, "exit_code": f.ExitCode,
			"signal": f.Signal, "timed_out": f.TimedOut, "reason": f.Reason}
		for k, v := range map[string]any{"duration_ms": f.DurationMS, "stdout_tail": tail(f.StdoutTail, MaxOutputTail),
			"stderr_tail": tail(f.StderrTail, MaxOutputTail), "evidence": f.Evidence} {
			if v != "" && v != 0.0 {
				d[k] = v
			}
		}
		e := &lockstep.OpEntry{KeyID: actor.ID, KeyName: actor.Name, Op: "run.failed", Result: "failed", Repo: ws.Name, TraceID: traceID(ctx),
			Follows: c.OpID, Details: d}
		if err := s.store.AppendOp(ctx, e); err != nil {
			return nil, err
		}
		follows = e.ID
	}
	res := &RestoreResult{Checkpoint: c.ID, FSSnapshot: c.FSSnapshot, Tree: c.Tree}
	// Under an Idempotency-Key the code part's commit stores this answer
	// (the database part not yet run); the final log entry carries it whole.
	codePart := func(inner any) any {
		if pr, ok := inner.(*repositories.PushResult); ok {
			out := *res
			out.Commit, out.Code = pr.Commit, PartResult{Restored: true}
			out.Database = PartResult{Error: "not run: the server stopped after the code part"}
			out.Redis = out.Database
			return &out
		}
		return inner
	}
	t := s.now()
	_, cspan := s.tracer.Start(ctx, "restore.code")
	// The effects staged after the checkpoint are discarded in the
	// transaction that restores the code (never released by a promote).
	rctx := lockstep.WithEffectDiscard(ctx, lockstep.EffectFilter{RepoID: ws.ID, AfterOp: c.OpID, Reason: "checkpoint " + c.ID + " restored"},
		&lockstep.OpEntry{KeyID: actor.ID, KeyName: actor.Name, Op: "effect.discard", Repo: ws.Name, TraceID: traceID(ctx), Follows: c.OpID,
			Details: map[string]any{"checkpoint": c.ID}})
	pr, err := s.repos.RestoreTree(rctx, actor, ws.Name, c.Branch, c.Commit, req.ExpectOID, follows,
		map[string]any{"checkpoint": c.ID, "db_snapshot": c.DBSnapshot, "fs_snapshot": c.FSSnapshot}, codePart)
	cspan.End()
	res.CodeMS = msSince(s.now(), t)
	if err != nil {
		s.metrics.ObserveOp("checkpoint.restore", lockstep.ErrorCode(err), s.now().Sub(start))
		return nil, err
	}
	res.Commit = pr.Commit
	res.Code = PartResult{Restored: true}
	if !pr.Changed {
		res.Code.Skipped = "the branch already had the checkpoint's tree"
		// No ref moved, so nothing carried the discard: make it alone.
		if d := lockstep.EffectDiscardFrom(rctx); d != nil {
			if _, err := s.store.DiscardEffects(ctx, d.Filter, d.Entry); err != nil {
				return nil, err
			}
		}
	}
	// The data parts: the database, then Redis.
	var dbRestore, redisRestore func(ctx context.Context, workspace, id string) error
	if s.br.DatabaseEnabled() {
		dbRestore = s.br.RestoreDatabase
	}
	if s.br.RedisEnabled() {
		redisRestore = s.br.RestoreRedis
	}
	var dbErr, redisErr error
	res.Database, res.DatabaseMS, dbErr = s.restorePart(ctx, c.ID, ws.Name, "database", c.DBSnapshot, dbRestore, ErrBranchingOff)
	res.DBRestored = res.Database.Restored
	res.Redis, res.RedisMS, redisErr = s.restorePart(ctx, c.ID, ws.Name, "redis", c.RedisSnapshot, redisRestore, ErrRedisOff)
	res.RedisRestored = res.Redis.Restored
	res.DurationMS = msSince(s.now(), start)
	result := "ok"
	if dbErr != nil || redisErr != nil {
		result = "partial"
	}
	e := &lockstep.OpEntry{ID: lockstep.NewOpID(), KeyID: actor.ID, KeyName: actor.Name, Op: "checkpoint.restored", Result: result, Repo: ws.Name, TraceID: traceID(ctx),
		Follows: follows, DurationUS: s.now().Sub(start).Microseconds(),
		Details: map[string]any{"checkpoint": c.ID, "commit": res.Commit, "tree": c.Tree, "code": res.Code, "database": res.Database,
			"fs_snapshot": c.FSSnapshot, "code_ms": res.CodeMS, "database_ms": res.DatabaseMS, "redis": res.Redis, "redis_ms": res.RedisMS},
		Answer: res}
	res.OpID = e.ID
	var rerr error
	if dbErr != nil || redisErr != nil {
		var not []string
		if dbErr != nil {
			not = append(not, "database NOT restored: "+res.Database.Error)
		}
		if redisErr != nil {
			not = append(not, "redis NOT restored: "+res.Redis.Error)
		}
		rerr = lockstep.Errorf(lockstep.EUNAVAILABLE, "checkpoint %s: code restored (commit %s), %s", c.ID, res.Commit, strings.Join(not, "; ")).
			WithDetails(map[string]any{"parts": res})
		e.Answer = rerr
	}
	if err := s.store.AppendOp(ctx, e); err != nil {
		s.log.ErrorContext(ctx, "log restore", "error", err)
	}
	s.metrics.ObserveOp("checkpoint.restore", result, s.now().Sub(start))
	if rerr != nil {
		return nil, rerr
	}
	return res, nil
}

// restorePart restores one data part of a checkpoint (part: "database",
// "redis") and says how it went and how long it took: skipped when the
// checkpoint has no snapshot of it, off() when its branching is off
// (restore nil), else restore under a "restore.<part>" span. The answer
// (and the operations log) get the safe message of an error only; the
// cause (the server's own text) goes to the log.
func (s *Service) restorePart(ctx context.Context, checkpoint, ws, part, snapshot string,
	restore func(ctx context.Context, workspace, id string) error, off func() error) (PartResult, float64, error) {
	if snapshot == "" {
		return PartResult{Skipped: "the checkpoint has no " + part + " snapshot"}, 0, nil
	}
	var err error
	var ms float64
	if restore == nil {
		err = off()
	} else {
		t := s.now()
		_, span := s.tracer.Start(ctx, "restore."+part)
		err = restore(ctx, ws, snapshot)
		span.End()
		ms = msSince(s.now(), t)
	}
	if err != nil {
		if s.log != nil {
			s.log.ErrorContext(ctx, "restore checkpoint "+part, "checkpoint", checkpoint, "repo", ws, "op", lockstep.ErrorOp(err), "error", err)
		}
		return PartResult{Error: lockstep.ErrorMessage(err)}, ms, err
	}
	return PartResult{Restored: true}, ms, nil
}

func msSince(now, t time.Time) float64 { return telemetry.Millis(now.Sub(t)) }

var traceID = telemetry.TraceID
