package dbbranch

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// These tests run on a throwaway cluster (mustCluster): they restore a
// branch while agents hammer it, kill the server's backends and restart
// the server, none of which should happen to the machine's own server.

// agentLoad is a few agents working on one branch through its DSN: each
// iteration opens a new connection, runs a transaction (inserts, and an
// update or a delete), keeps it open a moment and commits. Restores and
// snapshots terminate them; they reconnect.
//
// Commits are controlled so that a branch's content is known exactly when
// the test checks it: a commit happens only under gate (shared; pause
// takes it exclusively and waits for commits in flight) and only on a
// connection to the database whose OID is writeOID. A Restore gives the
// branch name a new database (a new OID), so the agents' transactions on
// the restored branch are rolled back until the test has checked its
// content and calls resume with the new OID. Paused agents keep
// connecting, writing and rolling back: the sessions Snapshot and Restore
// must end are there either way.
type agentLoad struct {
	cc       *pgx.ConnConfig
	gate     sync.RWMutex
	writeOID atomic.Uint32

	commits, heldBack, interrupted atomic.Int64

	mu         sync.Mutex
	codes      map[string]int // expected errors by SQLSTATE ("net" for the rest)
	unexpected []string

	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

func startLoad(tb testing.TB, dsn string, oid uint32, workers int) *agentLoad {
	tb.Helper()
	cc, err := pgx.ParseConfig(dsn)
	if err != nil {
		tb.Fatal(err)
	}
	cc.ConnectTimeout = 3 * time.Second
	l := &agentLoad{cc: cc, codes: map[string]int{}}
	l.writeOID.Store(oid)
	ctx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	for w := range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for ctx.Err() == nil {
				l.iteration(ctx, w)
			}
		}()
	}
	tb.Cleanup(l.stop)
	return l
}

func (l *agentLoad) iteration(ctx context.Context, worker int) {
	conn, err := pgx.ConnectConfig(ctx, l.cc.Copy())
	if err != nil {
		l.note(ctx, err)
		time.Sleep(time.Duration(1+rand.IntN(4)) * time.Millisecond)
		return
	}
	defer conn.Close(context.Background())
	var oid uint32
	if err := conn.QueryRow(ctx, "SELECT oid FROM pg_database WHERE datname = current_database()").Scan(&oid); err != nil {
		l.note(ctx, err)
		return
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		l.note(ctx, err)
		return
	}
	defer tx.Rollback(context.Background())
	acct := 1 + rand.IntN(50)
	stmts := [][]any{
		{"INSERT INTO log (worker, body) VALUES ($1, $2)", worker, fmt.Sprintf("w%d %x", worker, rand.Uint64())},
		{"INSERT INTO events (account, kind, n) VALUES ($1, 'load', $2)", acct, rand.IntN(1000)},
	}
	// One row lock per transaction (no deadlocks between agents).
	switch rand.IntN(3) {
	case 0:
		stmts = append(stmts, []any{"UPDATE accounts SET balance = balance + $2 WHERE id = $1", acct, 1 + rand.IntN(9)})
	case 1:
		stmts = append(stmts, []any{"UPDATE kv SET v = v + 1 WHERE k = $1", fmt.Sprintf("k%d", 1+rand.IntN(20))})
	case 2:
		stmts = append(stmts, []any{"DELETE FROM events WHERE id = (SELECT min(id) FROM events WHERE kind = 'load')"})
	}
	for _, s := range stmts {
		if _, err := tx.Exec(ctx, s[0].(string), s[1:]...); err != nil {
			l.note(ctx, err)
			return
		}
	}
	time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond) // open, uncommitted
	if !l.gate.TryRLock() {
		l.heldBack.Add(1)
		return
	}
	defer l.gate.RUnlock()
	if oid != l.writeOID.Load() {
		l.heldBack.Add(1)
		return
	}
	if err := tx.Commit(ctx); err != nil {
		l.note(ctx, err)
		return
	}
	l.commits.Add(1)
}

func (l *agentLoad) note(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return
	}
	l.interrupted.Add(1)
	code := "net"
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		code = pe.Code
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if loadErrorExpected(err) {
		l.codes[code]++
	} else if len(l.unexpected) < 20 {
		l.unexpected = append(l.unexpected, err.Error())
	}
}

