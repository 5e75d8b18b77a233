package sqlstore_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/internal/testenv"
	"github.com/lockstep-hq/lockstep/sqlstore"
)

// proxiedPostgres opens a fresh Postgres store whose every connection runs
// through a turn proxy (testenv.TurnProxy).
func proxiedPostgres(t *testing.T) (*sqlstore.DB, *testenv.TurnProxy) {
	u, p := testenv.ProxiedPostgresDB(t)
	return mustOpen(t, u), p
}

// TestPostgresForkRoundTrips: a fork's transaction (the repository, its
// refs, the log entry, the head move, a one-transaction route's
// Idempotency-Key record) costs one round trip on PostgreSQL (two before
// the append computed the entry's hash itself; a fork of a base whose
// last fork it has not seen, two), and an appended entry with its key
// record one statement after the head read. Counted on the wire, on warm
// connections (statements prepared).
func TestPostgresForkRoundTrips(t *testing.T) {
	db, p := proxiedPostgres(t)
	ctx := context.Background()
	now := lockstep.TruncateTime(time.Now())
	if err := db.CreateKey(ctx, &lockstep.Key{ID: "key_rt", Name: "rt", Role: lockstep.RoleAgent, Prefix: "lsk_rtrtrtrt", Hash: []byte{1}, CreatedAt: now}, nil); err != nil {
		t.Fatal(err)
	}
	// One warm connection for the work (no dial counted), beside those
	// held since Open (the migrator's).
	n := db.SQL().Stats().InUse + 1
	db.SQL().SetMaxIdleConns(n)
	db.SQL().SetMaxOpenConns(n)
	fork := func(name string, claim *lockstep.IdemClaim) error {
		c := ctx
		if claim != nil {
			c = lockstep.WithIdemClaim(ctx, claim)
		}
		ws := &lockstep.Repo{Name: name, Network: "net", ForkOf: "app", DefaultBranch: "main"}
		refs := []lockstep.Ref{{Name: "refs/heads/main", OID: "1111111111111111111111111111111111111111"}, {Name: "refs/heads/dev", OID: "2222222222222222222222222222222222222222"}}
		e := &lockstep.OpEntry{KeyID: "key_rt", KeyName: "rt", Op: "fork", Repo: name, Answer: map[string]string{"name": name}}
		return db.CreateRepo(c, ws, refs, e)
	}
	claim := func(key string) *lockstep.IdemClaim {
		return &lockstep.IdemClaim{Owner: "key_rt", Key: key, Token: "tok-" + key, Status: 201,
			Deferred: &lockstep.IdemRecord{Owner: "key_rt", Key: key, Fingerprint: "fp", Method: "POST", Path: "/api/v1/repos/app/forks",
				LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)}}
	}
	for i := range 2 { // warm: statements prepared, key parent cached
		if err := fork(fmt.Sprintf("warm-%d", i), nil); err != nil {
			t.Fatal(err)
		}
		if err := fork(fmt.Sprintf("warmk-%d", i), claim(fmt.Sprintf("warm-%d", i))); err != nil {
			t.Fatal(err)
		}
		if err := db.AppendOp(lockstep.WithIdemClaim(ctx, claim(fmt.Sprintf("warma-%d", i))), &lockstep.OpEntry{KeyID: "key_rt", KeyName: "rt", Op: "rollback", Answer: map[string]string{"commit": "c"}}); err != nil {
			t.Fatal(err)
		}
	}

	count := func(what string, want int64, fn func() error) {
		t.Helper()
		before := p.Turns()
		if err := fn(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got := p.Turns() - before; got != want {
			t.Errorf("%s: %d round trips, want %d", what, got, want)
		}
	}
	count("fork", 1, func() error { return fork("ws-1", nil) })
	// ForkRepo: the base's row and refs are read and copied in the same
	// two round trips (before: a base read and a refs read besides).
	forkOf := func(name string, claim *lockstep.IdemClaim) error {
		c := ctx
		if claim != nil {
			c = lockstep.WithIdemClaim(ctx, claim)
		}
		e := &lockstep.OpEntry{KeyID: "key_rt", KeyName: "rt", Op: "fork", Repo: name}
		return db.ForkRepo(c, "base", &lockstep.Repo{Name: name}, 0, e, func(copied []lockstep.Ref) {
			e.Answer = map[string]string{"name": name, "refs": fmt.Sprint(len(copied))}
		})
	}
	for _, base := range []string{"base0", "base"} {
		if err := db.CreateRepo(ctx, &lockstep.Repo{Name: base, Network: base, DefaultBranch: "main"},
			[]lockstep.Ref{{Name: "refs/heads/main", OID: "1111111111111111111111111111111111111111"}, {Name: "refs/tags/v1", OID: "3333333333333333333333333333333333333333"}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 2 { // prepares the statements of both ways
		e := &lockstep.OpEntry{KeyID: "key_rt", KeyName: "rt", Op: "fork"}
		if err := db.ForkRepo(ctx, "base0", &lockstep.Repo{Name: fmt.Sprintf("warm0-%d", i)}, 0, e, nil); err != nil {
			t.Fatal(err)
		}
	}
	// The first fork of a base reads it (two round trips); the next ones
	// predict it from that fork and check the prediction in their one.
	count("first ForkRepo of a base", 2, func() error { return forkOf("warmf", claim("warm-f")) })
	count("ForkRepo", 1, func() error { return forkOf("ws-f1", nil) })
	count("ForkRepo with an Idempotency-Key", 1, func() error { return forkOf("ws-f2", claim("k-forkrepo")) })
	count("fork with an Idempotency-Key", 1, func() error { return fork("ws-2", claim("k-fork")) })
	// BEGIN, the head read, the append with its key record, COMMIT.
	count("keyed append", 4, func() error {
		return db.AppendOp(lockstep.WithIdemClaim(ctx, claim("k-append")), &lockstep.OpEntry{KeyID: "key_rt", KeyName: "rt", Op: "rollback", Answer: map[string]string{"commit": "c"}})
	})

	r, err := db.RepoByName(ctx, "ws-2")
	if err != nil {
		t.Fatal(err)
	}
	if refs, err := db.Refs(ctx, r.ID); err != nil || len(refs) != 2 {
		t.Fatalf("refs of ws-2: %v %+v", err, refs)
	}
	if rec, err := db.IdemByKey(ctx, "key_rt", "k-fork"); err != nil || rec.State != lockstep.IdemDone || string(rec.Body) != `{"name":"ws-2"}` || rec.OpID == "" {
		t.Fatalf("the fork's key record: %v %+v", err, rec)
	}
	if v, err := db.VerifyOps(ctx); err != nil || !v.OK {
		t.Fatalf("chain: %v %+v", err, v)
	}
}

// TestCreateRepoConcurrentForks: forks created at the same time (each
// with its refs and its entry, half of them under a one-transaction
// Idempotency-Key) all commit, each with its refs and key record, and
// the log stays one chain; a fork of a taken name and one whose key
// another request holds commit nothing (no repository, no entry) and
// leave the store usable.
func TestCreateRepoConcurrentForks(t *testing.T) {
	backends(t, func(t *testing.T, open func() *sqlstore.DB) {
		ctx := context.Background()
		db := open()
		now := lockstep.TruncateTime(time.Now())
		claim := func(key, token string) *lockstep.IdemClaim {
			return &lockstep.IdemClaim{Owner: "key_test", Key: key, Token: token, Status: 201,
				Deferred: &lockstep.IdemRecord{Owner: "key_test", Key: key, Fingerprint: "fp", Method: "POST", Path: "/api/v1/repos/app/forks",
					LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)}}
		}
		fork := func(c context.Context, name string) error {
			ws := &lockstep.Repo{Name: name, Network: "net", ForkOf: "app", DefaultBranch: "main"}
			refs := []lockstep.Ref{{Name: "refs/heads/main", OID: "1111111111111111111111111111111111111111"}, {Name: "refs/heads/x/" + name, OID: "2222222222222222222222222222222222222222"}}
			e := entry("fork")
			e.Repo = name
			e.Answer = map[string]string{"name": name}
			return db.CreateRepo(c, ws, refs, e)
		}
		var published atomic.Int64 // OnOp: every committed fork, once
		db.OnOp(func(e lockstep.OpEntry) {
			if e.Op == "fork" {
				published.Add(1)
			}
		})
		const n = 24
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := ctx
				if i%2 == 1 {
					c = lockstep.WithIdemClaim(ctx, claim(fmt.Sprintf("k-%d", i), "t"))
				}
				errs[i] = fork(c, fmt.Sprintf("ws-%02d", i))
			}()
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("fork %d: %v", i, err)
			}
		}
		for i := range n {
			name := fmt.Sprintf("ws-%02d", i)
			r, err := db.RepoByName(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			if refs, err := db.Refs(ctx, r.ID); err != nil || len(refs) != 2 {
				t.Fatalf("refs of %s: %v %+v", name, err, refs)
			}
			if i%2 == 1 {
				if rec, err := db.IdemByKey(ctx, "key_test", fmt.Sprintf("k-%d", i)); err != nil || rec.State != lockstep.IdemDone || rec.OpID == "" {
					t.Fatalf("key record of %s: %v %+v", name, err, rec)
				}
			}
		}
		if got := published.Load(); got != n {
			t.Fatalf("OnOp saw %d forks, want %d", got, n)
		}
		v, err := db.VerifyOps(ctx)
		if err != nil || !v.OK || v.Entries != n {
			t.Fatalf("chain after %d concurrent forks: %v %+v", n, err, v)
		}

		// A taken name: already exists, nothing appended.
		if err := fork(ctx, "ws-00"); lockstep.ErrorCode(err) != lockstep.ECONFLICT {
			t.Fatalf("fork of a taken name: %v, want already_exists", err)
		}
		// A key another request committed: the claim is lost, the
		// repository and its entry roll back.
		lost := claim("k-1", "other")
		if err := fork(lockstep.WithIdemClaim(ctx, lost), "ws-lost"); lockstep.ErrorCode(err) != lockstep.EINPROGRESS || !lost.Lost() {
			t.Fatalf("fork under a key held by another request: %v (lost %v), want in_progress and lost", err, lost.Lost())
		}
		if _, err := db.RepoByName(ctx, "ws-lost"); lockstep.ErrorCode(err) != lockstep.ENOTFOUND {
			t.Fatalf("the lost fork's repository: %v, want not_found", err)
		}
		// The store still works (no connection left in a transaction).
		for i := range 3 {
			if err := fork(ctx, fmt.Sprintf("after-%d", i)); err != nil {
				t.Fatal(err)
			}
		}
		if got := published.Load(); got != n+3 {
			t.Fatalf("OnOp saw %d forks, want %d (nothing for the refused ones)", got, n+3)
		}
		if v, err := db.VerifyOps(ctx); err != nil || !v.OK || v.Entries != n+3 {
			t.Fatalf("chain at the end: %v %+v", err, v)
		}
	})
}

