package sqlstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/sqlstore"
)

// TestIdempotencyRecords: the claim, the record committed in the entry's
// own transaction with the answer its entry carries, fencing of a taken-over claim,
// take-over refused once something committed, replays outside the hash
// chain, and the cleanup.
func TestIdempotencyRecords(t *testing.T) {
	backends(t, func(t *testing.T, open func() *sqlstore.DB) {
		ctx := context.Background()
		db := open()
		now := time.Now()
		rec := func(key, token, fp string, lease time.Duration) *lockstep.IdemRecord {
			return &lockstep.IdemRecord{Owner: "key_test", Key: key, Fingerprint: fp, Method: "PUT", Path: "/x",
				Token: token, LeaseUntil: now.Add(lease), ExpiresAt: now.Add(time.Hour)}
		}
		if cur, err := db.ClaimIdem(ctx, rec("k1", "t1", "fp", time.Minute)); err != nil || cur != nil {
			t.Fatalf("first claim: %v, %+v", err, cur)
		}
		cur, err := db.ClaimIdem(ctx, rec("k1", "t2", "fp2", time.Minute))
		if err != nil || cur == nil || cur.Token != "t1" || cur.Fingerprint != "fp" || cur.State != lockstep.IdemRunning {
			t.Fatalf("second claim: %v, %+v", err, cur)
		}
		if ok, err := db.TakeOverIdem(ctx, "key_test", "k1", "t1", "t2", now.Add(time.Minute)); err != nil || ok {
			t.Fatalf("take-over of a live claim: %v %v", ok, err)
		}

		// An entry appended under the claim commits the record with the
		// staged answer.
		claim := &lockstep.IdemClaim{Owner: "key_test", Key: "k1", Token: "t1", Status: 201}
		cctx := lockstep.WithIdemClaim(ctx, claim)
		if err := db.AppendOp(cctx, answering(entry("push"), `{"commit":"abc"}`)); err != nil {
			t.Fatal(err)
		}
		r, err := db.IdemByKey(ctx, "key_test", "k1")
		if err != nil || r.State != lockstep.IdemCommitted || r.Status != 201 || string(r.Body) != `{"commit":"abc"}` || r.OpID == "" {
			t.Fatalf("after the commit: %v %+v", err, r)
		}
		ops, err := db.OpsByIdemKey(ctx, "key_test", "k1")
		if err != nil || len(ops) != 1 || ops[0].IdempotencyKey != "k1" || ops[0].ID != r.OpID {
			t.Fatalf("entries under k1: %v %+v", err, ops)
		}

		// A claim whose token changed cannot commit (fencing).
		stale := &lockstep.IdemClaim{Owner: "key_test", Key: "k1", Token: "not-ours"}
		err = db.AppendOp(lockstep.WithIdemClaim(ctx, stale), entry("push"))
		if lockstep.ErrorCode(err) != lockstep.EINPROGRESS {
			t.Fatalf("commit under a lost claim: %v, want in_progress", err)
		}
		if ops, _ := db.OpsByIdemKey(ctx, "key_test", "k1"); len(ops) != 1 {
			t.Fatalf("the refused commit left %d entries", len(ops))
		}

		// A dead claim with nothing committed is taken over; one under
		// which something committed is not.
		db.ClaimIdem(ctx, rec("k2", "t1", "fp", -time.Second))
		if ok, err := db.TakeOverIdem(ctx, "key_test", "k2", "t1", "t9", now.Add(time.Minute)); err != nil || !ok {
			t.Fatalf("take-over of a dead, empty claim: %v %v", ok, err)
		}
		db.ClaimIdem(ctx, rec("k3", "t1", "fp", time.Minute))
		c3 := &lockstep.IdemClaim{Owner: "key_test", Key: "k3", Token: "t1"}
		if err := db.AppendOp(lockstep.WithIdemClaim(ctx, c3), entry("push")); err != nil {
			t.Fatal(err)
		}
		db.SQL().ExecContext(ctx, `UPDATE idempotency_keys SET state = 'running', lease_until = 0 WHERE idem_key = 'k3'`)
		if ok, err := db.TakeOverIdem(ctx, "key_test", "k3", "t1", "t9", now.Add(time.Minute)); err != nil || ok {
			t.Fatalf("take-over although an entry carries the key: %v %v", ok, err)
		}

		// Replays are counted outside the hash chain.
		if err := db.FinishIdem(ctx, "key_test", "k1", "t1", 201, nil, []byte(`{"commit":"abc","duration_ms":1}`)); err != nil {
			t.Fatal(err)
		}
		if err := db.CountIdemReplay(ctx, "key_test", "k1"); err != nil {
			t.Fatal(err)
		}
		ops, _ = db.OpsByIdemKey(ctx, "key_test", "k1")
		if ops[0].Replays != 1 {
			t.Errorf("replays %d, want 1", ops[0].Replays)
		}
		if v, err := db.VerifyOps(ctx); err != nil || !v.OK {
			t.Fatalf("chain after a replay: %v %+v", err, v)
		}

		// Cleanup: expired records go, a live running claim stays.
		if n, err := db.PurgeIdem(ctx, now.Add(2*time.Hour)); err != nil || n < 3 {
			t.Fatalf("purge: %d %v", n, err)
		}
		if _, err := db.IdemByKey(ctx, "key_test", "k1"); lockstep.ErrorCode(err) != lockstep.ENOTFOUND {
			t.Fatalf("k1 after the purge: %v", err)
		}
	})
}

