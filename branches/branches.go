// Package branches holds, in one place, the rules of a workspace's data
// branches: its Postgres database branch (lockstep.Brancher) and its
// Redis branch (lockstep.RedisBrancher). A Room follows a workspace's
// life:
//
//   - fork: both branches are created in the background (AfterFork), from
//     the template of the base the workspace descends from (RootOf); the
//     database only when that base has a template, Redis always (empty
//     without a template RDB);
//   - read: GET /database and GET /redis create a missing branch of an
//     active workspace, never one of a finished workspace (Database,
//     Redis);
//   - checkpoint: each existing branch is snapshotted under the
//     checkpoint's id (Snapshot); the snapshots of a checkpoint that was
//     not stored are dropped (DropSnapshots);
//   - restore: each part is restored under the same name, so the agent's
//     DSN and URL stay valid (RestoreDatabase, RestoreRedis);
//   - abandon: both branches are dropped (AfterAbandon);
//   - promote: the base's template copy is refreshed and the promoted
//     workspace's branches, snapshots and spares are dropped in the
//     background (AfterPromote; the gate's callback, wired in cmd);
//   - purge: both are dropped whatever the status and each outcome is
//     recorded (Purge).
//
// Errors of the background steps are logged, never returned: the fork,
// abandon or promote already committed. The workspaces and checkpoints
// services call a Room; neither talks to the seams directly.
package branches

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockstep-hq/lockstep"
)

// Repos reads repository rows (the repositories service).
type Repos interface {
	Repo(ctx context.Context, name string) (*lockstep.Repo, error)
}

// Room applies the branch rules of every workspace.
type Room struct {
	dbs    lockstep.Brancher      // nil: database branching is off
	rds    lockstep.RedisBrancher // nil: Redis branching is off
	repos  Repos
	log    *slog.Logger
	tracer trace.Tracer
	now    func() time.Time

	bgCtx     context.Context // cancelled by Close
	bgCancel  context.CancelFunc
	bg        sync.WaitGroup // branches being created or dropped, template refreshes
	closeOnce sync.Once
}

