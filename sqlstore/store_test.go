package sqlstore_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/internal/testenv"
	"github.com/lockstep-hq/lockstep/sqlstore"
)

// backends runs fn once per implementation: the contract suite.
func backends(t *testing.T, fn func(t *testing.T, open func() *sqlstore.DB)) {
	t.Run("sqlite", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "meta.db")
		fn(t, func() *sqlstore.DB { return mustOpen(t, path) })
	})
	t.Run("postgres", func(t *testing.T) {
		url := testenv.MustPostgresDB(t)
		fn(t, func() *sqlstore.DB { return mustOpen(t, url) })
	})
}

// Backends returns the URL of a fresh store of each implementation.
func backendURLs(t *testing.T) map[string]string {
	return map[string]string{
		"sqlite":   filepath.Join(t.TempDir(), "meta.db"),
		"postgres": testenv.MustPostgresDB(t),
	}
}

func mustOpen(tb testing.TB, url string) *sqlstore.DB {
	tb.Helper()
	db, err := sqlstore.Open(context.Background(), url, sqlstore.Options{Migrate: true})
	if err != nil {
		tb.Fatalf("open %s: %v", url, err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}

func entry(op string) *lockstep.OpEntry {
	return &lockstep.OpEntry{KeyID: "key_test", KeyName: "test", Op: op}
}

func TestKeys(t *testing.T) {
	backends(t, func(t *testing.T, open func() *sqlstore.DB) {
		ctx := context.Background()
		db := open()
		now := lockstep.TruncateTime(time.Now())
		k := &lockstep.Key{ID: "key_a", Name: "alice", Role: lockstep.RoleAgent, Prefix: "lsk_aaaaaaaa", Hash: []byte{1, 2, 3}, CreatedAt: now}
		if err := db.CreateKey(ctx, k, entry("key.create")); err != nil {
			t.Fatal(err)
		}
		dup := *k
		dup.ID = "key_b"
		if err := db.CreateKey(ctx, &dup, entry("key.create")); lockstep.ErrorCode(err) != lockstep.ECONFLICT {
			t.Fatalf("duplicate prefix: got %v, want already_exists", err)
		}
		got, err := db.KeyByPrefix(ctx, "lsk_aaaaaaaa")
		if err != nil {
			t.Fatal(err)
		}
		if got.Name != "alice" || string(got.Hash) != string(k.Hash) || !got.CreatedAt.Equal(now) || got.RevokedAt != nil {
			t.Fatalf("round trip: %+v", got)
		}
		if _, err := db.KeyByPrefix(ctx, "lsk_nope"); lockstep.ErrorCode(err) != lockstep.ENOTFOUND {
			t.Fatalf("unknown prefix: %v", err)
		}
		if n, _ := db.CountKeys(ctx); n != 1 {
			t.Fatalf("count = %d", n)
		}
		if err := db.TouchKey(ctx, k.ID, now.Add(time.Second)); err != nil {
			t.Fatal(err)
		}
		if err := db.RevokeKey(ctx, k.ID, now.Add(2*time.Second), entry("key.revoke")); err != nil {
			t.Fatal(err)
		}
		if err := db.RevokeKey(ctx, "key_missing", now, entry("key.revoke")); lockstep.ErrorCode(err) != lockstep.ENOTFOUND {
			t.Fatalf("revoke unknown: %v", err)
		}
		got, _ = db.KeyByPrefix(ctx, "lsk_aaaaaaaa")
		if got.RevokedAt == nil || !got.RevokedAt.Equal(now.Add(2*time.Second)) || got.LastUsedAt == nil {
			t.Fatalf("after revoke: %+v", got)
		}
		if n, _ := db.CountKeys(ctx); n != 0 {
			t.Fatalf("count after revoke = %d", n)
		}
		// Survives a reopen.
		db.Close()
		db2 := open()
		keys, err := db2.ListKeys(ctx)
		if err != nil || len(keys) != 1 || keys[0].ID != "key_a" {
			t.Fatalf("after reopen: %v %v", keys, err)
		}
		ops, _ := db2.ListOps(ctx, lockstep.OpFilter{})
		if len(ops) != 2 || ops[0].Op != "key.create" || ops[1].Op != "key.revoke" {
			t.Fatalf("ops after reopen: %v", ops)
		}
	})
}

func TestOplogChain(t *testing.T) {
	backends(t, func(t *testing.T, open func() *sqlstore.DB) {
		ctx := context.Background()
		db := open()
		for i := 0; i < 5; i++ {
			e := entry("test.op")
			e.Repo = fmt.Sprintf("r%d", i%2)
			e.Refs = []lockstep.RefMove{{Repo: e.Repo, Ref: "refs/heads/main", Old: lockstep.ZeroOID, New: fmt.Sprintf("%040d", i)}}
			e.Details = map[string]any{"n": i, "nested": map[string]any{"z": 1, "a": "x"}}
			if err := db.AppendOp(ctx, e); err != nil {
				t.Fatal(err)
			}
			if e.Seq != int64(i+1) || e.Hash == "" {
				t.Fatalf("entry %d: seq %d hash %q", i, e.Seq, e.Hash)
			}
		}
		res, err := db.VerifyOps(ctx)
		if err != nil || !res.OK || res.Entries != 5 {
			t.Fatalf("verify: %+v %v", res, err)
		}
		page, _ := db.ListOps(ctx, lockstep.OpFilter{Repo: "r1"})
		if len(page) != 2 || page[0].Seq != 2 || page[1].Seq != 4 {
			t.Fatalf("filter by repo: %+v", page)
		}
		page, _ = db.ListOps(ctx, lockstep.OpFilter{After: 3, Limit: 1})
		if len(page) != 1 || page[0].Seq != 4 {
			t.Fatalf("paging: %+v", page)
		}

		// Tamper with one row: verify names it.
		if _, err := db.SQL().ExecContext(ctx, `UPDATE oplog SET result = 'forged' WHERE seq = 3`); err != nil {
			t.Fatal(err)
		}
		res, _ = db.VerifyOps(ctx)
		if res.OK || res.FirstBad == nil || *res.FirstBad != 3 {
			t.Fatalf("tampered result: %+v", res)
		}
		// Tamper with the details JSON of another row, re-hashing it: the
		// next link breaks.
		if _, err := db.SQL().ExecContext(ctx, `UPDATE oplog SET result = 'ok' WHERE seq = 3`); err != nil {
			t.Fatal(err)
		}
		if res, _ = db.VerifyOps(ctx); !res.OK {
			t.Fatalf("restored row should verify: %+v", res)
		}
		if _, err := db.SQL().ExecContext(ctx, `UPDATE oplog SET hash = 'x', details = '{"n":9}' WHERE seq = 2`); err != nil {
			t.Fatal(err)
		}
		res, _ = db.VerifyOps(ctx)
		if res.OK || *res.FirstBad != 2 {
			t.Fatalf("tampered details: %+v", res)
		}
		// Deleting the last entry is caught by the head row.
		db.SQL().ExecContext(ctx, `UPDATE oplog SET hash = (SELECT hash FROM oplog WHERE seq = 2), details = '{}' WHERE seq = 2`)
	})
}

func TestOplogTruncationDetected(t *testing.T) {
	backends(t, func(t *testing.T, open func() *sqlstore.DB) {
		ctx := context.Background()
		db := open()
		for i := 0; i < 3; i++ {
			if err := db.AppendOp(ctx, entry("x")); err != nil {
				t.Fatal(err)
			}
		}
		db.SQL().ExecContext(ctx, `DELETE FROM oplog WHERE seq = 3`)
		res, _ := db.VerifyOps(ctx)
		if res.OK || res.FirstBad == nil || *res.FirstBad != 3 {
			t.Fatalf("truncated chain: %+v", res)
		}
	})
}

func TestOplogConcurrentAppendsFormOneChain(t *testing.T) {
	backends(t, func(t *testing.T, open func() *sqlstore.DB) {
		ctx := context.Background()
		db := open()
		var wg sync.WaitGroup
		errs := make(chan error, 200)
		for i := 0; i < 200; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				e := entry("concurrent")
				e.Details = map[string]any{"i": i}
				errs <- db.AppendOp(ctx, e)
			}(i)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		res, err := db.VerifyOps(ctx)
		if err != nil || !res.OK || res.Entries != 200 {
			t.Fatalf("verify after 200 concurrent appends: %+v %v", res, err)
		}
	})
}

func TestRefsCompareAndSwap(t *testing.T) {
	backends(t, func(t *testing.T, open func() *sqlstore.DB) {
		ctx := context.Background()
		db := open()
		r := &lockstep.Repo{Name: "base", Network: "base", DefaultBranch: "main"}
		if err := db.CreateRepo(ctx, r, nil, entry("repo.create")); err != nil {
			t.Fatal(err)
		}
		if err := db.CreateRepo(ctx, &lockstep.Repo{Name: "base", Network: "base", DefaultBranch: "main"}, nil, entry("repo.create")); lockstep.ErrorCode(err) != lockstep.ECONFLICT {
			t.Fatalf("duplicate repo: %v", err)
		}
		a, b := fmt.Sprintf("%040x", 1), fmt.Sprintf("%040x", 2)
		up := func(old, new string) error {
			return db.UpdateRefs(ctx, []lockstep.RefUpdate{{RepoID: r.ID, Repo: r.Name, Name: "refs/heads/main", Old: old, New: new}}, nil, nil, entry("push"))
		}
		if err := up(lockstep.ZeroOID, a); err != nil {
			t.Fatal(err)
		}
		err := up(lockstep.ZeroOID, b)
		if lockstep.ErrorCode(err) != lockstep.EREFCONFLICT || lockstep.ErrorDetails(err)["actual"] != a {
			t.Fatalf("create over existing: %v %v", err, lockstep.ErrorDetails(err))
		}
		if err := up(b, a); lockstep.ErrorCode(err) != lockstep.EREFCONFLICT {
			t.Fatalf("stale old: %v", err)
		}
		if err := up(a, b); err != nil {
			t.Fatal(err)
		}
		ref, _ := db.Ref(ctx, r.ID, "refs/heads/main")
		if ref.OID != b {
			t.Fatalf("ref = %s", ref.OID)
		}
		// A failed CAS appends nothing.
		ops, _ := db.ListOps(ctx, lockstep.OpFilter{Op: "push"})
		if len(ops) != 2 {
			t.Fatalf("push entries = %d, want 2", len(ops))
		}
		// Atomic multi-ref: one stale update rolls back the other.
		err = db.UpdateRefs(ctx, []lockstep.RefUpdate{
			{RepoID: r.ID, Repo: r.Name, Name: "refs/heads/x", Old: lockstep.ZeroOID, New: a},
			{RepoID: r.ID, Repo: r.Name, Name: "refs/heads/main", Old: a, New: a},
		}, nil, nil, entry("push"))
		if lockstep.ErrorCode(err) != lockstep.EREFCONFLICT {
			t.Fatalf("multi: %v", err)
		}
		if _, err := db.Ref(ctx, r.ID, "refs/heads/x"); lockstep.ErrorCode(err) != lockstep.ENOTFOUND {
			t.Fatalf("partial multi-ref update leaked: %v", err)
		}
		// Delete by CAS.
		if err := up(b, lockstep.ZeroOID); err != nil {
			t.Fatal(err)
		}
		refs, _ := db.Refs(ctx, r.ID)
		if len(refs) != 0 {
			t.Fatalf("refs after delete: %v", refs)
		}
	})
}

func TestRefsConcurrentCAS(t *testing.T) {
	backends(t, func(t *testing.T, open func() *sqlstore.DB) {
		ctx := context.Background()
		db := open()
		r := &lockstep.Repo{Name: "w", Network: "w", DefaultBranch: "main"}
		start := fmt.Sprintf("%040x", 0xabc)
		if err := db.CreateRepo(ctx, r, []lockstep.Ref{{Name: "refs/heads/main", OID: start}}, entry("repo.create")); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		results := make(chan error, 16)
		for i := 0; i < 16; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				results <- db.UpdateRefs(ctx, []lockstep.RefUpdate{{RepoID: r.ID, Repo: r.Name, Name: "refs/heads/main", Old: start, New: fmt.Sprintf("%040x", i+1)}},
					[]lockstep.AttemptRecord{{RepoID: r.ID, Attempt: lockstep.Attempt{Commit: fmt.Sprintf("%040x", i+1), Branch: "main", Op: "push"}}}, nil, entry("push"))
			}(i)
		}
		wg.Wait()
		close(results)
		wins := 0
		for err := range results {
			switch lockstep.ErrorCode(err) {
			case "":
				wins++
			case lockstep.EREFCONFLICT:
			default:
				t.Fatalf("unexpected: %v", err)
			}
		}
		if wins != 1 {
			t.Fatalf("%d winners, want exactly 1", wins)
		}
		att, _ := db.Attempts(ctx, r.ID, 0)
		ref, _ := db.Ref(ctx, r.ID, "refs/heads/main")
		if len(att) != 1 || att[0].Commit != ref.OID {
			t.Fatalf("attempts %v, ref %s", att, ref.OID)
		}
	})
}

