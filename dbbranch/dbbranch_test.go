package dbbranch

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lockstep-hq/lockstep"
)

func TestNames(t *testing.T) {
	n := namer{"ls"}
	long := strings.Repeat("a", 95)
	seen := map[string]string{}
	for _, ws := range []string{"a", "ws-1", "ws.1", "ws_1", long + "bbbbb", long + "ccccc", strings.Repeat("z9._-", 20)} {
		h := n.wsHash(ws)
		for _, k := range []byte{kindBranch, kindRole, kindRestSpare, kindTrash} {
			name := n.name(k, h, ws)
			if len(name) > maxIdentBytes {
				t.Fatalf("%q: %d bytes", name, len(name))
			}
			if other, dup := seen[name]; dup {
				t.Fatalf("%q and %q both map to %q", other, ws, name)
			}
			seen[name] = ws
			kind, hash, _, ok := n.parse(name)
			if !ok || kind != k || hash != h {
				t.Fatalf("parse %q = %c %s %v", name, kind, hash, ok)
			}
			if n.name(k, n.wsHash(ws), ws) != name {
				t.Fatal("not deterministic")
			}
		}
	}
	s := namer{"abcdef"}.snapshot(n.wsHash("x"), strings.Repeat("9", 40))
	if len(s) > maxIdentBytes {
		t.Fatalf("snapshot name %d bytes", len(s))
	}
	if _, _, rest, ok := (namer{"abcdef"}).parse(s); !ok || rest != strings.Repeat("9", 40) {
		t.Fatalf("parse snapshot: %q %v", rest, ok)
	}
}

func TestBranchLifecycle(t *testing.T) {
	ctx := context.Background()
	f := mustFixture(t, Config{})
	m := f.m
	mustOK(t, m.BindTemplate(ctx, "app", f.template))
	tpl := must[*Template](t)(m.Template(ctx, "app"))
	if tpl.Source != f.template || tpl.SizeBytes == 0 {
		t.Fatalf("template info: %+v", tpl)
	}
	b := must[*Branch](t)(m.CreateBranch(ctx, "app", "ws-1"))
	if b.Database == "" || b.Role == "" || !strings.Contains(b.DSN, b.Database) {
		t.Fatalf("branch: %+v", b)
	}
	_, err := m.CreateBranch(ctx, "app", "ws-1")
	wantCode(t, err, lockstep.ECONFLICT)
	got := must[*Branch](t)(m.Branch(ctx, "ws-1"))
	if got.DSN != b.DSN || got.Repo != "app" {
		t.Fatalf("Branch = %+v, want %+v", got, b)
	}

	// The agent's role does what migrations do, on copied and new tables.
	agent := mustConnect(t, b.DSN)
	mustExec(t, agent, "INSERT INTO t0 (name, n) VALUES ('agent', 1)")
	mustExec(t, agent, "ALTER TABLE t3 ADD COLUMN extra text")
	mustExec(t, agent, "CREATE INDEX t3_extra ON t3(extra)")
	mustExec(t, agent, "CREATE TABLE notes (id serial PRIMARY KEY, body text)")
	mustExec(t, agent, "INSERT INTO notes (body) VALUES ('one')")
	mustExec(t, agent, "ALTER TYPE mood ADD VALUE 'glad'")
	mustExec(t, agent, "CREATE OR REPLACE VIEW v0 AS SELECT id, name, n FROM t0")
	mustExec(t, agent, "DROP TABLE t9")
	mustExec(t, agent, "CREATE SCHEMA app")
	agent.Close(ctx)

	s1 := must[*Snapshot](t)(m.Snapshot(ctx, "ws-1", "cp-1"))
	if s1.ID != "cp-1" || s1.SizeBytes == 0 {
		t.Fatalf("snapshot: %+v", s1)
	}
	_, err = m.Snapshot(ctx, "ws-1", "cp-1")
	wantCode(t, err, lockstep.ECONFLICT)

	agent = mustConnect(t, b.DSN)
	mustExec(t, agent, "DELETE FROM t0")
	mustExec(t, agent, "DROP TABLE notes")
	agent.Close(ctx)
	if n := countRows(t, b.DSN, "t0"); n != 0 {
		t.Fatalf("t0 has %d rows after delete", n)
	}

	r := must[*Branch](t)(m.Restore(ctx, "ws-1", "cp-1"))
	if r.DSN != b.DSN {
		t.Fatalf("DSN changed: %s → %s", b.DSN, r.DSN)
	}
	if n := countRows(t, b.DSN, "t0"); n != 11 {
		t.Fatalf("t0 has %d rows after restore, want 11", n)
	}
	if n := countRows(t, b.DSN, "notes"); n != 1 {
		t.Fatalf("notes has %d rows after restore, want 1", n)
	}
	// Restored twice from the same snapshot: the snapshot is intact.
	must[*Branch](t)(m.Restore(ctx, "ws-1", "cp-1"))
	if n := countRows(t, b.DSN, "t0"); n != 11 {
		t.Fatalf("t0 has %d rows after second restore", n)
	}

	snaps := must[[]Snapshot](t)(m.Snapshots(ctx, "ws-1"))
	if len(snaps) != 1 || snaps[0].ID != "cp-1" {
		t.Fatalf("snapshots: %+v", snaps)
	}
	mustOK(t, m.DropSnapshot(ctx, "ws-1", "cp-1"))
	wantCode(t, m.DropSnapshot(ctx, "ws-1", "cp-1"), lockstep.ENOTFOUND)
	_, err = m.Restore(ctx, "ws-1", "cp-1")
	wantCode(t, err, lockstep.ENOTFOUND)

	// RefreshTemplate re-copies; new branches see the user's changes.
	user := mustConnectDB(t, f.template)
	mustExec(t, user, "CREATE TABLE added_later (id int)")
	user.Close(ctx)
	mustOK(t, m.RefreshTemplate(ctx, "app"))
	b2 := must[*Branch](t)(m.CreateBranch(ctx, "app", "ws-2"))
	if n := countRows(t, b2.DSN, "added_later"); n != 0 {
		t.Fatal(n)
	}

	mustOK(t, m.DropBranch(ctx, "ws-1"))
	_, err = m.Branch(ctx, "ws-1")
	wantCode(t, err, lockstep.ENOTFOUND)
	wantCode(t, m.DropBranch(ctx, "ws-1"), lockstep.ENOTFOUND)
	mustOK(t, m.DropRepo(ctx, "app"))
	_, err = m.Branch(ctx, "ws-2")
	wantCode(t, err, lockstep.ENOTFOUND)
	_, err = m.Template(ctx, "app")
	wantCode(t, err, lockstep.ENOTFOUND)
	assertNothingLeft(t, f)
}