// TestIdempotencyClaimAtCommit: a deferred claim (a one-transaction route,
// docs/idempotency.md) is inserted by the effect's own transaction, as
// done with a staged success and committed with a refusal; a later
// commit of the same request updates it; an expired record is replaced;
// a key held by another request (committed, or a live running claim)
// makes the transaction fail and marks the claim lost, leaving no entry.
func TestIdempotencyClaimAtCommit(t *testing.T) {
	backends(t, func(t *testing.T, open func() *sqlstore.DB) {
		ctx := context.Background()
		db := open()
		now := time.Now()
		deferred := func(key, token, fp string) *lockstep.IdemClaim {
			return &lockstep.IdemClaim{Owner: "key_test", Key: key, Token: token, Status: 201,
				Deferred: &lockstep.IdemRecord{Owner: "key_test", Key: key, Fingerprint: fp, Method: "PUT", Path: "/x",
					LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)}}
		}
		entries := func(key string) int {
			ops, err := db.OpsByIdemKey(ctx, "key_test", key)
			if err != nil {
				t.Fatal(err)
			}
			return len(ops)
		}

		if _, err := db.IdemByKey(ctx, "key_test", "d1"); lockstep.ErrorCode(err) != lockstep.ENOTFOUND {
			t.Fatalf("before the commit: %v, want not_found", err)
		}
		c1 := deferred("d1", "t1", "fp")
		cctx := lockstep.WithIdemClaim(ctx, c1)
		if err := db.AppendOp(cctx, answering(entry("push"), `{"commit":"abc"}`)); err != nil {
			t.Fatal(err)
		}
		r, err := db.IdemByKey(ctx, "key_test", "d1")
		if err != nil || r.State != lockstep.IdemDone || r.Status != 201 || string(r.Body) != `{"commit":"abc"}` ||
			r.Token != "t1" || r.Fingerprint != "fp" || r.OpID == "" || r.Header["Content-Type"] != "application/json; charset=utf-8" {
			t.Fatalf("after the commit: %v %+v", err, r)
		}
		if cs := c1.Commits(); len(cs) != 1 || cs[0].State != lockstep.IdemDone || string(cs[0].Body) != `{"commit":"abc"}` || c1.Lost() {
			t.Fatalf("commits noted: %+v lost %v", cs, c1.Lost())
		}
		firstOp := r.OpID

		// A second commit of the same request updates its own record.
		if err := db.AppendOp(cctx, answering(entry("push"), `{"commit":"def"}`)); err != nil {
			t.Fatal(err)
		}
		r, _ = db.IdemByKey(ctx, "key_test", "d1")
		if string(r.Body) != `{"commit":"def"}` || r.OpID != firstOp || len(c1.Commits()) != 2 {
			t.Fatalf("after a second commit: %+v, %d commits", r, len(c1.Commits()))
		}
		// A later entry that carries no answer (a second step of the same
		// operation) leaves the stored answer as it is.
		if err := db.AppendOp(cctx, entry("workspace.promoted")); err != nil {
			t.Fatal(err)
		}
		r, _ = db.IdemByKey(ctx, "key_test", "d1")
		if string(r.Body) != `{"commit":"def"}` || r.Status != 201 || r.State != lockstep.IdemDone {
			t.Fatalf("an entry without an answer changed the record: %+v", r)
		}
		if n := entries("d1"); n != 3 {
			t.Fatalf("entries under d1: %d, want 3", n)
		}

		// Another request with the key cannot commit.
		c2 := deferred("d1", "t2", "fp")
		c2ctx := lockstep.WithIdemClaim(ctx, c2)
		if err := db.AppendOp(c2ctx, answering(entry("push"), `{"commit":"zzz"}`)); lockstep.ErrorCode(err) != lockstep.EINPROGRESS || !c2.Lost() || len(c2.Commits()) != 0 {
			t.Fatalf("a duplicate's commit: %v, lost %v, want in_progress and lost", err, c2.Lost())
		}
		if n := entries("d1"); n != 3 {
			t.Fatalf("entries under d1: %d, want 3", n)
		}
		if r, _ := db.IdemByKey(ctx, "key_test", "d1"); r.Token != "t1" || string(r.Body) != `{"commit":"def"}` {
			t.Fatalf("the duplicate changed the record: %+v", r)
		}

		// A live running claim (a held key) also wins.
		if cur, err := db.ClaimIdem(ctx, &lockstep.IdemRecord{Owner: "key_test", Key: "d2", Fingerprint: "fp", Method: "PUT", Path: "/x",
			Token: "held", LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)}); err != nil || cur != nil {
			t.Fatalf("claim d2: %v %+v", err, cur)
		}
		c3 := deferred("d2", "t3", "fp")
		if err := db.AppendOp(lockstep.WithIdemClaim(ctx, c3), entry("push")); lockstep.ErrorCode(err) != lockstep.EINPROGRESS || !c3.Lost() {
			t.Fatalf("commit against a held claim: %v", err)
		}
		if n := entries("d2"); n != 0 {
			t.Fatalf("entries under d2: %d, want 0", n)
		}

		// An expired record is replaced.
		db.SQL().ExecContext(ctx, `UPDATE idempotency_keys SET expires_at = 1, lease_until = 1 WHERE idem_key = 'd2'`)
		c4 := deferred("d2", "t4", "fp4")
		c4ctx := lockstep.WithIdemClaim(ctx, c4)
		refused := entry("push")
		refused.Answer = lockstep.Errorf(lockstep.EREFCONFLICT, "moved")
		if err := db.AppendOp(c4ctx, refused); err != nil {
			t.Fatal(err)
		}
		r, _ = db.IdemByKey(ctx, "key_test", "d2")
		// A refusal is stored as its error envelope without a status (the
		// web layer maps its code to one on replay).
		if r.Token != "t4" || r.Fingerprint != "fp4" || r.State != lockstep.IdemCommitted || r.Status != 0 || !r.ExpiresAt.After(now) ||
			lockstep.ErrorEnvelopeCode(r.Body) != lockstep.EREFCONFLICT {
			t.Fatalf("replaced expired record (a refusal is committed, not done): %+v %s", r, r.Body)
		}
		if v, err := db.VerifyOps(ctx); err != nil || !v.OK {
			t.Fatalf("chain: %v %+v", err, v)
		}
	})
}

