package sqlstore_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep"
)

// TestKeyedAppendPages counts the pages one keyed append writes to
// SQLite's WAL (the commit of a keyed preflight or rollback: the entry,
// the chain head and the idempotency record). With oplog.seq a BIGINT
// PRIMARY KEY (not the rowid) every append also wrote a separate index
// on seq: migration 0029 makes seq the rowid, one b-tree fewer to write.
func TestKeyedAppendPages(t *testing.T) {
	path := filepath.Join(t.TempDir(), "meta.db")
	db := mustOpen(t, path)
	db.SQL().SetMaxOpenConns(1)
	ctx := context.Background()
	now := lockstep.TruncateTime(time.Now())
	appendKeyed := func(i int) {
		k := fmt.Sprintf("k-%d", i)
		c := &lockstep.IdemClaim{Owner: "key_test", Key: k, Token: "t", Status: 200,
			Deferred: &lockstep.IdemRecord{Owner: "key_test", Key: k, Fingerprint: "fp", Method: "POST",
				Path: "/api/v1/repos/app/merges", LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)}}
		e := entry("merge.preflight")
		e.Repo = "app"
		e.ReadOnly = true
		e.Answer = map[string]string{"clean": "true"}
		if err := db.AppendOp(lockstep.WithIdemClaim(ctx, c), e); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 300; i++ {
		appendKeyed(i)
	}
	var pageSize int64
	if err := db.SQL().QueryRowContext(ctx, `PRAGMA page_size`).Scan(&pageSize); err != nil {
		t.Fatal(err)
	}
	frames := func() int64 {
		st, err := os.Stat(path + "-wal")
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() == 0 {
			return 0
		}
		return (st.Size() - 32) / (pageSize + 24)
	}
	var counts []int64
	for i := 300; i < 311; i++ {
		if _, err := db.SQL().ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
			t.Fatal(err)
		}
		if n := frames(); n != 0 {
			t.Fatalf("WAL not truncated: %d frames", n)
		}
		appendKeyed(i)
		n := frames()
		t.Logf("keyed append %d: %d WAL frames", i, n)
		counts = append(counts, n)
	}
	// The usual append (a page split now and then writes one or two
	// more): the oplog table, its indexes on id, (repo, seq), (key_id,
	// seq) and (key_id, idem_key), oplog_head, idempotency_keys and its
	// primary key and expiry indexes. Before 0029: 10, the seq index.
	sort.Slice(counts, func(i, j int) bool { return counts[i] < counts[j] })
	if med := counts[len(counts)/2]; med > 9 {
		t.Fatalf("a keyed append wrote %d pages (median of %v), want 9", med, counts)
	}
	if res, err := db.VerifyOps(ctx); err != nil || !res.OK || res.Entries != 311 {
		t.Fatalf("verify: %v %+v", err, res)
	}
}

// BenchmarkKeyedAppend: one keyed read-only append (a keyed preflight's
// store transaction: the entry, the chain head and the idempotency
// record with its answer) on SQLite.
//
//	go test -run XXX -bench KeyedAppend -benchtime 5000x ./sqlstore/
func BenchmarkKeyedAppend(b *testing.B) {
	db := mustOpen(b, filepath.Join(b.TempDir(), "meta.db"))
	ctx := context.Background()
	now := lockstep.TruncateTime(time.Now())
	i := 0
	for b.Loop() {
		i++
		k := fmt.Sprintf("k-%d", i)
		c := &lockstep.IdemClaim{Owner: "key_test", Key: k, Token: "t", Status: 200,
			Deferred: &lockstep.IdemRecord{Owner: "key_test", Key: k, Fingerprint: "fp", Method: "POST",
				Path: "/api/v1/repos/app/merges", LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)}}
		e := entry("merge.preflight")
		e.Repo = "app"
		e.ReadOnly = true
		e.Answer = map[string]string{"clean": "true"}
		if err := db.AppendOp(lockstep.WithIdemClaim(ctx, c), e); err != nil {
			b.Fatal(err)
		}
	}
}