func mustConnectDB(tb testing.TB, db string) *pgx.Conn {
	tb.Helper()
	cc, _ := pgx.ParseConfig(testURL())
	cc.Database = db
	c, err := pgx.ConnectConfig(context.Background(), cc)
	if err != nil {
		tb.Fatalf("connect %s: %v", db, err)
	}
	tb.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// assertNothingLeft checks that only the user's template remains.
func assertNothingLeft(tb testing.TB, f *fixture) {
	tb.Helper()
	var n int
	err := f.admin.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM pg_database WHERE starts_with(datname, $1))
		+ (SELECT count(*) FROM pg_roles WHERE starts_with(rolname, $1))`, f.prefix+"_").Scan(&n)
	mustOK(tb, err)
	if n != 0 {
		tb.Fatalf("%d Lockstep databases/roles left after drop", n)
	}
}

func TestRoleIsolation(t *testing.T) {
	ctx := context.Background()
	f := mustFixture(t, Config{})
	m := f.m
	mustOK(t, m.BindTemplate(ctx, "app", f.template))
	a := must[*Branch](t)(m.CreateBranch(ctx, "app", "ws-a"))
	b := must[*Branch](t)(m.CreateBranch(ctx, "app", "ws-b"))
	must[*Snapshot](t)(m.Snapshot(ctx, "ws-b", "s1"))
	tpl := must[*Template](t)(m.Template(ctx, "app"))

	// a's credentials against b's branch, b's snapshot and the template copy.
	for _, db := range []string{b.Database, m.names.snapshot(m.names.wsHash("ws-b"), "s1"), tpl.Database} {
		dsn := strings.Replace(a.DSN, "/"+a.Database, "/"+db, 1)
		c, err := pgx.Connect(ctx, dsn)
		if err == nil {
			c.Close(ctx)
			t.Fatalf("role %s connected to %s", a.Role, db)
		}
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || (pe.Code != "42501" && pe.Code != "55000") {
			t.Fatalf("connect %s as %s: want permission denied / not allowed, got %v", db, a.Role, err)
		}
	}
	// The owner role cannot log in at all.
	dsn := strings.Replace(a.DSN, a.Role, tpl.OwnerRole, 1)
	if c, err := pgx.Connect(ctx, dsn); err == nil {
		c.Close(ctx)
		t.Fatal("owner role logged in")
	}
	// And a's own branch works.
	if n := countRows(t, a.DSN, "t1"); n != 10 {
		t.Fatal(n)
	}
}

func TestRestoreWithOpenConnection(t *testing.T) {
	ctx := context.Background()
	for _, warm := range []bool{false, true} {
		t.Run(fmt.Sprintf("warm=%v", warm), func(t *testing.T) {
			f := mustFixture(t, Config{Warm: warm})
			m := f.m
			mustOK(t, m.BindTemplate(ctx, "app", f.template))
			b := must[*Branch](t)(m.CreateBranch(ctx, "app", "ws"))

			// A session open (and idle in a transaction) across Snapshot.
			agent := mustConnect(t, b.DSN)
			tx, err := agent.Begin(ctx)
			mustOK(t, err)
			if _, err := tx.Exec(ctx, "INSERT INTO t0 (name) VALUES ('uncommitted')"); err != nil {
				t.Fatal(err)
			}
			must[*Snapshot](t)(m.Snapshot(ctx, "ws", "s1"))
			if err := tx.Commit(ctx); err == nil {
				t.Fatal("transaction survived a snapshot (its session should have been terminated)")
			}

			agent = mustConnect(t, b.DSN)
			mustExec(t, agent, "DELETE FROM t1")
			waitIdle(t, m)
			// The agent is connected while Restore runs.
			r := must[*Branch](t)(m.Restore(ctx, "ws", "s1"))
			if _, err := agent.Exec(ctx, "SELECT 1"); err == nil {
				t.Fatal("agent session survived restore")
			}
			if n := countRows(t, r.DSN, "t1"); n != 10 {
				t.Fatalf("t1 rows after restore = %d", n)
			}
			if n := countRows(t, r.DSN, "t0 WHERE name = 'uncommitted'"); n != 0 {
				t.Fatal("uncommitted row in snapshot")
			}
			waitIdle(t, m)
			st := m.Stats()
			if warm && st.WarmRestores != 1 || !warm && st.ColdRestores != 1 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

func TestSnapshotCap(t *testing.T) {
	ctx := context.Background()
	f := mustFixture(t, Config{MaxSnapshots: 3})
	m := f.m
	mustOK(t, m.BindTemplate(ctx, "app", f.template))
	must[*Branch](t)(m.CreateBranch(ctx, "app", "ws"))
	for i := 1; i <= 5; i++ {
		must[*Snapshot](t)(m.Snapshot(ctx, "ws", fmt.Sprintf("s%d", i)))
	}
	snaps := must[[]Snapshot](t)(m.Snapshots(ctx, "ws"))
	waitIdle(t, m)
	n := 0
	for _, d := range must[[]*dbInfo](t)(listAll(m)) {
		if d.Kind == kindSnapshot {
			n++
		}
	}
	if n != 3 {
		t.Fatalf("%d snapshot databases, want 3", n)
	}
	var ids []string
	for _, s := range snaps {
		ids = append(ids, s.ID)
	}
	if strings.Join(ids, ",") != "s3,s4,s5" {
		t.Fatalf("snapshots = %v, want s3,s4,s5", ids)
	}
	_, err := m.Restore(ctx, "ws", "s1")
	wantCode(t, err, lockstep.ENOTFOUND)
}

func TestWarmPaths(t *testing.T) {
	ctx := context.Background()
	f := mustFixture(t, Config{Warm: true})
	m := f.m
	mustOK(t, m.BindTemplate(ctx, "app", f.template))
	waitIdle(t, m)
	if !must[*Template](t)(m.Template(ctx, "app")).SpareReady {
		t.Fatal("template spare not ready after WaitIdle")
	}
	b := must[*Branch](t)(m.CreateBranch(ctx, "app", "ws-1"))
	if st := m.Stats(); st.WarmBranches != 1 || st.ColdBranches != 0 {
		t.Fatalf("first branch not warm: %+v", st)
	}
	// The renamed spare is a proper branch: grants, data, migrations.
	agent := mustConnect(t, b.DSN)
	mustExec(t, agent, "ALTER TABLE t0 ADD COLUMN x int")
	mustExec(t, agent, "INSERT INTO t0 (name, x) VALUES ('a', 1)")
	agent.Close(ctx)
	waitIdle(t, m)
	b2 := must[*Branch](t)(m.CreateBranch(ctx, "app", "ws-2"))
	if st := m.Stats(); st.WarmBranches != 2 {
		t.Fatalf("second branch not warm: %+v", st)
	}
	if n := countRows(t, b2.DSN, "t0"); n != 10 {
		t.Fatalf("ws-2 sees ws-1's rows: %d", n)
	}

	must[*Snapshot](t)(m.Snapshot(ctx, "ws-1", "s1"))
	agent = mustConnect(t, b.DSN)
	mustExec(t, agent, "INSERT INTO t0 (name) VALUES ('b')")
	agent.Close(ctx)
	must[*Snapshot](t)(m.Snapshot(ctx, "ws-1", "s2"))
	waitIdle(t, m)
	u := must[SpareUsage](t)(m.Spares(ctx))
	if u.Count != 2 || u.Bytes == 0 { // template spare + one per workspace with snapshots (ws-1)
		t.Fatalf("spares = %+v", u)
	}
	t.Logf("spares: %d copies, %d bytes", u.Count, u.Bytes)

	agent = mustConnect(t, b.DSN)
	mustExec(t, agent, "DELETE FROM t0")
	agent.Close(ctx)
	// Latest snapshot: rename.
	must[*Branch](t)(m.Restore(ctx, "ws-1", "s2"))
	if st := m.Stats(); st.WarmRestores != 1 || st.ColdRestores != 0 {
		t.Fatalf("restore of latest not warm: %+v", st)
	}
	if n := countRows(t, b.DSN, "t0"); n != 12 {
		t.Fatalf("t0 after warm restore = %d, want 12", n)
	}
	// Older snapshot: CREATE … TEMPLATE.
	must[*Branch](t)(m.Restore(ctx, "ws-1", "s1"))
	if st := m.Stats(); st.ColdRestores != 1 {
		t.Fatalf("restore of older not cold: %+v", st)
	}
	if n := countRows(t, b.DSN, "t0"); n != 11 {
		t.Fatalf("t0 after cold restore = %d, want 11", n)
	}
	// Restore right away, before the spare is refilled: cold fallback,
	// never an error.
	must[*Branch](t)(m.Restore(ctx, "ws-1", "s2"))
	must[*Branch](t)(m.Restore(ctx, "ws-1", "s2"))
	if n := countRows(t, b.DSN, "t0"); n != 12 {
		t.Fatalf("t0 = %d", n)
	}
	waitIdle(t, m)
	// No trash left behind once the background work is done.
	dbs := must[[]*dbInfo](t)(listAll(m))
	for _, d := range dbs {
		if d.Kind == kindTrash || !d.complete() {
			t.Fatalf("left over: %s", d.Name)
		}
	}
	// Refresh invalidates the template spare; it is rebuilt.
	mustOK(t, m.RefreshTemplate(ctx, "app"))
	waitIdle(t, m)
	must[*Branch](t)(m.CreateBranch(ctx, "app", "ws-3"))
	if st := m.Stats(); st.WarmBranches != 3 {
		t.Fatalf("branch after refresh not warm: %+v", st)
	}
	mustOK(t, m.DropRepo(ctx, "app"))
	waitIdle(t, m)
	assertNothingLeft(t, f)
}

func listAll(m *Manager) ([]*dbInfo, error) {
	var out []*dbInfo
	err := m.withLocks(context.Background(), nil, func(conn *pgx.Conn) error {
		var err error
		out, err = m.listDBs(context.Background(), conn, "")
		return err
	})
	return out, err
}

func TestColdWhenNotWarm(t *testing.T) {
	ctx := context.Background()
	f := mustFixture(t, Config{Warm: false})
	m := f.m
	mustOK(t, m.BindTemplate(ctx, "app", f.template))
	must[*Branch](t)(m.CreateBranch(ctx, "app", "ws"))
	must[*Snapshot](t)(m.Snapshot(ctx, "ws", "s1"))
	must[*Branch](t)(m.Restore(ctx, "ws", "s1"))
	st := m.Stats()
	if st.ColdBranches != 1 || st.ColdRestores != 1 || st.WarmBranches+st.WarmRestores+st.Refills != 0 {
		t.Fatalf("stats %+v", st)
	}
	waitIdle(t, m)
	if u := must[SpareUsage](t)(m.Spares(ctx)); u.Count != 0 {
		t.Fatalf("spares without Warm: %+v", u)
	}
	for _, d := range must[[]*dbInfo](t)(listAll(m)) {
		if d.Kind == kindTrash {
			t.Fatalf("trash left: %s", d.Name)
		}
	}
}

func TestConcurrentWorkspaces(t *testing.T) {
	ctx := context.Background()
	f := mustFixture(t, Config{Warm: true})
	m := f.m
	mustOK(t, m.BindTemplate(ctx, "app", f.template))
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			ws := fmt.Sprintf("ws-%d", i)
			err := func() error {
				b, err := m.CreateBranch(ctx, "app", ws)
				if err != nil {
					return err
				}
				c, err := pgx.Connect(ctx, b.DSN)
				if err != nil {
					return err
				}
				_, err = c.Exec(ctx, "INSERT INTO t0 (name, n) VALUES ($1, $2)", ws, i)
				c.Close(ctx)
				if err != nil {
					return err
				}
				if _, err := m.Snapshot(ctx, ws, "s1"); err != nil {
					return err
				}
				c, err = pgx.Connect(ctx, b.DSN)
				if err != nil {
					return err
				}
				_, err = c.Exec(ctx, "DELETE FROM t0")
				c.Close(ctx)
				if err != nil {
					return err
				}
				if _, err := m.Restore(ctx, ws, "s1"); err != nil {
					return err
				}
				c, err = pgx.Connect(ctx, b.DSN)
				if err != nil {
					return err
				}
				defer c.Close(ctx)
				var n int
				if err := c.QueryRow(ctx, "SELECT count(*) FROM t0 WHERE name = $1", ws).Scan(&n); err != nil {
					return err
				}
				if n != 1 {
					return fmt.Errorf("%s: own row count %d", ws, n)
				}
				return nil
			}()
			if err != nil {
				errs <- fmt.Errorf("%s: %w", ws, err)
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	waitIdle(t, m)
	// A second Manager (another replica) on the same prefix sees the same
	// state and shares the locks.
	m2, err := New(ctx, Config{AdminURL: testURL(), Prefix: f.prefix, Secret: []byte("test secret"), Warm: true})
	mustOK(t, err)
	defer m2.Close()
	var wg2 sync.WaitGroup
	for i, mm := range []*Manager{m, m2, m, m2} {
		wg2.Add(1)
		go func(i int, mm *Manager) {
			defer wg2.Done()
			if _, err := mm.Restore(ctx, "ws-0", "s1"); err != nil {
				t.Errorf("restore %d: %v", i, err)
			}
		}(i, mm)
	}
	wg2.Wait()
	waitIdle(t, m)
	waitIdle(t, m2)
	b := must[*Branch](t)(m2.Branch(ctx, "ws-0"))
	if n := countRows(t, b.DSN, "t0"); n != 11 {
		t.Fatalf("t0 = %d", n)
	}
}

func TestLongNames(t *testing.T) {
	ctx := context.Background()
	f := mustFixture(t, Config{})
	m := f.m
	repo := strings.Repeat("r", 100)
	ws1 := strings.Repeat("w", 99) + "1"
	ws2 := strings.Repeat("w", 99) + "2"
	mustOK(t, m.BindTemplate(ctx, repo, f.template))
	b1 := must[*Branch](t)(m.CreateBranch(ctx, repo, ws1))
	b2 := must[*Branch](t)(m.CreateBranch(ctx, repo, ws2))
	if b1.Database == b2.Database || b1.Role == b2.Role || len(b1.Database) > 63 || len(b1.Role) > 63 {
		t.Fatalf("names: %s %s %s %s", b1.Database, b2.Database, b1.Role, b2.Role)
	}
	id := strings.Repeat("9", 40)
	s := must[*Snapshot](t)(m.Snapshot(ctx, ws1, id))
	if len(s.Database) > 63 {
		t.Fatal(s.Database)
	}
	must[*Branch](t)(m.Restore(ctx, ws1, id))
	if n := countRows(t, b1.DSN, "t2"); n != 10 {
		t.Fatal(n)
	}
}

func TestBadNames(t *testing.T) {
	ctx := context.Background()
	f := mustFixture(t, Config{})
	m := f.m
	for _, bad := range []string{"", "UPPER", "a/b", "-lead", strings.Repeat("a", 101), "a b", `a"b`, "é"} {
		wantCode(t, m.BindTemplate(ctx, bad, f.template), lockstep.EINVALID)
		_, err := m.CreateBranch(ctx, "app", bad)
		wantCode(t, err, lockstep.EINVALID)
		_, err = m.Branch(ctx, bad)
		wantCode(t, err, lockstep.EINVALID)
	}
	for _, bad := range []string{"", "A", "a_b", "a.b", strings.Repeat("1", 41)} {
		_, err := m.Snapshot(ctx, "ws", bad)
		wantCode(t, err, lockstep.EINVALID)
		_, err = m.Restore(ctx, "ws", bad)
		wantCode(t, err, lockstep.EINVALID)
	}
	wantCode(t, m.BindTemplate(ctx, "app", ""), lockstep.EINVALID)
	wantCode(t, m.BindTemplate(ctx, "app", f.prefix+"_t_x"), lockstep.EINVALID)
	for _, p := range []string{"LS", "1a", "toolong1", "a_b"} {
		_, err := New(ctx, Config{AdminURL: testURL(), Prefix: p, Secret: []byte("x")})
		wantCode(t, err, lockstep.EINVALID)
	}
	_, err := New(ctx, Config{AdminURL: testURL(), Prefix: "ok"})
	wantCode(t, err, lockstep.EINVALID)
}

