package sqlstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/sqlstore"
)

// TestKeyedCommitNeedsNoSecondConnection: the first keyed commit after
// Open must not prepare its statement inside its own transaction. That
// took a second pooled connection while the transaction held one (and,
// on SQLite, the write lock): with every other connection waiting for
// the lock, 24 concurrent forks stalled until SQLite's busy timeout and
// failed with SQLITE_BUSY. With a one-connection pool the old code
// waited forever; here it must commit.
func TestKeyedCommitNeedsNoSecondConnection(t *testing.T) {
	backends(t, func(t *testing.T, open func() *sqlstore.DB) {
		db := open()
		db.SQL().SetMaxOpenConns(1)
		now := lockstep.TruncateTime(time.Now())
		c := &lockstep.IdemClaim{Owner: "key_test", Key: "k-first", Token: "t", Status: 200,
			Deferred: &lockstep.IdemRecord{Owner: "key_test", Key: "k-first", Fingerprint: "fp", Method: "POST",
				Path: "/api/v1/repos/app/rollback", LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)}}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		e := entry("rollback")
		e.Answer = map[string]string{"commit": "c"}
		if err := db.AppendOp(lockstep.WithIdemClaim(ctx, c), e); err != nil {
			t.Fatalf("first keyed commit on a one-connection pool: %v", err)
		}
		rec, err := db.IdemByKey(context.Background(), "key_test", "k-first")
		if err != nil || rec.State != lockstep.IdemDone || rec.OpID == "" {
			t.Fatalf("key record: %v %+v", err, rec)
		}
	})
}