// BenchmarkPostgresStoreFork: the store's part of a fork on PostgreSQL
// (CreateRepo with two refs and an entry under a one-transaction
// Idempotency-Key), interleaved with the floor, a one-row
// `BEGIN; INSERT; COMMIT` sent in one round trip on the same server, and
// with an appended entry without and with a key (a rollback's commit).
// Metrics: medians in ms.
//
//	go test -tags lockstep_server -run XXX -bench PostgresStoreFork -benchtime 300x ./sqlstore/
func BenchmarkPostgresStoreFork(b *testing.B) {
	ctx := context.Background()
	db := mustOpen(b, testenv.MustPostgresDB(b))
	now := lockstep.TruncateTime(time.Now())
	if err := db.CreateKey(ctx, &lockstep.Key{ID: "key_bf", Name: "bf", Role: lockstep.RoleAgent, Prefix: "lsk_bfbfbfbf", Hash: []byte{1}, CreatedAt: now}, nil); err != nil {
		b.Fatal(err)
	}
	if _, err := db.SQL().ExecContext(ctx, `CREATE TABLE bench_floor (id BIGSERIAL PRIMARY KEY, v INT NOT NULL)`); err != nil {
		b.Fatal(err)
	}
	claim := func(key string) context.Context {
		return lockstep.WithIdemClaim(ctx, &lockstep.IdemClaim{Owner: "key_bf", Key: key, Token: "tok-" + key, Status: 201,
			Deferred: &lockstep.IdemRecord{Owner: "key_bf", Key: key, Fingerprint: "fp", Method: "POST", Path: "/x",
				LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)}})
	}
	refs := []lockstep.Ref{{Name: "refs/heads/main", OID: "1111111111111111111111111111111111111111"}}
	var forks, floors, plain, keyed []time.Duration
	i := 0
	for b.Loop() {
		name := fmt.Sprintf("ws-%07d", i)
		t0 := time.Now()
		if err := db.CreateRepo(claim("f-"+name), &lockstep.Repo{Name: name, Network: "n", ForkOf: "app", DefaultBranch: "main"}, refs,
			&lockstep.OpEntry{KeyID: "key_bf", KeyName: "bf", Op: "fork", Repo: name, Answer: map[string]string{"name": name}}); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := db.SQL().ExecContext(ctx, `BEGIN; INSERT INTO bench_floor (v) VALUES (1); COMMIT`); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		if err := db.AppendOp(ctx, &lockstep.OpEntry{KeyID: "key_bf", KeyName: "bf", Op: "rollback", Answer: map[string]string{"c": "1"}}); err != nil {
			b.Fatal(err)
		}
		t3 := time.Now()
		if err := db.AppendOp(claim("a-"+name), &lockstep.OpEntry{KeyID: "key_bf", KeyName: "bf", Op: "rollback", Answer: map[string]string{"c": "1"}}); err != nil {
			b.Fatal(err)
		}
		t4 := time.Now()
		forks, floors, plain, keyed = append(forks, t1.Sub(t0)), append(floors, t2.Sub(t1)), append(plain, t3.Sub(t2)), append(keyed, t4.Sub(t3))
		i++
	}
	med := func(d []time.Duration) float64 {
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		return float64(d[len(d)/2].Microseconds()) / 1000
	}
	b.ReportMetric(med(forks), "ms/fork")
	b.ReportMetric(med(floors), "ms/floor-commit")
	b.ReportMetric(med(plain), "ms/append")
	b.ReportMetric(med(keyed), "ms/keyed-append")
	b.ReportMetric(0, "ns/op")
}

