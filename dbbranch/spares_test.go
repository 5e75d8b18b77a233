package dbbranch

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// templateSpares lists the template spares of repo in the catalog.
func templateSpares(tb testing.TB, f *fixture, m *Manager, repo string) []*dbInfo {
	tb.Helper()
	ctx := context.Background()
	var out []*dbInfo
	mustOK(tb, m.withLocks(ctx, nil, func(conn *pgx.Conn) error {
		dbs, err := m.listDBs(ctx, conn, m.names.repoHash(repo))
		for _, d := range dbs {
			if d.Kind == kindTplSpare {
				out = append(out, d)
			}
		}
		return err
	}))
	return out
}

func burstForks(t *testing.T, m *Manager, tag string, n int) {
	t.Helper()
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := m.CreateBranch(context.Background(), "app", fmt.Sprintf("%s-%d", tag, i)); err != nil {
				t.Errorf("fork %s-%d: %v", tag, i, err)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
}

// TestSparePoolFollowsDemand: a burst of concurrent forks grows the
// template spare pool to the burst (bounded by MaxSpares), so the next
// burst of that size is served by renames only, each fork its own spare
// (unique names); spares beyond the demand that sat unused are dropped by
// the next refill; Close drops all but one; DropRepo drops the rest.
func TestSparePoolFollowsDemand(t *testing.T) {
	ctx := context.Background()
	f := mustFixture(t, Config{Warm: true, MaxSpares: 4})
	m := f.m
	mustOK(t, m.BindTemplate(ctx, "app", f.template))
	waitIdle(t, m)
	if n := len(templateSpares(t, f, m, "app")); n != 1 {
		t.Fatalf("after bind: %d template spares, want 1 (no demand yet)", n)
	}

	burstForks(t, m, "a", 4) // teaches the pool: 4 at once
	waitIdle(t, m)
	sps := templateSpares(t, f, m, "app")
	if len(sps) != 4 {
		t.Fatalf("after a burst of 4: %d template spares, want 4", len(sps))
	}
	before := m.Stats()
	burstForks(t, m, "b", 4)
	st := m.Stats()
	if st.WarmBranches-before.WarmBranches != 4 || st.ColdBranches != before.ColdBranches {
		t.Fatalf("second burst of 4 with 4 spares: warm +%d cold +%d, want 4 renames", st.WarmBranches-before.WarmBranches, st.ColdBranches-before.ColdBranches)
	}
	// Every fork got a distinct spare: the pool's names are all gone.
	waitIdle(t, m)
	for _, d := range templateSpares(t, f, m, "app") {
		for _, old := range sps {
			if d.Name == old.Name {
				t.Fatalf("spare %s still there after 4 forks renamed the 4 spares", d.Name)
			}
		}
	}

	burstForks(t, m, "c", 6) // beyond MaxSpares
	waitIdle(t, m)
	if n := len(templateSpares(t, f, m, "app")); n != 4 {
		t.Fatalf("after a burst of 6: %d template spares, want MaxSpares 4", n)
	}

	// Demand forgotten, spares old: the next refill trims to one.
	m.spareMu.Lock()
	clear(m.spares.arrivals)
	m.spareMu.Unlock()
	mustOK(t, m.withLocks(ctx, nil, func(conn *pgx.Conn) error {
		for _, d := range templateSpares(t, f, m, "app") {
			md := *d.Meta
			md.Created = time.Now().Add(-demandMemory - time.Minute).UTC()
			if err := m.run(ctx, conn, commentSQL(d.Name, md)); err != nil {
				return err
			}
		}
		return nil
	}))
	m.scheduleTemplateSpare(m.names.repoHash("app"))
	waitIdle(t, m)
	if n := len(templateSpares(t, f, m, "app")); n != 1 {
		t.Fatalf("after demand faded: %d template spares, want 1", n)
	}

	// Grow again, then Close drops all but one.
	burstForks(t, m, "d", 3)
	waitIdle(t, m)
	if n := len(templateSpares(t, f, m, "app")); n != 3 {
		t.Fatalf("after a burst of 3: %d template spares, want 3", n)
	}
	m.Close()
	m2, err := New(ctx, Config{AdminURL: testURL(), Prefix: f.prefix, Secret: []byte("test secret"), Warm: true})
	mustOK(t, err)
	defer m2.Close()
	if n := len(templateSpares(t, f, m2, "app")); n != 1 {
		t.Fatalf("after Close: %d template spares, want 1", n)
	}
	waitIdle(t, m2)
	mustOK(t, m2.DropRepo(ctx, "app"))
	var left int
	mustOK(t, f.admin.QueryRow(ctx, "SELECT count(*) FROM pg_database WHERE starts_with(datname, $1)", f.prefix+"_").Scan(&left))
	if left != 0 {
		t.Fatalf("after DropRepo: %d databases of the prefix left", left)
	}
}
