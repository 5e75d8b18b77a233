// Package replica is the object-storage mode of a fork network (issue
// #11): the truth about a network's objects is its packs in a
// bucket (bucket.Bucket: S3 by package s3packs, a directory by package
// filebucket) plus its list of live packs and
// its generation in the metadata database (lockstep.PackStore); each
// replica holds a cache — a bare repository per network (gitstore.Network)
// with the packs it downloaded — that it brings up to date before serving
// the network. The cache can be wiped at any time: it is rebuilt on
// demand.
//
// The rules (docs/replicas.md):
//
//   - a write builds its pack in the cache, uploads it, then registers it
//     (one transaction that also bumps the generation) before the write
//     returns, so before any ref can name its objects;
//   - before serving a network, a replica compares its generation with
//     the database's (one indexed read) and, when behind, downloads the
//     live packs it lacks and drops the retired ones;
//   - compaction folds the live packs into one, uploads it and, in one
//     transaction, registers it and retires the packs it replaces; two
//     compactions racing cannot both win (the second finds its packs
//     retired and discards its result);
//   - GC deletes from the bucket only packs that are retired or were never
//     registered, and only once they are older than the grace period; a
//     write whose upload took longer than half of it fails instead of
//     registering.
//
// Package replica is an adapter (like sqlstore and s3packs): the domain
// reaches it through gitobj.Store (repositories.ObjectStore), opened by
// Manager, a gitobj.Opener.
package replica

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/bucket"
	"github.com/lockstep-hq/lockstep/gitobj"
	"github.com/lockstep-hq/lockstep/gitstore"
)

// DefaultInlineMax is serve's default Config.InlineMax: 64 KiB of pack
// plus index (a one-object commit pack is about 1.2 KiB).
const DefaultInlineMax = 64 << 10

// DefaultGrace is the default grace period (Config.Grace).
const DefaultGrace = time.Hour

// Notifier tells the other replicas at once that a network changed (Redis
// pub/sub). It is a hint only: the generation check is the rule, so a
// lost message costs nothing but the pack download moving from the
// background to the next request.
type Notifier interface {
	// Publish announces that network reached generation gen.
	Publish(ctx context.Context, network string, gen int64) error
	// Subscribe calls fn for every announcement until ctx ends.
	Subscribe(ctx context.Context, fn func(network string, gen int64)) error
}

// Config configures a Manager.
type Config struct {
	// Objects is the bucket (any backend of the bucket registry:
	// s3packs, filebucket).
	Objects bucket.Bucket
	// Packs is the metadata database's pack list and generations.
	Packs lockstep.PackStore
	// Notify is optional (nil: every replica finds changes by the
	// generation check alone).
	Notify Notifier
	// Grace: a retired or unregistered pack is deleted from the bucket
	// only once older than this; a write whose upload took longer than
	// half of it fails. Must exceed the longest upload plus its
	// transaction. Default DefaultGrace.
	Grace time.Duration
	// GCInterval is how often GC runs in the background (one replica at a
	// time, by lease); 0 = never (call GC).
	GCInterval time.Duration
	// Holder names this replica in leases (default host-pid).
	Holder string
	// Log receives what goes wrong in the background.
	Log *slog.Logger
	// InlineMax: a pack whose bytes plus its index's are at most this
	// many is kept in the metadata database with its record instead of
	// the bucket (when Packs is a lockstep.InlinePackStore): a write of a
	// few objects (a rollback's commit) costs one transaction, not two
	// PUTs and a transaction. 0 = every pack goes to the bucket.
	// serve's default is DefaultInlineMax.
	InlineMax int64
	// Now is GC's clock (tests; nil = time.Now).
	Now func() time.Time
}

