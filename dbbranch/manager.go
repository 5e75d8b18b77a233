package dbbranch

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockstep-hq/lockstep"
)

// Config configures a Manager. Zero values take the defaults below.
type Config struct {
	// AdminURL (LOCKSTEP_BRANCH_DATABASE_URL) connects to a maintenance
	// database as a superuser, or a role with CREATEDB and CREATEROLE.
	AdminURL string
	// Prefix starts every database and role name; [a-z][a-z0-9]{0,5},
	// default "ls". Two services sharing a server need different prefixes
	// (lockstep serve derives one per service from the branch secret).
	Prefix string
	// Secret derives the workspace roles' passwords (HMAC-SHA256); required.
	Secret []byte
	// MaxSnapshots is kept per workspace (default 20); the oldest beyond it
	// are dropped in the background right after Snapshot.
	MaxSnapshots int
	// Warm keeps spare copies (of each template copy, sized to demand up
	// to MaxSpares, and one of each workspace's latest snapshot) so
	// CreateBranch and Restore of the latest snapshot are a rename.
	Warm bool
	// MaxSpares bounds the warm spares kept per template copy (default
	// DefaultMaxSpares). The pool holds as many as the most CreateBranch
	// calls seen within the time one copy takes over the last ten
	// minutes, at least one (see spares.go); each is a full copy of the
	// template.
	MaxSpares int
	// StrategyThresholdBytes: sources smaller than this are copied with
	// STRATEGY WAL_LOG, larger ones with FILE_COPY. Default 256 MiB.
	StrategyThresholdBytes int64
	// MaxConns bounds the admin connections (default MaxSpares+2, at
	// least 8).
	MaxConns int
}

// DefaultStrategyThreshold is the default Config.StrategyThresholdBytes.
// Measured on PostgreSQL 15 here (2 vCPUs, shared and noisy): for the
// 10-table, 7.5 MB template WAL_LOG took ~90-100 ms and FILE_COPY ~190-460
// ms (it forces two checkpoints, whose cost depends on the whole cluster);
// at 67 MB and 232 MB (pgbench) the two were within noise of each other;
// the shared notes have FILE_COPY ahead at 456 MB (732 vs 841 ms). Below
// 256 MiB WAL_LOG is never worse and spares the cluster the checkpoints.
const DefaultStrategyThreshold = 256 << 20

// Manager branches databases. It is safe for concurrent use, also by
// several processes against one server (advisory locks).
type Manager struct {
	cfg      Config
	connCfg  *pgx.ConnConfig
	names    namer
	pool     *connPool
	locks    lockTable
	dsnHost  string
	dsnQuery string

	bgCtx    context.Context
	bgCancel context.CancelFunc
	bgMu     sync.Mutex
	bgJobs   map[string]bool // key → rerun requested
	bgSem    chan struct{}   // at most two copies made in the background at a time
	bgClosed bool
	wg       sync.WaitGroup

	spareMu sync.Mutex
	spares  spareDemand

	warmBranches, coldBranches, warmRestores, coldRestores atomic.Int64
	refills, refillErrors                                  atomic.Int64
	lastErrMu                                              sync.Mutex
	lastErr                                                string
}

