package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockstep-hq/lockstep/dbbranch"
)

// benchBranchPrefix names the bench servers' database branches; it must
// be a valid dbbranch prefix ([a-z][a-z0-9]{0,5}: "lsbench" was not, and
// every server of a bench given LOCKSTEP_BRANCH_DATABASE_URL failed to
// start).
const benchBranchPrefix = "lsbnch"

// dbBurstSize is how many forks one burst of the db-burst row starts at
// once (issue #26: "burst of 10 concurrent forks").
const dbBurstSize = 10

// benchDBBurst measures a burst of dbBurstSize concurrent database
// branches (dbbranch.CreateBranch with the warm pool, as serve wires it)
// beside the same burst of bare CREATE DATABASE … TEMPLATE, one
// connection each, interleaved burst by burst. A row's sample is the
// slowest fork of one burst (with 10 forks, its p99). One untimed burst
// first teaches the pool the demand, and the pool refills between
// bursts, as between bursts in use.
func (b *bencher) benchDBBurst() error {
	const name = "db-burst-10"
	if b.o.branchDBURL == "" {
		b.skip(name, "no LOCKSTEP_BRANCH_DATABASE_URL")
		return nil
	}
	ctx := b.ctx
	var tag [3]byte
	rand.Read(tag[:])
	prefix := "lb" + hex.EncodeToString(tag[:])[:4]
	tpl := prefix + "tpl"
	admin, err := pgx.Connect(ctx, b.o.branchDBURL)
	if err != nil {
		return err
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{tpl}.Sanitize()); err != nil {
		return err
	}
	defer admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+pgx.Identifier{tpl}.Sanitize()+" WITH (FORCE)")
	if err := fillBurstTemplate(ctx, b.o.branchDBURL, tpl); err != nil {
		return err
	}
	m, err := dbbranch.New(ctx, dbbranch.Config{AdminURL: b.o.branchDBURL, Prefix: prefix, Secret: []byte(prefix), Warm: true, MaxSpares: dbBurstSize})
	if err != nil {
		return err
	}
	defer func() {
		m.DropRepo(context.Background(), "app")
		m.Close()
	}()
	if err := m.BindTemplate(ctx, "app", tpl); err != nil {
		return err
	}
	conns := make([]*pgx.Conn, dbBurstSize)
	for i := range conns {
		if conns[i], err = pgx.Connect(ctx, b.o.branchDBURL); err != nil {
			return err
		}
		defer conns[i].Close(context.Background())
	}
	// burst runs fn for every fork at once; the slowest fork's time.
	burst := func(fn func(i int) error) (time.Duration, error) {
		ds := make([]time.Duration, dbBurstSize)
		errs := make([]error, dbBurstSize)
		var wg sync.WaitGroup
		for i := range dbBurstSize {
			wg.Add(1)
			go func() {
				defer wg.Done()
				t0 := time.Now()
				errs[i] = fn(i)
				ds[i] = time.Since(t0)
			}()
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				return 0, err
			}
		}
		return slices.Max(ds), nil
	}
	ws := func(run, i int) string { return fmt.Sprintf("b%d-%d", run, i) }
	fork := func(run int) (time.Duration, error) {
		if err := m.WaitIdle(ctx); err != nil {
			return 0, err
		}
		d, err := burst(func(i int) error { _, err := m.CreateBranch(ctx, "app", ws(run, i)); return err })
		for i := range dbBurstSize {
			if err := m.DropBranch(ctx, ws(run, i)); err != nil {
				return 0, err
			}
		}
		return d, err
	}
	raw := func(run int) (time.Duration, error) {
		db := func(i int) string { return pgx.Identifier{fmt.Sprintf("%s_raw%d_%d", prefix, run, i)}.Sanitize() }
		d, err := burst(func(i int) error {
			_, err := conns[i].Exec(ctx, "CREATE DATABASE "+db(i)+" TEMPLATE "+pgx.Identifier{tpl}.Sanitize()+" STRATEGY WAL_LOG")
			return err
		})
		for i := range dbBurstSize {
			admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+db(i))
		}
		return d, err
	}
	before := m.Stats()
	ls, gd, err := b.measurePair(name, 1, b.slow(), fork, raw)
	if err != nil {
		return err
	}
	st := m.Stats()
	r := b.add(&benchRow{Name: name, Size: "10-table template, 10 forks at once", LS: ls, Git: gd,
		GitCmd: "10× CREATE DATABASE … TEMPLATE at once (no git baseline)", Target: "p99 ≤ 50 ms"})
	r.check("slowest fork of a burst (median) ≤ 50 ms", ls.Median <= 50)
	r.note("a sample is the slowest of 10 concurrent forks (their p99); forks by rename %d, by copy %d (the first, untimed burst teaches the pool)",
		st.WarmBranches-before.WarmBranches, st.ColdBranches-before.ColdBranches)
	return nil
}

// fillBurstTemplate gives the db-burst row's template the 10 tables (an
// index, a foreign key and 10 rows each) of dbbranch's benchmarks.
func fillBurstTemplate(ctx context.Context, url, db string) error {
	cc, err := pgx.ParseConfig(url)
	if err != nil {
		return err
	}
	cc.Database = db
	c, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	var q strings.Builder
	for i := range 10 {
		fk := ""
		if i > 0 {
			fk = fmt.Sprintf(", parent int REFERENCES t%d(id)", i-1)
		}
		fmt.Fprintf(&q, "CREATE TABLE t%d (id serial PRIMARY KEY, name text NOT NULL, n int, created timestamptz DEFAULT now()%s);\n", i, fk)
		fmt.Fprintf(&q, "CREATE INDEX t%d_name ON t%d(name);\n", i, i)
		fmt.Fprintf(&q, "INSERT INTO t%d (name, n) SELECT 'row' || g, g FROM generate_series(1, 10) g;\n", i)
	}
	_, err = c.Exec(ctx, q.String())
	return err
}
