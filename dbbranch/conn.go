package dbbranch

import (
	"context"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"
)

// connPool is a small pool of admin connections to the maintenance
// database. (pgxpool would need a new module in go.mod; this is enough for
// a handful of long statements.) Every connection is to the maintenance
// database, never to a branch, so CREATE DATABASE … TEMPLATE never finds
// Lockstep itself connected to its source.
type connPool struct {
	cfg  *pgx.ConnConfig
	idle chan *pgx.Conn
	sem  chan struct{}
}

func newConnPool(cfg *pgx.ConnConfig, max int) *connPool {
	return &connPool{cfg: cfg, idle: make(chan *pgx.Conn, max), sem: make(chan struct{}, max)}
}

func (p *connPool) acquire(ctx context.Context) (*pgx.Conn, error) {
	select {
	case p.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	for {
		select {
		case c := <-p.idle:
			if c.IsClosed() {
				continue
			}
			return c, nil
		default:
		}
		break
	}
	c, err := pgx.ConnectConfig(ctx, p.cfg.Copy())
	if err != nil {
		<-p.sem
		return nil, err
	}
	return c, nil
}

// release returns c to the pool; broken is true when the caller could not
// leave the session clean (an advisory lock it failed to release).
func (p *connPool) release(c *pgx.Conn, broken bool) {
	defer func() { <-p.sem }()
	if broken || c.IsClosed() || c.PgConn().IsBusy() || c.PgConn().TxStatus() != 'I' {
		c.Close(context.Background())
		return
	}
	select {
	case p.idle <- c:
	default:
		c.Close(context.Background())
	}
}

func (p *connPool) close() {
	for {
		select {
		case c := <-p.idle:
			c.Close(context.Background())
		default:
			return
		}
	}
}

// lockSpec names one lock: the in-process RWMutex and the Postgres
// advisory lock with the same key. Shared locks are taken by operations
// that only read the repository's template copy (CreateBranch, the
// template spare builder); exclusive ones by everything else.
type lockSpec struct {
	key    int64
	shared bool
}

const (
	tagRepo    = 'R'
	tagWS      = 'W'
	tagBuilder = 'B'
)

func repoLock(hash string, shared bool) lockSpec {
	return lockSpec{key: lockKey(tagRepo, hash), shared: shared}
}
func wsLock(hash string) lockSpec { return lockSpec{key: lockKey(tagWS, hash)} }

type lockTable struct {
	mu sync.Mutex
	m  map[int64]*sync.RWMutex
}

func (t *lockTable) get(k int64) *sync.RWMutex {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[int64]*sync.RWMutex{}
	}
	l, ok := t.m[k]
	if !ok {
		l = &sync.RWMutex{}
		t.m[k] = l
	}
	return l
}

// withLocks takes the locks in order (repository before workspace, always),
// in process and then in Postgres on one admin connection, and runs fn on
// that connection. Advisory locks are session locks: if the process dies,
// Postgres releases them with the session.
func (m *Manager) withLocks(ctx context.Context, locks []lockSpec, fn func(conn *pgx.Conn) error) error {
	var unlocks []func()
	defer func() {
		for i := len(unlocks) - 1; i >= 0; i-- {
			unlocks[i]()
		}
	}()
	for _, l := range locks {
		mu := m.locks.get(l.key)
		if l.shared {
			mu.RLock()
			unlocks = append(unlocks, mu.RUnlock)
		} else {
			mu.Lock()
			unlocks = append(unlocks, mu.Unlock)
		}
	}
	conn, err := m.pool.acquire(ctx)
	if err != nil {
		return unavailable(err)
	}
	broken := false
	defer func() { m.pool.release(conn, broken) }()
	taken := 0
	defer func() {
		if taken > 0 {
			if _, err := conn.Exec(context.Background(), "SELECT pg_advisory_unlock_all()"); err != nil {
				broken = true
			}
		}
	}()
	for _, l := range locks {
		q := "SELECT pg_advisory_lock($1)"
		if l.shared {
			q = "SELECT pg_advisory_lock_shared($1)"
		}
		if _, err := conn.Exec(ctx, q, l.key); err != nil {
			broken = true
			return fmt.Errorf("advisory lock: %w", err)
		}
		taken++
	}
	return fn(conn)
}

// tryLockOn takes an exclusive in-process and advisory lock on conn without
// waiting; ok is false when someone else holds it.
func (m *Manager) tryLockOn(ctx context.Context, conn *pgx.Conn, key int64) (unlock func(), ok bool, err error) {
	mu := m.locks.get(key)
	if !mu.TryLock() {
		return nil, false, nil
	}
	var got bool
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", key).Scan(&got); err != nil {
		mu.Unlock()
		return nil, false, err
	}
	if !got {
		mu.Unlock()
		return nil, false, nil
	}
	return func() {
		conn.Exec(context.Background(), "SELECT pg_advisory_unlock($1)", key)
		mu.Unlock()
	}, true, nil
}

// lockOn takes an exclusive lock on a connection that already holds others
// (DropRepo walking its workspaces).
func (m *Manager) lockOn(ctx context.Context, conn *pgx.Conn, key int64) (unlock func(), err error) {
	mu := m.locks.get(key)
	mu.Lock()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", key); err != nil {
		mu.Unlock()
		return nil, err
	}
	return func() {
		conn.Exec(context.Background(), "SELECT pg_advisory_unlock($1)", key)
		mu.Unlock()
	}, nil
}
