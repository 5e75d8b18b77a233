package dbbranch

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// The template spare pool is sized to demand: the most CreateBranch calls
// for one repository that arrived within the time one spare copy takes
// (the last copy's duration, measured by the refill; defaultCopyTime
// before the first), over the last demandMemory, at least one and at most
// Config.MaxSpares. Forks that come slower than spares are made need one
// spare; a burst of N needs N. A burst therefore teaches the pool its size
// (the first burst after a start or a quiet spell renames the spares that
// are ready and copies the rest), and the refill after it builds that many
// spares in the background. Spares beyond the demand that have sat unused
// for demandMemory are dropped by the next refill (so a quiet repository
// shrinks back to one), and Close drops every spare beyond one per
// repository.
const (
	defaultCopyTime = 250 * time.Millisecond
	refillDelay     = 20 * time.Millisecond // before a template spare refill starts
	demandMemory    = 10 * time.Minute
	maxDemandKept   = 4096 // arrivals remembered per repository
	// DefaultMaxSpares is the default Config.MaxSpares: a burst of ten
	// concurrent forks is served from spares.
	DefaultMaxSpares = 10
)

// spareDemand remembers recent CreateBranch arrivals per repository hash
// and which spares a CreateBranch of this process is renaming.
type spareDemand struct {
	arrivals map[string][]time.Time
	copyTime map[string]time.Duration // how long the last spare copy took
	claimed  map[string]bool          // spare database name → being renamed
}

// noteFork records a CreateBranch of repository hash h.
func (m *Manager) noteFork(h string, now time.Time) {
	m.spareMu.Lock()
	defer m.spareMu.Unlock()
	a := trimBefore(m.spares.arrivals[h], now.Add(-demandMemory))
	if len(a) >= maxDemandKept {
		a = a[len(a)-maxDemandKept+1:]
	}
	m.spares.arrivals[h] = append(a, now)
}

func trimBefore(a []time.Time, t time.Time) []time.Time {
	i := 0
	for i < len(a) && a[i].Before(t) {
		i++
	}
	return a[i:]
}

// spareTarget is how many template spares repository hash h should have.
func (m *Manager) spareTarget(h string, now time.Time) int {
	m.spareMu.Lock()
	a := trimBefore(m.spares.arrivals[h], now.Add(-demandMemory))
	m.spares.arrivals[h] = a
	span, ok := m.spares.copyTime[h]
	if !ok {
		span = defaultCopyTime
	}
	peak, j := 0, 0
	for i := range a { // a is in arrival order: a sliding window
		for a[i].Sub(a[j]) > span {
			j++
		}
		peak = max(peak, i-j+1)
	}
	m.spareMu.Unlock()
	return min(max(peak, 1), m.cfg.MaxSpares)
}

// claim marks spare name as being renamed by this process; false if
// another CreateBranch here already has it.
func (m *Manager) claim(name string) bool {
	m.spareMu.Lock()
	defer m.spareMu.Unlock()
	if m.spares.claimed[name] {
		return false
	}
	m.spares.claimed[name] = true
	return true
}

func (m *Manager) unclaim(name string) {
	m.spareMu.Lock()
	delete(m.spares.claimed, name)
	m.spareMu.Unlock()
}

func (m *Manager) claimed(name string) bool {
	m.spareMu.Lock()
	defer m.spareMu.Unlock()
	return m.spares.claimed[name]
}

// readySpares returns the complete template spares of template copy t
// (same generation), oldest name first.
func readySpares(dbs []*dbInfo, t *dbInfo) []*dbInfo {
	var out []*dbInfo
	if !t.complete() {
		return nil
	}
	for _, d := range dbs {
		if d.Kind == kindTplSpare && d.complete() && d.Meta.Kind == "template-spare" && d.Meta.Gen == t.Meta.Gen {
			out = append(out, d)
		}
	}
	return out
}

// spareName is a new, unique name for a template spare of t: the
// repository's short name after 6 random hex characters (a collision is
// reported by CREATE DATABASE as 42P04 and the builder tries again).
func (m *Manager) spareName(h string, t *dbInfo) string {
	return m.names.name(kindTplSpare, h, newGen()[:6]+"_"+t.Rest)
}