// pause stops commits (waiting for those in flight); resume lets them go
// on, on connections to database oid.
func (l *agentLoad) pause()            { l.gate.Lock() }
func (l *agentLoad) resume(oid uint32) { l.writeOID.Store(oid); l.gate.Unlock() }

func (l *agentLoad) stop() {
	l.once.Do(func() {
		l.cancel()
		l.wg.Wait()
	})
}

// report stops the load and fails the test on errors an agent should
// never see (anything but terminated sessions and refused connections).
func (l *agentLoad) report(tb testing.TB) {
	tb.Helper()
	l.stop()
	l.mu.Lock()
	defer l.mu.Unlock()
	tb.Logf("load: %d commits, %d transactions rolled back while paused or on a replaced branch, %d interrupted (%v)",
		l.commits.Load(), l.heldBack.Load(), l.interrupted.Load(), l.codes)
	if len(l.unexpected) > 0 {
		tb.Errorf("agents saw unexpected errors:\n%s", strings.Join(l.unexpected, "\n"))
	}
	if l.commits.Load() == 0 {
		tb.Error("the load never committed anything")
	}
}

const clusterSecret = "cluster test secret"

func newClusterManager(tb testing.TB, c *pgCluster, prefix string, cfg Config) *Manager {
	tb.Helper()
	cfg.AdminURL = c.URL("postgres", "lockstep-manager")
	cfg.Prefix = prefix
	cfg.Secret = []byte(clusterSecret)
	var m *Manager
	var err error
	for try := 0; try < 20; try++ { // right after a crash restart, recovery may still be finishing
		if m, err = New(context.Background(), cfg); err == nil {
			return m
		}
		time.Sleep(100 * time.Millisecond)
	}
	tb.Fatalf("New on the throwaway cluster: %v", err)
	return nil
}

func mustState(tb testing.TB, c *pgCluster, db string) dbState {
	tb.Helper()
	s, err := stateOf(context.Background(), c, db)
	if err != nil {
		tb.Fatalf("state of %s: %v", db, err)
	}
	return s
}

func mustContent(tb testing.TB, dsn string) content {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ct, err := dsnContent(ctx, dsn)
	if err != nil {
		tb.Fatalf("content of the branch: %v", err)
	}
	return ct
}

type durations []time.Duration

func (d durations) String() string {
	if len(d) == 0 {
		return "none"
	}
	s := slices.Clone(d)
	slices.Sort(s)
	ms := func(x time.Duration) string { return fmt.Sprintf("%.1fms", float64(x.Microseconds())/1000) }
	return fmt.Sprintf("n=%d min %s median %s max %s", len(s), ms(s[0]), ms(s[len(s)/2]), ms(s[len(s)-1]))
}

