package sqlstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/sqlstore"
)

// TestIdempotencyRecords: the claim, the record committed in the entry's
// own transaction with the staged answer, fencing of a taken-over claim,
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
		claim := &lockstep.IdemClaim{Owner: "key_test", Key: "k1", Token: "t1",
			Render: func(v any, staged bool) (int, map[string]string, []byte, bool) {
				if !staged {
					return 0, nil, nil, false
				}
				return 201, map[string]string{"Content-Type": "application/json"}, []byte(v.(string)), true
			}}
		cctx := lockstep.WithIdemClaim(ctx, claim)
		lockstep.StageResult(cctx, `{"commit":"abc"}`)
		if err := db.AppendOp(cctx, entry("push")); err != nil {
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