func TestUnknown(t *testing.T) {
	ctx := context.Background()
	f := mustFixture(t, Config{})
	m := f.m
	_, err := m.CreateBranch(ctx, "nope", "ws")
	wantCode(t, err, lockstep.ENOTFOUND)
	_, err = m.Branch(ctx, "nope")
	wantCode(t, err, lockstep.ENOTFOUND)
	_, err = m.Snapshot(ctx, "nope", "s1")
	wantCode(t, err, lockstep.ENOTFOUND)
	_, err = m.Snapshots(ctx, "nope")
	wantCode(t, err, lockstep.ENOTFOUND)
	_, err = m.Restore(ctx, "nope", "s1")
	wantCode(t, err, lockstep.ENOTFOUND)
	wantCode(t, m.DropSnapshot(ctx, "nope", "s1"), lockstep.ENOTFOUND)
	wantCode(t, m.DropBranch(ctx, "nope"), lockstep.ENOTFOUND)
	wantCode(t, m.DropRepo(ctx, "nope"), lockstep.ENOTFOUND)
	wantCode(t, m.RefreshTemplate(ctx, "nope"), lockstep.ENOTFOUND)
	_, err = m.Template(ctx, "nope")
	wantCode(t, err, lockstep.ENOTFOUND)
	wantCode(t, m.BindTemplate(ctx, "app", f.prefix+"missing"), lockstep.ENOTFOUND)
}