// TestRestoreUnderLoad restores a branch, again and again, while agents
// hammer it through its DSN: Restore of the latest snapshot (the warm
// path: the spare is renamed in) and of older ones (the cold path: CREATE
// DATABASE … TEMPLATE), Snapshot in between. After every Restore the
// branch holds exactly the snapshot's rows, under the same DSN, and is a
// valid database open to connections. At the end only what the API
// reports is left, and DropBranch and DropRepo remove everything.
func TestRestoreUnderLoad(t *testing.T) {
	ctx := context.Background()
	c := mustCluster(t)
	const prefix, maxSnaps, cycles = "lu", 5, 30
	mustClusterTemplate(t, c, "apptpl")
	m := newClusterManager(t, c, prefix, Config{Warm: true, MaxSnapshots: maxSnaps})
	closed := false
	t.Cleanup(func() {
		if !closed {
			m.Close()
		}
	})
	mustOK(t, m.BindTemplate(ctx, "app", "apptpl"))
	b := must[*Branch](t)(m.CreateBranch(ctx, "app", "ws"))
	oid := mustState(t, c, b.Database).OID
	load := startLoad(t, b.DSN, oid, 4)

	var snaps []string
	want := map[string]content{}
	var snapTimes durations
	snapshot := func(id string) {
		t.Helper()
		load.pause() // agents keep connecting; nothing commits
		ct := mustContent(t, b.DSN)
		t0 := time.Now()
		must[*Snapshot](t)(m.Snapshot(ctx, "ws", id))
		snapTimes = append(snapTimes, time.Since(t0))
		want[id] = ct
		snaps = append(snaps, id)
		load.resume(oid) // Snapshot keeps the branch database (same OID)
	}
	snapshot("s0")

	// Restore timings: warm and cold; "idle" when the background work was
	// done before the call (otherwise Restore may wait for a refill that
	// holds the workspace lock).
	var warmTimes, coldTimes, warmIdle, coldIdle durations
	for i := 1; i <= cycles; i++ {
		idle := false
		time.Sleep(time.Duration(60+rand.IntN(80)) * time.Millisecond) // agents commit
		if i%2 == 0 {
			snapshot(fmt.Sprintf("s%d", i))
			time.Sleep(time.Duration(20+rand.IntN(40)) * time.Millisecond)
		}
		target, older := snaps[len(snaps)-1], false
		if live := snaps[max(0, len(snaps)-maxSnaps):]; i%4 == 3 && len(live) > 1 {
			target, older = live[rand.IntN(len(live)-1)], true
			if i%8 == 3 {
				waitIdle(t, m)
				idle = true
			}
		} else if i%4 == 1 {
			// Let the spare of the latest snapshot be ready (otherwise the
			// restore may race its refill and go cold).
			waitIdle(t, m)
			idle = true
		}
		before := m.Stats()
		t0 := time.Now()
		r, err := m.Restore(ctx, "ws", target) // agents connected, committing, reconnecting
		took := time.Since(t0)
		if err != nil {
			t.Fatalf("cycle %d: Restore %s under load: %v", i, target, err)
		}
		warm := m.Stats().WarmRestores > before.WarmRestores
		switch {
		case warm && idle:
			warmIdle = append(warmIdle, took)
		case warm:
			warmTimes = append(warmTimes, took)
		case idle:
			coldIdle = append(coldIdle, took)
		default:
			coldTimes = append(coldTimes, took)
		}
		if warm && older {
			t.Fatalf("cycle %d: restore of older snapshot %s took the warm path (the spare is a copy of %s)", i, target, snaps[len(snaps)-1])
		}
		if r.DSN != b.DSN || r.Database != b.Database || r.RestoredFrom != target {
			t.Fatalf("cycle %d: Restore returned %+v; want DSN %s, restored from %s", i, r, b.DSN, target)
		}

		load.pause()
		st := mustState(t, c, b.Database)
		if !st.valid() {
			t.Fatalf("cycle %d: branch after restore: %+v (want datallowconn and datconnlimit <> -2)", i, st)
		}
		if st.OID == oid {
			t.Fatalf("cycle %d: the branch is still database %d after Restore", i, oid)
		}
		oid = st.OID
		if got := mustContent(t, b.DSN); got != want[target] {
			t.Fatalf("cycle %d: branch after %s restore of %s has %v, snapshot had %v",
				i, map[bool]string{true: "warm", false: "cold"}[warm], target, got, want[target])
		}
		load.resume(oid)
	}
	load.report(t)
	waitIdle(t, m)
	stats := m.Stats()
	t.Logf("stats: %+v", stats)
	t.Logf("restore under load, background idle before the call: warm %v; cold %v", warmIdle, coldIdle)
	t.Logf("restore under load, background possibly busy: warm %v; cold %v", warmTimes, coldTimes)
	t.Logf("snapshot under load (writes paused): %v", snapTimes)
	if stats.WarmRestores == 0 || stats.ColdRestores == 0 {
		t.Fatalf("want both warm and cold restores: %+v", stats)
	}

	// Nothing is left but what the API reports.
	tpl := must[*Template](t)(m.Template(ctx, "app"))
	list := must[[]Snapshot](t)(m.Snapshots(ctx, "ws"))
	if len(list) != maxSnaps || list[len(list)-1].ID != snaps[len(snaps)-1] {
		t.Fatalf("Snapshots = %+v, want the last %d of %v", list, maxSnaps, snaps)
	}
	spares := must[SpareUsage](t)(m.Spares(ctx))
	if !tpl.SpareReady || spares.Count != 2 {
		t.Fatalf("spares: template ready %v, %+v; want the template's and the latest snapshot's", tpl.SpareReady, spares)
	}
	// The template spare's name carries a random tag (spares.go).
	before, _, err := prefixObjects(ctx, c, prefix)
	mustOK(t, err)
	tplSpare := ""
	for _, d := range before {
		if strings.HasPrefix(d, m.names.name(kindTplSpare, m.names.repoHash("app"), "")) {
			tplSpare = d
		}
	}
	wantDBs := []string{tpl.Database, b.Database, tplSpare,
		m.names.name(kindRestSpare, m.names.wsHash("ws"), "ws")}
	for _, s := range list {
		wantDBs = append(wantDBs, s.Database)
	}
	sort.Strings(wantDBs)
	wantRoles := []string{tpl.OwnerRole, b.Role}
	sort.Strings(wantRoles)
	m.Close()
	closed = true
	check := func(when string) {
		t.Helper()
		dbs, roles, err := prefixObjects(ctx, c, prefix)
		mustOK(t, err)
		if !slices.Equal(dbs, wantDBs) || !slices.Equal(roles, wantRoles) {
			t.Fatalf("%s: databases %v, roles %v; want %v, %v", when, dbs, roles, wantDBs, wantRoles)
		}
	}
	check("after Close")

	// A new Manager's repair finds nothing to do; then drop it all.
	m2 := newClusterManager(t, c, prefix, Config{Warm: true, MaxSnapshots: maxSnaps})
	defer m2.Close()
	waitIdle(t, m2)
	check("after New")
	mustContent(t, b.DSN) // the DSN still works
	mustOK(t, m2.DropBranch(ctx, "ws"))
	mustOK(t, m2.DropRepo(ctx, "app"))
	waitIdle(t, m2)
	dbs, roles, err := prefixObjects(ctx, c, prefix)
	mustOK(t, err)
	if len(dbs)+len(roles) != 0 {
		t.Fatalf("after DropBranch and DropRepo: databases %v, roles %v", dbs, roles)
	}
	if conn, err := pgx.Connect(ctx, b.DSN); err == nil {
		conn.Close(ctx)
		t.Fatal("the dropped branch's DSN still connects")
	}
}