// Manager opens networks in object-storage mode (a gitobj.Opener:
// repositories.Config.Objects; a gitobj.Shared, as several replicas
// share its networks) and runs GC and the notification subscriber.
type Manager struct {
	cfg Config

	mu   sync.Mutex
	nets map[string]*Network

	leaseMu sync.Mutex
	leases  map[string]bool // held by this process (holdLease)

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New returns a Manager and starts its background work (Close stops it).
func New(cfg Config) *Manager {
	if cfg.Grace <= 0 {
		cfg.Grace = DefaultGrace
	}
	if cfg.Holder == "" {
		host, _ := os.Hostname()
		cfg.Holder = fmt.Sprintf("%s-%d-%d", host, os.Getpid(), time.Now().UnixNano()%1e6)
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &Manager{cfg: cfg, nets: map[string]*Network{}, ctx: ctx, cancel: cancel}
	if cfg.Notify != nil {
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			for ctx.Err() == nil {
				err := cfg.Notify.Subscribe(ctx, m.notified)
				if ctx.Err() != nil {
					return
				}
				cfg.Log.Warn("object store: change notifications lost; relying on generation checks", "error", err)
				sleep(ctx, 2*time.Second)
			}
		}()
	}
	if cfg.GCInterval > 0 {
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			t := time.NewTicker(cfg.GCInterval)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					if st, err := m.GC(ctx); err != nil {
						cfg.Log.Error("object store gc", "error", err)
					} else if st.Deleted > 0 || st.Records > 0 {
						cfg.Log.Info("object store gc", "networks", st.Networks, "deleted_packs", st.Deleted, "deleted_records", st.Records)
					}
				}
			}
		}()
	}
	return m
}

// Close stops the background work. Networks are closed by their owner
// (repositories.Service.Close).
func (m *Manager) Close() {
	m.cancel()
	m.wg.Wait()
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// notified prefetches a network another replica changed, so the next
// request finds its packs local.
func (m *Manager) notified(network string, gen int64) {
	m.mu.Lock()
	n := m.nets[network]
	m.mu.Unlock()
	if n == nil || n.generation() >= gen {
		return
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		ctx, cancel := context.WithTimeout(m.ctx, 5*time.Minute)
		defer cancel()
		if err := n.Refresh(ctx); err != nil && m.ctx.Err() == nil {
			m.cfg.Log.Warn("object store: prefetch after notification", "network", network, "error", err)
		}
	}()
}

// Open opens the cache of the network whose bare repository is dir
// (networks/<name>.git) in object-storage mode (gitobj.Opener). Local packs the database does not list as live are
// adopted (uploaded and registered: a crash after an upload, or a data
// directory that was in local mode) or, when retired, removed; then the
// cache catches up with the database.
func (m *Manager) Open(dir string, oo gitobj.OpenOptions) (gitobj.Store, error) {
	name := strings.TrimSuffix(filepath.Base(dir), ".git")
	n := &Network{m: m, name: name, gen: -1}
	opts := gitstore.Options{Fsync: oo.Fsync, TempGrace: oo.TempGrace, OnPack: n.onPack, OnMiss: n.onMiss}
	rn, err := gitstore.Open(dir, opts)
	if err != nil {
		return nil, err
	}
	n.Network = rn
	ctx, cancel := context.WithTimeout(m.ctx, 10*time.Minute)
	defer cancel()
	if err := n.adopt(ctx); err != nil {
		rn.Close()
		return nil, err
	}
	if err := n.Refresh(ctx); err != nil {
		// Serve what the cache has; the next request tries again.
		m.cfg.Log.Warn("object store: network cache not brought up to date", "network", name, "error", err)
	}
	m.mu.Lock()
	m.nets[name] = n
	m.mu.Unlock()
	return n, nil
}

// SharesNetworks reports true: several replicas share the networks
// (gitobj.Shared).
func (m *Manager) SharesNetworks() bool { return true }

// SweepTemps removes the temp files a crash left in the cache dir of a
// network (gitobj.TempSweeper): the cache is a local bare repository.
func (m *Manager) SweepTemps(dir string, grace time.Duration, now time.Time) gitobj.TempSweep {
	return gitstore.RemoveStaleTemps(dir, grace, now)
}

var (
	_ gitobj.Shared      = (*Manager)(nil)
	_ gitobj.TempSweeper = (*Manager)(nil)
	_ gitobj.Store       = (*Network)(nil)
	_ gitobj.Refresher   = (*Network)(nil)
)

// unavailable wraps an object-store failure of op as a 503. The message
// names the operation only: the cause (which may name the endpoint's host
// and port) is kept for the log.
func unavailable(op string, err error) error {
	if lockstep.ErrorCode(err) == lockstep.EUNAVAILABLE {
		return err
	}
	var le *lockstep.Error
	if errors.As(err, &le) {
		return err
	}
	return lockstep.E(op, lockstep.EUNAVAILABLE, "object store: "+op+" failed; retry later", err)
}