// refillTemplateSpare brings repository hash h's template spares to the
// demand: one copy per call of the locked step, so BindTemplate and
// RefreshTemplate (which take the repository lock exclusively) wait for
// one copy at most.
func (m *Manager) refillTemplateSpare(ctx context.Context, h string) error {
	for {
		more, err := m.refillTemplateSpareStep(ctx, h)
		if err != nil || !more {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
	}
}

// refillTemplateSpareStep drops stale spares (another generation,
// incomplete, or beyond the demand and older than demandMemory) and makes
// at most one new spare copy of the template copy, ready to be renamed
// into a branch. It holds the repository lock shared (so CreateBranch can
// rename a ready spare meanwhile) and a builder lock so only one builder
// per repository runs. more: call again.
func (m *Manager) refillTemplateSpareStep(ctx context.Context, h string) (more bool, err error) {
	err = m.withLocks(ctx, []lockSpec{repoLock(h, true)}, func(conn *pgx.Conn) error {
		unlock, ok, err := m.tryLockOn(ctx, conn, lockKey(tagBuilder, h))
		if err != nil || !ok {
			return err
		}
		defer unlock()
		dbs, err := m.listDBs(ctx, conn, h)
		if err != nil {
			return err
		}
		t := find(dbs, kindTemplate)
		ready := readySpares(dbs, t)
		for _, d := range dbs {
			if d.Kind == kindTplSpare && (!d.complete() || !t.complete() || d.Meta.Gen != t.Meta.Gen) {
				if err := m.dropDB(ctx, conn, d); err != nil {
					return err
				}
			}
		}
		if !t.complete() {
			return nil
		}
		now := time.Now()
		target := m.spareTarget(h, now)
		if len(ready) > target {
			for _, d := range ready[target:] {
				if now.Sub(d.Meta.Created) > demandMemory && !m.claimed(d.Name) {
					if err := m.dropDB(ctx, conn, d); err != nil {
						return err
					}
				}
			}
			return nil
		}
		if len(ready) == target {
			return nil
		}
		name := m.spareName(h, t)
		t0 := time.Now()
		if err := m.createDB(ctx, conn, name, t.Name, false); err != nil {
			if isCode(err, "42P04") {
				more = true
				return nil
			}
			return err
		}
		stmts := append(restrictSQL(name, ""), commentSQL(name, meta{Kind: "template-spare", Repo: t.Meta.Repo, Gen: t.Meta.Gen, Created: time.Now().UTC()}))
		if err := m.run(ctx, conn, stmts...); err != nil {
			return fmt.Errorf("finish template spare %s: %w", name, err)
		}
		m.refills.Add(1)
		m.spareMu.Lock()
		m.spares.copyTime[h] = time.Since(t0)
		m.spareMu.Unlock()
		more = len(ready)+1 < target
		return nil
	})
	return more, err
}

// dropExtraSpares drops every ready template spare beyond one per
// repository (Close): the pool grown for a burst does not outlive the
// process that saw the burst. Errors are ignored: the next start's
// refill trims what is left.
func (m *Manager) dropExtraSpares(ctx context.Context) {
	conn, err := m.pool.acquire(ctx)
	if err != nil {
		return
	}
	broken := false
	defer func() { m.pool.release(conn, broken) }()
	dbs, err := m.listDBs(ctx, conn, "")
	if err != nil {
		broken = true
		return
	}
	byRepo := map[string][]*dbInfo{}
	for _, d := range dbs {
		if d.Kind == kindTplSpare && d.complete() {
			byRepo[d.Hash] = append(byRepo[d.Hash], d)
		}
	}
	for h, sps := range byRepo {
		if len(sps) < 2 {
			continue
		}
		unlock, ok, err := m.tryLockOn(ctx, conn, lockKey(tagBuilder, h))
		if err != nil {
			broken = true
			return
		}
		if !ok {
			continue // another process is building: it owns the pool now
		}
		for _, d := range sps[1:] {
			if !m.claimed(d.Name) {
				if err := m.dropDB(ctx, conn, d); err != nil {
					broken = true
					break
				}
			}
		}
		unlock()
		if broken {
			return
		}
	}
}