// killer interrupts the Manager in the middle of a Restore: it waits for
// a Manager backend running a statement that matches phase (or, with no
// phase, a random delay) and then terminates every Manager backend, or
// crashes the whole server (immediate shutdown) and starts it again.
type killer struct {
	c       *pgCluster
	phase   string // ILIKE pattern of the statement to catch; "" = random delay
	delay   time.Duration
	restart bool
}

// run returns what it did ("missed" if the statement never showed up).
func (k killer) run(ctx context.Context) (string, error) {
	if k.restart {
		time.Sleep(k.delay)
		if err := k.c.restart(); err != nil {
			return "", fmt.Errorf("crash and restart the server: %w", err)
		}
		return fmt.Sprintf("restart after %v", k.delay), nil
	}
	conn, err := k.c.connect(ctx, "postgres")
	if err != nil {
		return "", err
	}
	defer conn.Close(context.Background())
	// Wait for the backends to be gone, as after a crash of the process
	// (a backend still exiting holds its advisory locks, and New skips
	// what another session holds locked).
	const kill = "SELECT count(pg_terminate_backend(pid, 5000)) FROM pg_stat_activity WHERE application_name = 'lockstep-manager'"
	if k.phase == "" {
		time.Sleep(k.delay)
		var n int
		err := conn.QueryRow(ctx, kill).Scan(&n)
		return fmt.Sprintf("terminated %d after %v", n, k.delay), err
	}
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		var n int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = 'lockstep-manager'
			AND state = 'active' AND query ILIKE $1`, k.phase).Scan(&n)
		if err != nil {
			return "", err
		}
		if n > 0 {
			err := conn.QueryRow(ctx, kill).Scan(&n)
			return fmt.Sprintf("terminated %d during %s", n, strings.Trim(k.phase, "%")), err
		}
	}
	return "missed " + strings.Trim(k.phase, "%"), nil
}

// TestCrashDuringRestoreUnderLoad interrupts Restore at random points
// (backends terminated, or the server crashed and restarted) while agents
// work on the branch. A new Manager's repair then leaves the branch either
// as it was before the Restore or restored, never missing and never
// invalid, under the same DSN; a Restore that reported success is never
// undone.
func TestCrashDuringRestoreUnderLoad(t *testing.T) {
	ctx := context.Background()
	c := mustCluster(t)
	const prefix, rounds = "lc", 18
	mustClusterTemplate(t, c, "apptpl")
	cfg := Config{Warm: true}
	m := newClusterManager(t, c, prefix, cfg)
	defer func() { m.Close() }()
	mustOK(t, m.BindTemplate(ctx, "app", "apptpl"))
	b := must[*Branch](t)(m.CreateBranch(ctx, "app", "ws"))
	oid := mustState(t, c, b.Database).OID
	load := startLoad(t, b.DSN, oid, 4)

	var snaps []string
	want := map[string]content{}
	snapshot := func(id string) {
		t.Helper()
		load.pause()
		ct := mustContent(t, b.DSN)
		must[*Snapshot](t)(m.Snapshot(ctx, "ws", id))
		want[id] = ct
		snaps = append(snaps, id)
		load.resume(oid)
	}
	snapshot("s0")

	phases := []string{"", "%ALLOW_CONNECTIONS false%", "%pg_terminate_backend%", "%CREATE DATABASE%", "%RENAME TO%"}
	outcomes := map[string]int{}
	for i := 1; i <= rounds; i++ {
		if i%2 == 1 {
			snapshot(fmt.Sprintf("s%d", i))
		}
		time.Sleep(time.Duration(40+rand.IntN(60)) * time.Millisecond) // agents commit
		target := snaps[len(snaps)-1]                                  // warm
		if i%3 == 2 && len(snaps) > 1 {
			target = snaps[rand.IntN(len(snaps)-1)] // cold
		}
		// Background work done (the spare of the latest snapshot ready):
		// what the killer catches is the Restore's own statements.
		waitIdle(t, m)
		k := killer{c: c, phase: phases[i%len(phases)], delay: time.Duration(rand.IntN(40)) * time.Millisecond, restart: i%6 == 0}
		if k.restart {
			k.phase = ""
		}

		// Writes paused: the branch's content before the Restore is known.
		// Agents stay connected with open transactions and keep
		// reconnecting.
		load.pause()
		old := mustContent(t, b.DSN)
		type killed struct {
			what string
			err  error
		}
		kc := make(chan killed, 1)
		go func() {
			what, err := k.run(ctx)
			kc <- killed{what, err}
		}()
		time.Sleep(time.Millisecond)
		_, rerr := m.Restore(ctx, "ws", target)
		kr := <-kc
		if kr.err != nil {
			load.resume(oid)
			t.Fatalf("round %d: kill: %v", i, kr.err)
		}
		m.Close()
		m = newClusterManager(t, c, prefix, cfg) // repairs

		st, err := stateOf(ctx, c, b.Database)
		if err != nil || !st.valid() {
			load.resume(oid)
			t.Fatalf("round %d (%s, restore err %v): branch after repair: %+v, %v", i, kr.what, rerr, st, err)
		}
		got := mustContent(t, b.DSN)
		outcome := "restored"
		switch {
		case got == want[target] && got == old:
			outcome = "same"
		case got == want[target]:
		case rerr == nil:
			load.resume(oid)
			t.Fatalf("round %d (%s): Restore %s succeeded but after repair the branch has %v, want %v", i, kr.what, target, got, want[target])
		case got == old:
			outcome = "old"
		default:
			load.resume(oid)
			t.Fatalf("round %d (%s, restore err %v): branch has %v: neither the old %v nor snapshot %s %v", i, kr.what, rerr, got, old, target, want[target])
		}
		outcomes[outcome]++
		br, err := m.Branch(ctx, "ws")
		if err != nil || br.DSN != b.DSN {
			load.resume(oid)
			t.Fatalf("round %d: Branch after repair: %+v, %v", i, br, err)
		}
		waitIdle(t, m)
		dbs, _, err := prefixObjects(ctx, c, prefix)
		mustOK(t, err)
		for _, d := range dbs {
			if strings.HasSuffix(d, "!") {
				load.resume(oid)
				t.Fatalf("round %d (%s): invalid database %s left after repair and background work: %v", i, kr.what, d, dbs)
			}
		}
		t.Logf("round %d: restore %s: %s; restore error: %v; branch %s", i, target, kr.what, rerr, outcome)
		oid = st.OID
		load.resume(oid)
	}
	load.report(t)
	t.Logf("outcomes: %v", outcomes)
	if outcomes["old"] == 0 {
		t.Log("no round left the branch at its old state (every kill came too late)")
	}
	// Whatever the crashes left, the workspace can still be dropped whole.
	mustOK(t, m.DropBranch(ctx, "ws"))
	mustOK(t, m.DropRepo(ctx, "app"))
	waitIdle(t, m)
	dbs, roles, err := prefixObjects(ctx, c, prefix)
	mustOK(t, err)
	if len(dbs)+len(roles) != 0 {
		t.Fatalf("after DropBranch and DropRepo: databases %v, roles %v", dbs, roles)
	}
}

// trapCtx is a context that becomes done the first time Done is called
// when fire says so: here, right after Restore has closed the branch and
// ended its sessions, at the start of the next statement. (A caller's
// deadline or cancellation can land there; this pins it.)
type trapCtx struct {
	context.Context
	mu    sync.Mutex
	ch    chan struct{}
	fired bool
	fire  func() bool
}

func (c *trapCtx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.fired && c.fire() {
		c.fired = true
		close(c.ch)
	}
	return c.ch
}

func (c *trapCtx) Err() error {
	select {
	case <-c.ch:
		return context.Canceled
	default:
		return nil
	}
}

// TestClusterRestoreCancelledAfterTerminate cancels a cold Restore just
// after it has ended the agent's sessions, as the statement renaming the
// old branch aside starts. Restore must fail and leave the branch as it
// was (or restored): never missing.
func TestClusterRestoreCancelledAfterTerminate(t *testing.T) {
	// Regression: any error renaming the old branch aside used to be taken
	// for a session that outlived the termination, the branch was dropped,
	// and the cancelled CREATE DATABASE then left the workspace with none.
	ctx := context.Background()
	c := mustCluster(t)
	mustClusterTemplate(t, c, "apptpl")
	m := newClusterManager(t, c, "lx", Config{})
	defer m.Close()
	mustOK(t, m.BindTemplate(ctx, "app", "apptpl"))
	b := must[*Branch](t)(m.CreateBranch(ctx, "app", "ws"))
	snap := mustContent(t, b.DSN)
	must[*Snapshot](t)(m.Snapshot(ctx, "ws", "s1"))
	agent := mustConnect(t, b.DSN) // a session Restore has to end
	mustExec(t, agent, "INSERT INTO kv VALUES ('after-s1', 1)")
	old := mustContent(t, b.DSN)

	watch := c.mustConnect(t, "postgres")
	tc := &trapCtx{Context: ctx, ch: make(chan struct{}), fire: func() bool {
		var closed bool
		var sessions int
		err := watch.QueryRow(ctx, `SELECT NOT datallowconn, (SELECT count(*) FROM pg_stat_activity a WHERE a.datname = d.datname)
			FROM pg_database d WHERE datname = $1`, b.Database).Scan(&closed, &sessions)
		return err == nil && closed && sessions == 0
	}}
	_, rerr := m.Restore(tc, "ws", "s1")
	if !tc.fired {
		t.Fatalf("the trap never fired (Restore returned %v)", rerr)
	}
	t.Logf("Restore with the context cancelled after terminate: %v", rerr)
	st, err := stateOf(ctx, c, b.Database)
	if err != nil {
		m.Close()
		m2 := newClusterManager(t, c, "lx", Config{})
		defer m2.Close()
		_, berr := m2.Branch(ctx, "ws")
		t.Fatalf("after a cancelled Restore the branch is gone: %v; after a new Manager's repair, Branch: %v", err, berr)
	}
	if !st.valid() {
		// The next call repairs a branch left closed.
		must[*Branch](t)(m.Branch(ctx, "ws"))
	}
	if got := mustContent(t, b.DSN); got != old && got != snap {
		t.Fatalf("branch has %v: neither the old %v nor the snapshot's %v", got, old, snap)
	}
}