func TestReposAndStatus(t *testing.T) {
	backends(t, func(t *testing.T, open func() *sqlstore.DB) {
		ctx := context.Background()
		db := open()
		base := &lockstep.Repo{Name: "base", Network: "base", DefaultBranch: "main"}
		db.CreateRepo(ctx, base, nil, entry("repo.create"))
		ws := &lockstep.Repo{Name: "ws-1", Network: "base", ForkOf: "base", DefaultBranch: "main", OwnerKeyID: "k1", OwnerName: "agent"}
		if err := db.CreateRepo(ctx, ws, []lockstep.Ref{{Name: "refs/heads/main", OID: fmt.Sprintf("%040x", 5)}}, entry("fork")); err != nil {
			t.Fatal(err)
		}
		forks, _ := db.ListRepos(ctx, lockstep.RepoFilter{ForkOf: "base"})
		if len(forks) != 1 || forks[0].Name != "ws-1" || forks[0].Status != lockstep.StatusActive || forks[0].OwnerName != "agent" {
			t.Fatalf("forks: %+v", forks)
		}
		if err := db.SetRepoStatus(ctx, lockstep.StatusChange{RepoID: ws.ID, Repo: ws.Name, From: lockstep.StatusActive, To: lockstep.StatusFailed, Entry: entry("workspace.failed")}); err != nil {
			t.Fatal(err)
		}
		got, _ := db.RepoByName(ctx, "ws-1")
		if got.Status != lockstep.StatusFailed {
			t.Fatalf("status %s", got.Status)
		}
		all, _ := db.AllRefs(ctx)
		if len(all["ws-1"]) != 1 || len(all["base"]) != 0 {
			t.Fatalf("all refs: %v", all)
		}
		if _, err := db.RepoByName(ctx, "nope"); lockstep.ErrorCode(err) != lockstep.ENOTFOUND {
			t.Fatalf("unknown repo: %v", err)
		}
	})
}

func TestNewerSchemaIsAClearError(t *testing.T) {
	for name, url := range backendURLs(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			db := mustOpen(t, url)
			if _, err := db.SQL().ExecContext(ctx, `UPDATE schema_migrations SET version = 9999`); err != nil {
				t.Fatal(err)
			}
			db.Close()
			_, err := sqlstore.Open(ctx, url, sqlstore.Options{Migrate: true})
			if err == nil || !strings.Contains(err.Error(), "newer than this lockstep binary") {
				t.Fatalf("want a clear newer-schema error, got %v", err)
			}
		})
	}
}
