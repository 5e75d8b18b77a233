package web_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/repositories"
	"github.com/lockstep-hq/lockstep/sqlstore"
	"github.com/lockstep-hq/lockstep/web"
)

// claimCounter is the real store, counting the held-claim path's
// up-front claims (a separate write transaction before the handler).
type claimCounter struct {
	lockstep.Store
	claims atomic.Int32
	reads  atomic.Int32
}

func (c *claimCounter) IdemByKey(ctx context.Context, owner, key string) (*lockstep.IdemRecord, error) {
	c.reads.Add(1)
	return c.Store.IdemByKey(ctx, owner, key)
}

func (c *claimCounter) ClaimIdem(ctx context.Context, rec *lockstep.IdemRecord) (*lockstep.IdemRecord, error) {
	c.claims.Add(1)
	return c.Store.ClaimIdem(ctx, rec)
}

// TestKeyedPreflightClaimsInItsEntry: a preflight (single or batch) with
// an Idempotency-Key is one metadata transaction: the key is claimed and
// its answer stored in the transaction of the read-only oplog entry, not
// claimed up front (a write of its own) and stored after (another). Its
// replay, its 422 on another body and a materialize's held claim are
// unchanged. A first keyed preflight reads no record before it runs
// (idemRunFirst): a repeat is answered from the record after its
// transaction found it.
func TestKeyedPreflightClaimsInItsEntry(t *testing.T) {
	ctx := context.Background()
	var store *claimCounter
	w := newSQLiteServer(t, func(db *sqlstore.DB) lockstep.Store { store = &claimCounter{Store: db}; return store })
	db, repos, wss, admin, secret, s := w.db, w.repos, w.wss, w.admin, w.secret, w.s
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)

	edit := func(repo, path, content string) {
		t.Helper()
		if _, err := repos.EditFiles(ctx, admin, repo, []repositories.Edit{{Path: path, Content: []byte(content)}}, repositories.WriteOptions{Branch: "main", Force: true}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := repos.CreateRepo(ctx, admin, "app", "main"); err != nil {
		t.Fatal(err)
	}
	edit("app", "a.txt", "1\n")
	if _, err := wss.Fork(ctx, admin, "app", "ws1", "t1"); err != nil {
		t.Fatal(err)
	}
	edit("ws1", "b.txt", "x\n")

	post := func(path, key, body string) (int, []byte, bool) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+path, bytes.NewBufferString(body))
		req.Header.Set("Authorization", "Bearer "+secret)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b, resp.Header.Get(web.IdempotentReplayedHeader) == "true"
	}
	entries := func(op, key string) int {
		t.Helper()
		ops, err := db.ListOps(ctx, lockstep.OpFilter{Op: op})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, e := range ops {
			if e.IdempotencyKey == key {
				n++
			}
		}
		return n
	}

	const pre = `{"theirs":"ws1:main","preflight":true,"deep":true}`
	st, first, replayed := post("/api/v1/repos/app/merges", "pf-1", pre)
	if st != http.StatusOK || replayed {
		t.Fatalf("preflight: %d replayed=%v %s", st, replayed, first)
	}
	if n := store.claims.Load(); n != 0 {
		t.Fatalf("a keyed preflight claimed its key up front (%d claims): want it claimed in its oplog entry's transaction", n)
	}
	if n := store.reads.Load(); n != 0 {
		t.Fatalf("a first keyed preflight read its key's record %d times: want none (idemRunFirst: the entry's upsert decides)", n)
	}
	if n := entries("merge.preflight", "pf-1"); n != 1 {
		t.Fatalf("entries of merge.preflight under the key: %d, want 1", n)
	}
	rec, err := db.IdemByKey(ctx, admin.ID, "pf-1")
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != lockstep.IdemDone || !bytes.Equal(rec.Body, first) {
		t.Fatalf("record: state %s body %s, want done with the answer %s", rec.State, rec.Body, first)
	}
	st, again, replayed := post("/api/v1/repos/app/merges", "pf-1", pre)
	if st != http.StatusOK || !replayed || !bytes.Equal(again, first) {
		t.Fatalf("repeat: %d replayed=%v %s, want the first answer replayed", st, replayed, again)
	}
	if n := entries("merge.preflight", "pf-1"); n != 1 {
		t.Fatalf("the repeat ran again: %d entries", n)
	}
	if st, b, _ := post("/api/v1/repos/app/merges", "pf-1", `{"theirs":"ws1:main","preflight":true}`); st != http.StatusUnprocessableEntity {
		t.Fatalf("same key, other body: %d %s, want 422", st, b)
	}

	// The batch too.
	const batch = `{"workspaces":["ws1"],"deep":true}`
	st, bfirst, _ := post("/api/v1/repos/app/merges/preflight", "pfb-1", batch)
	if st != http.StatusOK {
		t.Fatalf("batch: %d %s", st, bfirst)
	}
	if n := store.claims.Load(); n != 0 {
		t.Fatalf("a keyed batch preflight claimed its key up front (%d claims)", n)
	}
	reads := store.reads.Load()
	if st, b, _ := post("/api/v1/repos/app/merges/preflight", "pfb-2", batch); st != http.StatusOK {
		t.Fatalf("batch: %d %s", st, b)
	}
	if n := store.reads.Load() - reads; n != 0 {
		t.Fatalf("a first keyed batch preflight read its key's record %d times: want none", n)
	}
	st, bagain, replayed := post("/api/v1/repos/app/merges/preflight", "pfb-1", batch)
	if st != http.StatusOK || !replayed || !bytes.Equal(bagain, bfirst) {
		t.Fatalf("batch repeat: %d replayed=%v %s, want %s replayed", st, replayed, bagain, bfirst)
	}
	if n := entries("merge.preflight_batch", "pfb-1"); n != 1 {
		t.Fatalf("entries of merge.preflight_batch under the key: %d, want 1", n)
	}

	// A materialize keeps the held claim.
	if st, b, _ := post("/api/v1/repos/app/merges", "mat-1", `{"theirs":"ws1:main","materialize":true}`); st != http.StatusOK {
		t.Fatalf("materialize: %d %s", st, b)
	}
	if n := store.claims.Load(); n != 1 {
		t.Fatalf("materialize: %d claims, want 1 (held)", n)
	}
}
