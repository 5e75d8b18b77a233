package sqlstore_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/sqlstore"
)

// TestOplogAppendFailsMidway: an append whose statements fail after the
// entry's insert (its idempotency record is held by another request)
// leaves nothing of it visible: no entry, the head row where it was, no
// record; the next append links to the last committed entry.
func TestOplogAppendFailsMidway(t *testing.T) {
	backends(t, func(t *testing.T, open func() *sqlstore.DB) {
		ctx := context.Background()
		db := open()
		var last *lockstep.OpEntry
		for i := 0; i < 3; i++ {
			last = entry("x")
			if err := db.AppendOp(ctx, last); err != nil {
				t.Fatal(err)
			}
		}
		now := lockstep.TruncateTime(time.Now())
		held := &lockstep.IdemRecord{Owner: "key_test", Key: "k", Token: "holder", Fingerprint: "fp", Method: "POST",
			Path: "/api/v1/repos/app/merges", State: lockstep.IdemRunning, LeaseUntil: now.Add(time.Hour), CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
		if ex, err := db.ClaimIdem(ctx, held); err != nil || ex != nil {
			t.Fatalf("claim: %v %+v", err, ex)
		}
		c := &lockstep.IdemClaim{Owner: "key_test", Key: "k", Token: "other", Status: 200,
			Deferred: &lockstep.IdemRecord{Owner: "key_test", Key: "k", Fingerprint: "fp", Method: "POST",
				Path: "/api/v1/repos/app/merges", LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)}}
		e := entry("merge.preflight")
		e.ReadOnly = true
		e.Answer = map[string]any{"clean": true}
		if err := db.AppendOp(lockstep.WithIdemClaim(ctx, c), e); err == nil {
			t.Fatal("an append whose key another request holds committed")
		}
		if res, err := db.VerifyOps(ctx); err != nil || !res.OK || res.Entries != 3 {
			t.Fatalf("after the failed append: %v %+v", err, res)
		}
		var seq int64
		var hash string
		if err := db.SQL().QueryRow(`SELECT seq, hash FROM oplog_head WHERE id = 1`).Scan(&seq, &hash); err != nil || seq != 3 || hash != last.Hash {
			t.Fatalf("head after the failed append: %v %d %s, want 3 %s", err, seq, hash, last.Hash)
		}
		if ops, err := db.OpsByIdemKey(ctx, "key_test", "k"); err != nil || len(ops) != 0 {
			t.Fatalf("entries of the failed append: %v %d", err, len(ops))
		}
		if rec, err := db.IdemByKey(ctx, "key_test", "k"); err != nil || rec.Token != "holder" || rec.OpID != "" {
			t.Fatalf("record after the failed append: %v %+v", err, rec)
		}
		next := entry("y")
		if err := db.AppendOp(ctx, next); err != nil {
			t.Fatal(err)
		}
		if next.Seq != 4 || next.PrevHash != last.Hash {
			t.Fatalf("next append: seq %d prev %s, want 4 after %s", next.Seq, next.PrevHash, last.Hash)
		}
		if res, err := db.VerifyOps(ctx); err != nil || !res.OK || res.Entries != 4 {
			t.Fatalf("after the next append: %v %+v", err, res)
		}
	})
}

// TestIdemOpsUseIndex: the statements that find the entries of an
// Idempotency-Key (a replay's count, a take-over's check, the entries
// listed) search SQLite's partial index oplog_idem, not every entry of
// the API key through oplog_key.
func TestIdemOpsUseIndex(t *testing.T) {
	db := mustOpen(t, filepath.Join(t.TempDir(), "meta.db"))
	for _, q := range sqlstore.IdemOpsQueries {
		rows, err := db.SQL().Query(`EXPLAIN QUERY PLAN `+q, "key_test", "k")
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, notused int
			var detail string
			if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		if p := strings.Join(plan, "; "); !strings.Contains(p, "INDEX oplog_idem (key_id=? AND idem_key=?)") {
			t.Errorf("%s\nplan: %s, want a search of oplog_idem", q, p)
		}
	}
}