// New returns a Room; dbs and rds may be nil (that branching is off),
// log and now may be nil.
func New(dbs lockstep.Brancher, rds lockstep.RedisBrancher, repos Repos, log *slog.Logger, now func() time.Time) *Room {
	if log == nil {
		log = slog.Default()
	}
	if now == nil {
		now = time.Now
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Room{dbs: dbs, rds: rds, repos: repos, log: log, tracer: otel.Tracer("lockstep/checkpoints"), now: now,
		bgCtx: ctx, bgCancel: cancel}
}

// SetRedis turns Redis branching on (nil: off). Call before serving.
func (r *Room) SetRedis(rds lockstep.RedisBrancher) { r.rds = rds }

// Databases is the database seam (nil when branching is off), for the
// template routes that pass through to it.
func (r *Room) Databases() lockstep.Brancher { return r.dbs }

// Redises is the Redis seam (nil when Redis branching is off), for
// usage accounting.
func (r *Room) Redises() lockstep.RedisBrancher { return r.rds }

// DropDatabaseSnapshot drops one database snapshot of ws (checkpoint
// retention). Errors: not_configured when branching is off, those of
// lockstep.Brancher (not_found for one already gone).
func (r *Room) DropDatabaseSnapshot(ctx context.Context, ws, snapshot string) error {
	if r.dbs == nil {
		return ErrDatabaseOff()
	}
	return r.dbs.DropSnapshot(ctx, ws, snapshot)
}

// DropRedisSnapshot drops one Redis snapshot of ws, as
// DropDatabaseSnapshot.
func (r *Room) DropRedisSnapshot(ctx context.Context, ws, snapshot string) error {
	if r.rds == nil {
		return ErrRedisOff()
	}
	return r.rds.DropSnapshot(ctx, ws, snapshot)
}

// DatabaseEnabled reports whether database branching is configured.
func (r *Room) DatabaseEnabled() bool { return r.dbs != nil }

// RedisEnabled reports whether Redis branching is configured.
func (r *Room) RedisEnabled() bool { return r.rds != nil }

// Wait waits for the background steps (without cancelling them).
func (r *Room) Wait() { r.bg.Wait() }

// Close cancels the background steps and waits for them; it may be
// called more than once (each service using the Room closes it).
func (r *Room) Close() {
	r.closeOnce.Do(r.bgCancel)
	r.bg.Wait()
}

// background runs f in the background with a context that ends with ctx's
// values but not its cancellation, cancelled by Close.
func (r *Room) background(ctx context.Context, f func(ctx context.Context)) {
	r.bg.Add(1)
	go func() {
		defer r.bg.Done()
		ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		defer cancel()
		stop := context.AfterFunc(r.bgCtx, cancel)
		defer stop()
		f(ctx)
	}()
}

// ErrDatabaseOff is the answer of every database route without a branch
// server: not_configured (501), a final answer clients do not retry.
func ErrDatabaseOff() error {
	return lockstep.Errorf(lockstep.ENOTCONFIGURED, "database branching is off: start lockstep serve with LOCKSTEP_BRANCH_DATABASE_URL (or --branch-database-url) set to a Postgres server where Lockstep may create databases and roles")
}

// ErrRedisOff is the answer of the Redis route without Redis branching.
func ErrRedisOff() error {
	return lockstep.Errorf(lockstep.ENOTCONFIGURED, "redis branching is off: start lockstep serve with LOCKSTEP_BRANCH_REDIS (or --branch-redis) set to on or to a redis-server binary")
}

// RootOf follows fork_of up to the base repository that holds the
// template (a fork of a fork branches from the same template).
func RootOf(ctx context.Context, repos Repos, name string) string {
	for i := 0; i < 16; i++ {
		r, err := repos.Repo(ctx, name)
		if err != nil || r.ForkOf == "" {
			return name
		}
		name = r.ForkOf
	}
	return name
}

// EnsureDatabase returns ws's database branch, creating it from the
// template of base's root when it does not exist (a concurrent create
// returns the branch the other made). Errors: those of lockstep.Brancher.
func (r *Room) EnsureDatabase(ctx context.Context, base, ws string) (*lockstep.DatabaseBranch, error) {
	b, err := r.dbs.Branch(ctx, ws)
	if lockstep.ErrorCode(err) != lockstep.ENOTFOUND {
		return b, err
	}
	b, err = r.dbs.CreateBranch(ctx, RootOf(ctx, r.repos, base), ws)
	if lockstep.ErrorCode(err) == lockstep.ECONFLICT {
		return r.dbs.Branch(ctx, ws) // created concurrently
	}
	return b, err
}

// Database returns a workspace's database branch: created on first use
// while the workspace is active; a finished one's (an abandoned one's was
// dropped) is only shown if it still exists. Errors: not_configured when
// branching is off, not_found, those of lockstep.Brancher.
func (r *Room) Database(ctx context.Context, ws *lockstep.Repo) (*lockstep.DatabaseBranch, error) {
	if r.dbs == nil {
		return nil, ErrDatabaseOff()
	}
	if ws.Movable() {
		return r.EnsureDatabase(ctx, ws.ForkOf, ws.Name)
	}
	b, err := r.dbs.Branch(ctx, ws.Name)
	if lockstep.ErrorCode(err) == lockstep.ENOTFOUND {
		return nil, lockstep.Errorf(lockstep.ENOTFOUND, "workspace %s is %s and has no database branch", ws.Name, ws.Status)
	}
	return b, err
}

// Redis returns a workspace's Redis branch: created on first use (from
// its root's template RDB) while the workspace is active, never
// re-created for a finished one. Errors: not_configured when Redis
// branching is off, not_found, those of lockstep.RedisBrancher.
func (r *Room) Redis(ctx context.Context, ws *lockstep.Repo) (*lockstep.RedisBranch, error) {
	if r.rds == nil {
		return nil, ErrRedisOff()
	}
	if ws.Movable() {
		return r.rds.CreateBranch(ctx, RootOf(ctx, r.repos, ws.ForkOf), ws.Name)
	}
	b, err := r.rds.Branch(ctx, ws.Name)
	if lockstep.ErrorCode(err) == lockstep.ENOTFOUND {
		return nil, lockstep.Errorf(lockstep.ENOTFOUND, "workspace %s is %s and has no redis branch", ws.Name, ws.Status)
	}
	return b, err
}

// AfterFork creates a new workspace's branches in the background: the
// database when base's root has a template, Redis whenever Redis
// branching is on. A workspace abandoned while its Redis instance
// started has it dropped again (the abandon's drop may have run first).
func (r *Room) AfterFork(ctx context.Context, base, ws string) {
	if r.dbs != nil {
		r.background(ctx, func(ctx context.Context) {
			if _, err := r.dbs.Template(ctx, RootOf(ctx, r.repos, base)); err != nil {
				return
			}
			if _, err := r.EnsureDatabase(ctx, base, ws); err != nil {
				r.log.WarnContext(ctx, "create database branch", "workspace", ws, "error", err)
			}
		})
	}
	if r.rds != nil {
		r.background(ctx, func(ctx context.Context) {
			if _, err := r.rds.CreateBranch(ctx, RootOf(ctx, r.repos, base), ws); err != nil {
				r.log.WarnContext(ctx, "create redis branch", "workspace", ws, "error", err)
				return
			}
			// Drops are serialized with the create by the manager.
			if w, err := r.repos.Repo(ctx, ws); err == nil && w.Status == lockstep.StatusAbandoned {
				r.dropRedis(ctx, ws)
			}
		})
	}
}

// AfterAbandon drops an abandoned workspace's branches (a missing one is
// no error; a failed drop is logged).
func (r *Room) AfterAbandon(ctx context.Context, ws string) {
	r.dropDatabase(ctx, ws)
	r.dropRedis(ctx, ws)
}

func (r *Room) dropDatabase(ctx context.Context, ws string) {
	if r.dbs == nil {
		return
	}
	if err := r.dbs.DropBranch(context.WithoutCancel(ctx), ws); err != nil && lockstep.ErrorCode(err) != lockstep.ENOTFOUND {
		r.log.WarnContext(ctx, "drop database branch", "workspace", ws, "error", err)
	}
}

func (r *Room) dropRedis(ctx context.Context, ws string) {
	if r.rds == nil {
		return
	}
	if err := r.rds.DropBranch(context.WithoutCancel(ctx), ws); err != nil && lockstep.ErrorCode(err) != lockstep.ENOTFOUND {
		r.log.WarnContext(ctx, "drop redis branch", "workspace", ws, "error", err)
	}
}

// AfterPromote follows a promote that landed ws on base, in the
// background: the base's template copy is refreshed (when it has one),
// and the promoted workspace's database branch (with its snapshots and
// warm spare) and Redis branch are dropped: a promoted workspace takes
// no more writes and its checkpoints can no longer be restored, so they
// only held databases on the branch server (issue 27: six workspaces
// left twenty databases behind). The gate calls it (cmd wires it).
func (r *Room) AfterPromote(ctx context.Context, base, ws string) {
	r.RefreshAfterPromote(ctx, base)
	r.DropAfterPromote(ctx, ws)
}

// RefreshAfterPromote is AfterPromote's template refresh alone.
func (r *Room) RefreshAfterPromote(ctx context.Context, base string) {
	if r.dbs == nil {
		return
	}
	r.background(ctx, func(ctx context.Context) {
		if _, err := r.dbs.Template(ctx, base); err != nil {
			return
		}
		if err := r.dbs.RefreshTemplate(ctx, base); err != nil {
			r.log.WarnContext(ctx, "refresh template on promote", "repo", base, "error", err)
		}
	})
}

// DropAfterPromote is AfterPromote's drops alone.
func (r *Room) DropAfterPromote(ctx context.Context, ws string) {
	if r.dbs == nil && r.rds == nil {
		return
	}
	r.background(ctx, func(ctx context.Context) { r.AfterAbandon(ctx, ws) })
}

// Purge drops a workspace's branches whatever its status and returns
// what happened to each, for the purge's log entry: details
// "database_branch" and "redis_branch" are "dropped", "none", "off" when
// that branching is not configured, or "error: …" (logged; the purge
// goes on: the refs must not outlive the request because a branch server
// is down).
func (r *Room) Purge(ctx context.Context, ws string, details map[string]any) {
	if r.dbs == nil {
		details["database_branch"] = "off"
	} else {
		details["database_branch"] = dropOutcome(r.dbs.DropBranch(context.WithoutCancel(ctx), ws))
	}
	if r.rds == nil {
		details["redis_branch"] = "off"
	} else {
		details["redis_branch"] = dropOutcome(r.rds.DropBranch(context.WithoutCancel(ctx), ws))
	}
	for _, k := range []string{"database_branch", "redis_branch"} {
		if v := details[k].(string); strings.HasPrefix(v, "error") {
			r.log.WarnContext(ctx, "purge: drop "+k, "workspace", ws, "error", v)
		}
	}
}

// dropOutcome names the result of a branch drop for the purge entry.
func dropOutcome(err error) string {
	switch {
	case err == nil:
		return "dropped"
	case lockstep.ErrorCode(err) == lockstep.ENOTFOUND:
		return "none"
	default:
		return "error: " + err.Error()
	}
}

// Snapshots says what a checkpoint's Snapshot took: the snapshot ids
// ("" when the workspace has no such branch or its branching is off) and
// how long each took.
type Snapshots struct {
	Database, Redis     string
	DatabaseMS, RedisMS float64
}

// Snapshot snapshots each branch that ws has under id (a base repository
// has none). On an error nothing is left behind: a snapshot already
// taken is dropped.
func (r *Room) Snapshot(ctx context.Context, ws *lockstep.Repo, id string) (Snapshots, error) {
	var out Snapshots
	if ws.ForkOf == "" {
		return out, nil
	}
	if r.dbs != nil {
		if _, err := r.dbs.Branch(ctx, ws.Name); err == nil {
			t := r.now()
			_, span := r.tracer.Start(ctx, "dbbranch.snapshot")
			err := r.dbs.Snapshot(ctx, ws.Name, id)
			span.End()
			if err != nil {
				return out, fmt.Errorf("database snapshot: %w", err)
			}
			out.Database, out.DatabaseMS = id, millis(r.now().Sub(t))
		} else if lockstep.ErrorCode(err) != lockstep.ENOTFOUND {
			return out, err
		}
	}
	if r.rds != nil {
		if _, err := r.rds.Branch(ctx, ws.Name); err == nil {
			t := r.now()
			_, span := r.tracer.Start(ctx, "redisbranch.snapshot")
			err := r.rds.Snapshot(ctx, ws.Name, id)
			span.End()
			if err != nil {
				r.DropSnapshots(ctx, ws.Name, out.Database, "")
				return Snapshots{}, fmt.Errorf("redis snapshot: %w", err)
			}
			out.Redis, out.RedisMS = id, millis(r.now().Sub(t))
		} else if lockstep.ErrorCode(err) != lockstep.ENOTFOUND {
			r.DropSnapshots(ctx, ws.Name, out.Database, "")
			return Snapshots{}, err
		}
	}
	return out, nil
}

// DropSnapshots drops the snapshots of a checkpoint that was not stored
// (compensation: they would be orphans); "" skips a part.
func (r *Room) DropSnapshots(ctx context.Context, ws, dbSnapshot, redisSnapshot string) {
	if dbSnapshot != "" {
		if err := r.dbs.DropSnapshot(context.WithoutCancel(ctx), ws, dbSnapshot); err != nil {
			r.log.ErrorContext(ctx, "drop orphan snapshot", "workspace", ws, "snapshot", dbSnapshot, "error", err)
		}
	}
	if redisSnapshot != "" {
		if err := r.rds.DropSnapshot(context.WithoutCancel(ctx), ws, redisSnapshot); err != nil {
			r.log.ErrorContext(ctx, "drop orphan redis snapshot", "workspace", ws, "snapshot", redisSnapshot, "error", err)
		}
	}
}

// RestoreDatabase restores ws's database branch to a snapshot under the
// same name. Errors: not_configured when branching is off, those of
// lockstep.Brancher.
func (r *Room) RestoreDatabase(ctx context.Context, ws, snapshot string) error {
	if r.dbs == nil {
		return ErrDatabaseOff()
	}
	return r.dbs.Restore(ctx, ws, snapshot)
}

// RestoreRedis restores ws's Redis branch to a snapshot on the same URL.
// Errors: not_configured when Redis branching is off, those of
// lockstep.RedisBrancher.
func (r *Room) RestoreRedis(ctx context.Context, ws, snapshot string) error {
	if r.rds == nil {
		return ErrRedisOff()
	}
	return r.rds.Restore(ctx, ws, snapshot)
}

func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 } // as telemetry.Millis