// New connects, checks the admin role's rights, repairs what a crash may
// have left half-done (skipping anything another process holds locked) and,
// with Warm, starts refilling spares in the background.
//
// Errors: invalid_argument for a bad Config; unavailable if the server
// cannot be reached or the role lacks CREATEDB/CREATEROLE.
func New(ctx context.Context, cfg Config) (*Manager, error) {
	if cfg.Prefix == "" {
		cfg.Prefix = "ls"
	}
	if !prefixRE.MatchString(cfg.Prefix) {
		return nil, lockstep.Errorf(lockstep.EINVALID, "invalid prefix %q: want [a-z][a-z0-9]{0,5}", cfg.Prefix)
	}
	if len(cfg.Secret) == 0 {
		return nil, lockstep.Errorf(lockstep.EINVALID, "dbbranch: a secret is required to derive role passwords")
	}
	if cfg.MaxSnapshots <= 0 {
		cfg.MaxSnapshots = 20
	}
	if cfg.StrategyThresholdBytes <= 0 {
		cfg.StrategyThresholdBytes = DefaultStrategyThreshold
	}
	if cfg.MaxSpares <= 0 {
		cfg.MaxSpares = DefaultMaxSpares
	}
	if cfg.MaxConns <= 0 {
		// A burst of MaxSpares forks renames that many spares at once,
		// each on its own connection, beside two background copies.
		cfg.MaxConns = max(8, cfg.MaxSpares+2)
	}
	if cfg.AdminURL == "" {
		return nil, lockstep.Errorf(lockstep.EUNAVAILABLE, "database branching is not configured (no admin URL)")
	}
	cc, err := pgx.ParseConfig(cfg.AdminURL)
	if err != nil {
		return nil, lockstep.Errorf(lockstep.EINVALID, "parse branch database URL: %v", err)
	}
	m := &Manager{cfg: cfg, connCfg: cc, names: namer{cfg.Prefix}, bgJobs: map[string]bool{}, bgSem: make(chan struct{}, 2),
		spares: spareDemand{arrivals: map[string][]time.Time{}, copyTime: map[string]time.Duration{}, claimed: map[string]bool{}}}
	m.pool = newConnPool(cc, cfg.MaxConns)
	m.dsnHost = net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port)))
	if u, err := url.Parse(cfg.AdminURL); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		if v := u.Query().Get("sslmode"); v != "" {
			m.dsnQuery = "sslmode=" + url.QueryEscape(v)
		}
	}
	m.bgCtx, m.bgCancel = context.WithCancel(context.Background())

	conn, err := m.pool.acquire(ctx)
	if err != nil {
		m.pool.close()
		return nil, lockstep.E("dbbranch.New", lockstep.EUNAVAILABLE, fmt.Sprintf("cannot connect to the branch database server %s", m.dsnHost), err)
	}
	var super, createdb, createrole bool
	err = conn.QueryRow(ctx, "SELECT rolsuper, rolcreatedb, rolcreaterole FROM pg_roles WHERE rolname = current_user").Scan(&super, &createdb, &createrole)
	m.pool.release(conn, err != nil)
	if err != nil {
		m.pool.close()
		return nil, lockstep.E("dbbranch.New", lockstep.EUNAVAILABLE, "cannot read the admin role of the branch database server", err)
	}
	if !super && !(createdb && createrole) {
		m.pool.close()
		return nil, lockstep.Errorf(lockstep.EUNAVAILABLE, "branch database role %q needs SUPERUSER or CREATEDB and CREATEROLE", cc.User)
	}
	if err := m.sweep(ctx); err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

// Close stops background work, waits for it, drops the template spares
// beyond one per repository (a pool grown for a burst), and closes the
// connections. An interrupted copy is dropped by the next repair.
func (m *Manager) Close() {
	m.bgMu.Lock()
	again := m.bgClosed
	m.bgClosed = true
	m.bgMu.Unlock()
	if again {
		return
	}
	m.bgCancel()
	m.wg.Wait()
	if m.cfg.Warm {
		m.dropExtraSpares(context.Background())
	}
	m.pool.close()
}

// Stats counts which path operations took since New.
type Stats struct {
	WarmBranches    int64 // CreateBranch by renaming the template spare
	ColdBranches    int64 // CreateBranch by CREATE DATABASE … TEMPLATE
	WarmRestores    int64 // Restore by renaming the snapshot spare
	ColdRestores    int64 // Restore by CREATE DATABASE … TEMPLATE
	Refills         int64 // spare copies made in the background
	RefillErrors    int64
	LastRefillError string
}

// Stats returns the counters.
func (m *Manager) Stats() Stats {
	m.lastErrMu.Lock()
	defer m.lastErrMu.Unlock()
	return Stats{
		WarmBranches: m.warmBranches.Load(), ColdBranches: m.coldBranches.Load(),
		WarmRestores: m.warmRestores.Load(), ColdRestores: m.coldRestores.Load(),
		Refills: m.refills.Load(), RefillErrors: m.refillErrors.Load(), LastRefillError: m.lastErr,
	}
}

