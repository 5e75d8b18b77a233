package sqlstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/migrations"
	"github.com/lockstep-hq/lockstep/sqlstore"
)

// oplogHeadRow reads the head row and the last entry's seq and hash.
func oplogHeadRow(t *testing.T, db *sql.DB) (seq int64, hash string, lastSeq int64, lastHash string) {
	t.Helper()
	if err := db.QueryRow(`SELECT seq, hash FROM oplog_head WHERE id = 1`).Scan(&seq, &hash); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow(`SELECT COALESCE(MAX(seq), 0), COALESCE((SELECT hash FROM oplog ORDER BY seq DESC LIMIT 1), '') FROM oplog`).Scan(&lastSeq, &lastHash); err != nil {
		t.Fatal(err)
	}
	return seq, hash, lastSeq, lastHash
}

func headTriggers(t *testing.T, db *sql.DB) int {
	t.Helper()
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM sqlite_master WHERE type = 'trigger' AND name = 'oplog_head_follows' AND tbl_name = 'oplog'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestMigration0031OplogHeadTrigger: a database at 0030 (the head row
// moved by the store's own UPDATE) holding entries, keyed ones with
// their idempotency records and a replay among them, migrates to the
// head moved by a trigger: every entry, hash, link and lookup
// unchanged, the chain verifies before and after, the next append links
// to the old head and moves the head row.
func TestMigration0031OplogHeadTrigger(t *testing.T) {
	ctx := context.Background()
	files, err := migrations.FS("sqlite")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "meta.db")
	db, err := sqlstore.Open(ctx, path, sqlstore.Options{Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	latest, _, err := db.SchemaVersion()
	if err != nil || latest < 31 {
		t.Fatalf("schema version %d %v", latest, err)
	}
	if headTriggers(t, db.SQL()) != 1 {
		t.Fatal("a fresh database has no oplog_head_follows trigger")
	}
	// A fresh database: the genesis head, and the first entry links to it.
	if seq, hash, _, _ := oplogHeadRow(t, db.SQL()); seq != 0 || hash != "" {
		t.Fatalf("fresh head %d %q", seq, hash)
	}
	now := lockstep.TruncateTime(time.Now())
	keyed := func(db *sqlstore.DB, key string) *lockstep.OpEntry {
		t.Helper()
		c := &lockstep.IdemClaim{Owner: "key_test", Key: key, Token: "t-" + key, Status: 200,
			Deferred: &lockstep.IdemRecord{Owner: "key_test", Key: key, Fingerprint: "fp", Method: "POST",
				Path: "/api/v1/repos/app/merges", LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)}}
		e := entry("merge.preflight")
		e.Repo = "app"
		e.ReadOnly = true
		e.Details = map[string]any{"ours": "main", "theirs": "ws:main", "clean": true}
		e.Answer = map[string]any{"clean": true, "conflicts": []string{strings.Repeat("p/", 200)}}
		if err := db.AppendOp(lockstep.WithIdemClaim(ctx, c), e); err != nil {
			t.Fatal(err)
		}
		return e
	}
	for i := 0; i < 30; i++ {
		switch i % 3 {
		case 0:
			e := keyed(db, fmt.Sprintf("k-%d", i))
			if i == 0 && (e.Seq != 1 || e.PrevHash != "") {
				t.Fatalf("first entry: seq %d prev %q", e.Seq, e.PrevHash)
			}
		case 1:
			if err := db.AppendOp(ctx, &lockstep.OpEntry{KeyID: "key_other", KeyName: "other", Op: "push", Repo: fmt.Sprintf("r%d", i%4),
				Refs: []lockstep.RefMove{{Repo: "r", Ref: "refs/heads/main", Old: strings.Repeat("a", 40), New: strings.Repeat("b", 40)}}}); err != nil {
				t.Fatal(err)
			}
		default:
			if err := db.AppendOp(ctx, &lockstep.OpEntry{KeyID: "key_test", KeyName: "test", Op: "rollback", Repo: "app", Result: "refused",
				Details: map[string]any{"n": i}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := db.CountIdemReplay(ctx, "key_test", "k-3"); err != nil {
		t.Fatal(err)
	}
	// Back to 0030: the trigger gone, the head row as the store left it.
	down, err := fs.ReadFile(files, "0031_oplog_head_trigger.down.sql")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.SQL().Exec(string(down)); err != nil {
		t.Fatal(err)
	}
	if _, err := db.SQL().Exec(`UPDATE schema_migrations SET version = 30`); err != nil {
		t.Fatal(err)
	}
	if headTriggers(t, db.SQL()) != 0 {
		t.Fatal("0031 down left the trigger")
	}
	all := func(db *sqlstore.DB) []*lockstep.OpEntry {
		t.Helper()
		out, err := db.ListOps(ctx, lockstep.OpFilter{Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	before := all(db)
	if res, err := db.VerifyOps(ctx); err != nil || !res.OK || res.Entries != 30 || len(before) != 30 {
		t.Fatalf("at 0030: %v %+v, %d entries", err, res, len(before))
	}
	if seq, hash, last, lastHash := oplogHeadRow(t, db.SQL()); seq != 30 || seq != last || hash != lastHash {
		t.Fatalf("head at 0030: %d %s, last entry %d %s", seq, hash, last, lastHash)
	}
	recBefore, err := db.IdemByKey(ctx, "key_test", "k-3")
	if err != nil {
		t.Fatal(err)
	}
	db.Close()

	// Open migrates.
	db, err = sqlstore.Open(ctx, path, sqlstore.Options{Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if v, dirty, err := db.SchemaVersion(); err != nil || dirty || v != latest {
		t.Fatalf("schema version %d dirty=%v %v, want %d", v, dirty, err, latest)
	}
	if headTriggers(t, db.SQL()) != 1 {
		t.Fatal("0031 did not add the trigger")
	}
	if after := all(db); !reflect.DeepEqual(after, before) {
		t.Fatal("entries changed by the migration")
	}
	if res, err := db.VerifyOps(ctx); err != nil || !res.OK || res.Entries != 30 {
		t.Fatalf("after the migration: %v %+v", err, res)
	}
	ops, err := db.OpsByIdemKey(ctx, "key_test", "k-3")
	if err != nil || len(ops) != 1 || ops[0].Seq != 4 || ops[0].Replays != 1 {
		t.Fatalf("entries of k-3 after the migration: %v %+v", err, ops)
	}
	if rec, err := db.IdemByKey(ctx, "key_test", "k-3"); err != nil || !reflect.DeepEqual(rec, recBefore) {
		t.Fatalf("record of k-3: %v %+v, want %+v", err, rec, recBefore)
	}
	if got, err := db.ListOps(ctx, lockstep.OpFilter{Repo: "r1", Newest: true}); err != nil || len(got) == 0 || got[0].Repo != "r1" {
		t.Fatalf("entries of one repository: %v %d", err, len(got))
	}
	// The chain goes on from the old head, and the trigger moves it.
	e := keyed(db, "k-new")
	if e.Seq != 31 || e.PrevHash != before[29].Hash {
		t.Fatalf("first append after the migration: seq %d prev %s, want 31 after %s", e.Seq, e.PrevHash, before[29].Hash)
	}
	if seq, hash, _, _ := oplogHeadRow(t, db.SQL()); seq != 31 || hash != e.Hash {
		t.Fatalf("head after an append: %d %s, want 31 %s", seq, hash, e.Hash)
	}
	if res, err := db.VerifyOps(ctx); err != nil || !res.OK || res.Entries != 31 {
		t.Fatalf("after an append: %v %+v", err, res)
	}
	// Removing the last entry is still found (the head row names it).
	if _, err := db.SQL().Exec(`DELETE FROM oplog WHERE seq = 31`); err != nil {
		t.Fatal(err)
	}
	if res, _ := db.VerifyOps(ctx); res.OK || res.FirstBad == nil || *res.FirstBad != 31 {
		t.Fatalf("truncated chain after 0031: %+v", res)
	}
}

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