// TestPostgresPackRoundTrips: registering a pack (in the bucket or
// inline, new or already registered) is one round trip on PostgreSQL
// (was four: BEGIN, the insert, the generation bump, COMMIT), and a
// catch-up's read of the changes is one. Counted on the wire, on a warm
// connection.
func TestPostgresPackRoundTrips(t *testing.T) {
	db, p := proxiedPostgres(t)
	ctx := context.Background()
	n := db.SQL().Stats().InUse + 1
	db.SQL().SetMaxIdleConns(n)
	db.SQL().SetMaxOpenConns(n)
	oidN := func(i int) string { return fmt.Sprintf("%040x", i) }
	rec := func(i int) lockstep.PackRecord {
		return lockstep.PackRecord{Network: "net", Hash: oidN(i), PackBytes: 4, IdxBytes: 3, Objects: 1}
	}
	pack, idx := []byte("pack"), []byte("idx")
	for i := 1; i <= 2; i++ { // warm: statements prepared
		if _, err := db.RegisterPack(ctx, rec(i)); err != nil {
			t.Fatal(err)
		}
		if _, err := db.RegisterInlinePack(ctx, rec(10+i), pack, idx); err != nil {
			t.Fatal(err)
		}
		if _, _, err := db.PackChanges(ctx, "net", 0); err != nil {
			t.Fatal(err)
		}
	}
	count := func(what string, wantGen int64, fn func() (int64, error)) {
		t.Helper()
		before := p.Turns()
		g, err := fn()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got := p.Turns() - before; got != 1 {
			t.Errorf("%s: %d round trips, want 1", what, got)
		}
		if g != wantGen {
			t.Errorf("%s: generation %d, want %d", what, g, wantGen)
		}
	}
	count("RegisterPack", 5, func() (int64, error) { return db.RegisterPack(ctx, rec(3)) })
	count("RegisterInlinePack", 6, func() (int64, error) { return db.RegisterInlinePack(ctx, rec(13), pack, idx) })
	count("RegisterPack of a registered pack", 6, func() (int64, error) { return db.RegisterPack(ctx, rec(1)) })
	count("RegisterInlinePack of a registered pack", 6, func() (int64, error) { return db.RegisterInlinePack(ctx, rec(13), pack, idx) })
	count("PackChanges", 6, func() (int64, error) {
		cs, g, err := db.PackChanges(ctx, "net", 4)
		if err == nil && (len(cs) != 2 || cs[0].Hash != oidN(3) || cs[1].Hash != oidN(13) || string(cs[1].Pack) != "pack" || string(cs[1].Idx) != "idx") {
			err = fmt.Errorf("changes since 4: %+v, want packs 3 and 13 (with its bytes)", cs)
		}
		return g, err
	})
}