// SpareUsage is what the warm pool costs.
type SpareUsage struct {
	Count int
	Bytes int64 // sum of pg_database_size
}

// Spares reports the spare copies of this prefix and their disk use.
func (m *Manager) Spares(ctx context.Context) (SpareUsage, error) {
	var u SpareUsage
	err := m.withLocks(ctx, nil, func(conn *pgx.Conn) error {
		dbs, err := m.listDBs(ctx, conn, "")
		if err != nil {
			return err
		}
		for _, d := range dbs {
			if d.Kind == kindTplSpare || d.Kind == kindRestSpare {
				n, err := m.dbSize(ctx, conn, d.Name)
				if err != nil {
					continue // dropped meanwhile
				}
				u.Count++
				u.Bytes += n
			}
		}
		return nil
	})
	return u, err
}

// WaitIdle waits until no background refill is running or queued.
func (m *Manager) WaitIdle(ctx context.Context) error {
	for {
		m.bgMu.Lock()
		n := len(m.bgJobs)
		m.bgMu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// schedule runs fn in the background, once per key at a time; a request
// while it runs makes it run once more afterwards. fn re-derives what to do
// from the catalog, so extra runs are harmless.
func (m *Manager) schedule(key string, fn func(ctx context.Context) error) {
	m.bgMu.Lock()
	defer m.bgMu.Unlock()
	if m.bgClosed {
		return
	}
	if _, running := m.bgJobs[key]; running {
		m.bgJobs[key] = true
		return
	}
	m.bgJobs[key] = false
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		for {
			select {
			case m.bgSem <- struct{}{}:
			case <-m.bgCtx.Done():
				m.bgMu.Lock()
				delete(m.bgJobs, key)
				m.bgMu.Unlock()
				return
			}
			err := fn(m.bgCtx)
			<-m.bgSem
			if err != nil && m.bgCtx.Err() == nil {
				m.refillErrors.Add(1)
				m.lastErrMu.Lock()
				m.lastErr = fmt.Sprintf("%s: %v", key, err)
				m.lastErrMu.Unlock()
			}
			m.bgMu.Lock()
			if m.bgJobs[key] && m.bgCtx.Err() == nil {
				m.bgJobs[key] = false
				m.bgMu.Unlock()
				continue
			}
			delete(m.bgJobs, key)
			m.bgMu.Unlock()
			return
		}
	}()
}

// sweep repairs every repository and workspace of this prefix that no
// other session holds locked, and queues spare refills.
func (m *Manager) sweep(ctx context.Context) error {
	conn, err := m.pool.acquire(ctx)
	if err != nil {
		return unavailable(err)
	}
	broken := false
	defer func() { m.pool.release(conn, broken) }()
	dbs, err := m.listDBs(ctx, conn, "")
	if err != nil {
		broken = true
		return err
	}
	repos, wss := map[string]bool{}, map[string]bool{}
	for _, d := range dbs {
		switch d.Kind {
		case kindTemplate, kindStaging, kindTplSpare:
			repos[d.Hash] = true
		case kindBranch, kindSnapshot, kindRestSpare, kindTrash:
			wss[d.Hash] = true
		}
	}
	for h := range repos {
		unlock, ok, err := m.tryLockOn(ctx, conn, lockKey(tagRepo, h))
		if err != nil {
			broken = true
			return err
		}
		if !ok {
			continue
		}
		_, err = m.repairRepo(ctx, conn, h)
		unlock()
		if err != nil {
			return err
		}
		m.scheduleTemplateSpare(h)
	}
	for h := range wss {
		unlock, ok, err := m.tryLockOn(ctx, conn, lockKey(tagWS, h))
		if err != nil {
			broken = true
			return err
		}
		if !ok {
			continue
		}
		_, err = m.repairWorkspace(ctx, conn, h, true)
		unlock()
		if err != nil {
			return err
		}
		m.scheduleWorkspace(h)
	}
	return nil
}

func (m *Manager) dsn(role, password, db string) string {
	u := url.URL{Scheme: "postgres", User: url.UserPassword(role, password), Host: m.dsnHost, Path: "/" + db, RawQuery: m.dsnQuery}
	return u.String()
}