func TestBindBusyTemplate(t *testing.T) {
	ctx := context.Background()
	f := mustFixture(t, Config{})
	user := mustConnectDB(t, f.template)
	err := f.m.BindTemplate(ctx, "app", f.template)
	wantCode(t, err, lockstep.EUNAVAILABLE)
	if !strings.Contains(err.Error(), "being accessed by 1 other session") || !strings.Contains(err.Error(), f.template) {
		t.Fatalf("unclear error: %v", err)
	}
	// The user's session was left alone.
	mustExec(t, user, "SELECT 1")
	user.Close(ctx)
	mustOK(t, f.m.BindTemplate(ctx, "app", f.template))
}

func TestUnreachableServer(t *testing.T) {
	_, err := New(context.Background(), Config{AdminURL: "postgres://postgres@127.0.0.1:1/postgres?connect_timeout=2", Secret: []byte("x")})
	wantCode(t, err, lockstep.EUNAVAILABLE)
}

// TestCrashRepair leaves the states a crash can leave and checks that the
// next call (or New) repairs them.
func TestCrashRepair(t *testing.T) {
	ctx := context.Background()
	f := mustFixture(t, Config{})
	m, admin := f.m, f.admin
	mustOK(t, m.BindTemplate(ctx, "app", f.template))
	b := must[*Branch](t)(m.CreateBranch(ctx, "app", "ws"))
	must[*Snapshot](t)(m.Snapshot(ctx, "ws", "s1"))
	wh := m.names.wsHash("ws")
	tpl := must[*Template](t)(m.Template(ctx, "app"))

	// 1. Restore interrupted after the branch was renamed aside.
	trash := m.names.name(kindTrash, wh, "ws")
	mustExec(t, admin, "ALTER DATABASE "+ident(b.Database)+" ALLOW_CONNECTIONS false")
	mustExec(t, admin, "ALTER DATABASE "+ident(b.Database)+" RENAME TO "+ident(trash))
	// 2. A snapshot copy interrupted before its comment.
	mustExec(t, admin, "CREATE DATABASE "+ident(m.names.snapshot(wh, "half"))+" TEMPLATE "+ident(tpl.Database))
	// 3. A template spare interrupted before its comment.
	rh := m.names.repoHash("app")
	mustExec(t, admin, "CREATE DATABASE "+ident(m.names.name(kindTplSpare, rh, "app"))+" TEMPLATE "+ident(tpl.Database))

	// 4. A snapshot whose DROP was interrupted: PostgreSQL marks it
	// invalid (datconnlimit -2); any ALTER DATABASE on it is FATAL.
	broken := m.names.snapshot(wh, "broken")
	mustExec(t, admin, "CREATE DATABASE "+ident(broken)+" TEMPLATE "+ident(tpl.Database))
	mustExec(t, admin, "COMMENT ON DATABASE "+ident(broken)+" IS "+quoteLiteral(`{"v":1,"kind":"snapshot","ws":"ws","snap":"broken","at":"2030-01-01T00:00:00Z"}`))
	mustExec(t, admin, "UPDATE pg_database SET datconnlimit = -2 WHERE datname = $1", broken)

	m2, err := New(ctx, Config{AdminURL: testURL(), Prefix: f.prefix, Secret: []byte("test secret")})
	mustOK(t, err)
	defer m2.Close()
	got := must[*Branch](t)(m2.Branch(ctx, "ws"))
	if got.DSN != b.DSN {
		t.Fatal(got.DSN)
	}
	if n := countRows(t, b.DSN, "t0"); n != 10 {
		t.Fatal(n)
	}
	snaps := must[[]Snapshot](t)(m2.Snapshots(ctx, "ws"))
	if len(snaps) != 1 {
		t.Fatalf("snapshots after repair: %+v", snaps)
	}
	for _, d := range must[[]*dbInfo](t)(listAll(m2)) {
		if !d.complete() {
			t.Fatalf("incomplete left: %s", d.Name)
		}
	}

	// 5. RefreshTemplate interrupted after dropping the old copy, before
	// renaming the new one into place: the next CreateBranch finishes it.
	staging := m.names.name(kindStaging, rh, "app")
	mustExec(t, admin, "ALTER DATABASE "+ident(tpl.Database)+" RENAME TO "+ident(staging))
	b2 := must[*Branch](t)(m2.CreateBranch(ctx, "app", "ws-2"))
	if n := countRows(t, b2.DSN, "t5"); n != 10 {
		t.Fatal(n)
	}
	if got := must[*Template](t)(m2.Template(ctx, "app")); got.Database != tpl.Database {
		t.Fatalf("template copy %s, want %s", got.Database, tpl.Database)
	}

	// 6. A snapshot left the branch refusing connections.
	mustExec(t, admin, "ALTER DATABASE "+ident(b.Database)+" ALLOW_CONNECTIONS false")
	must[*Branch](t)(m2.Branch(ctx, "ws"))
	if n := countRows(t, b.DSN, "t0"); n != 10 {
		t.Fatal(n)
	}
}