// TestIdempotencyClaimAtCommitRace: duplicates with one key committing at
// the same time through separate connections (two replicas on one
// database) commit exactly once; every loser is marked lost.
func TestIdempotencyClaimAtCommitRace(t *testing.T) {
	backends(t, func(t *testing.T, open func() *sqlstore.DB) {
		ctx := context.Background()
		a, b := open(), open()
		now := time.Now()
		for i := 0; i < 20; i++ {
			key := fmt.Sprintf("race-%d", i)
			const n = 4
			claims := make([]*lockstep.IdemClaim, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for j := range claims {
				claims[j] = &lockstep.IdemClaim{Owner: "key_test", Key: key, Token: fmt.Sprintf("t%d", j), Status: 201,
					Deferred: &lockstep.IdemRecord{Owner: "key_test", Key: key, Fingerprint: "fp", Method: "PUT", Path: "/x",
						LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)}}
				db := a
				if j%2 == 1 {
					db = b
				}
				wg.Add(1)
				go func(j int, db *sqlstore.DB) {
					defer wg.Done()
					cctx := lockstep.WithIdemClaim(ctx, claims[j])
					e := answering(entry("push"), fmt.Sprintf(`{"by":%d}`, j))
					<-start
					errs[j] = db.AppendOp(cctx, e)
				}(j, db)
			}
			close(start)
			wg.Wait()
			won := -1
			for j := range claims {
				switch {
				case errs[j] == nil && !claims[j].Lost():
					if won >= 0 {
						t.Fatalf("%s: requests %d and %d both committed", key, won, j)
					}
					won = j
				case lockstep.ErrorCode(errs[j]) == lockstep.EINPROGRESS && claims[j].Lost():
				default:
					t.Fatalf("%s: request %d: %v (lost %v)", key, j, errs[j], claims[j].Lost())
				}
			}
			if won < 0 {
				t.Fatalf("%s: nobody committed: %v", key, errs)
			}
			ops, err := a.OpsByIdemKey(ctx, "key_test", key)
			if err != nil || len(ops) != 1 {
				t.Fatalf("%s: %d entries (%v), want 1", key, len(ops), err)
			}
			r, err := b.IdemByKey(ctx, "key_test", key)
			if err != nil || r.Token != claims[won].Token || string(r.Body) != fmt.Sprintf(`{"by":%d}`, won) || r.OpID != ops[0].ID {
				t.Fatalf("%s: record %+v (%v), want the winner's", key, r, err)
			}
		}
	})
}

// answering is e carrying a JSON answer (as a domain service sets it).
func answering(e *lockstep.OpEntry, body string) *lockstep.OpEntry {
	e.Answer = json.RawMessage(body)
	return e
}
