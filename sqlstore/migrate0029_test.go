package sqlstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/migrations"
	"github.com/lockstep-hq/lockstep/sqlstore"
)

// oplogShape is SQLite's description of the oplog table: its columns
// (name, type, not null, default, pk) and its indexes (name, unique,
// partial, columns).
func oplogShape(t *testing.T, db *sql.DB) (cols, idx []string) {
	t.Helper()
	rows, err := db.Query(`SELECT name, type, "notnull", COALESCE(dflt_value, ''), pk FROM pragma_table_info('oplog') ORDER BY cid`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name, typ, dflt string
		var nn, pk int
		if err := rows.Scan(&name, &typ, &nn, &dflt, &pk); err != nil {
			t.Fatal(err)
		}
		cols = append(cols, fmt.Sprintf("%s %s nn=%d dflt=%s pk=%d", name, typ, nn, dflt, pk))
	}
	rows.Close()
	rows, err = db.Query(`SELECT l.name, l."unique", l.partial, (SELECT group_concat(name) FROM pragma_index_info(l.name)) FROM pragma_index_list('oplog') l`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name, on string
		var uniq, partial int
		if err := rows.Scan(&name, &uniq, &partial, &on); err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(name, "sqlite_autoindex_") {
			name = "auto" // its number depends on the order of creation
		}
		idx = append(idx, fmt.Sprintf("%s unique=%d partial=%d (%s)", name, uniq, partial, on))
	}
	rows.Close()
	sort.Strings(idx)
	return cols, idx
}

// TestMigration0029OplogRowid: a database of the previous schema (0028)
// holding entries, keyed ones with their idempotency records and
// replays among them, migrates to seq as the rowid with every entry,
// hash and link unchanged; the chain verifies before and after, and
// appends after the migration continue it.
func TestMigration0029OplogRowid(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	files, err := migrations.FS("sqlite")
	if err != nil {
		t.Fatal(err)
	}
	read := func(name string) string {
		b, err := fs.ReadFile(files, name)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}

	// The schema 0028 had: every up migration before 0029, run by hand.
	ref, err := sql.Open("sqlite", filepath.Join(dir, "ref.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	ups, _ := fs.Glob(files, "*.up.sql")
	sort.Strings(ups)
	for _, name := range ups {
		if v, _ := strconv.Atoi(strings.SplitN(name, "_", 2)[0]); v < 29 {
			if _, err := ref.Exec(read(name)); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		}
	}
	oldCols, oldIdx := oplogShape(t, ref)

	// A database at 0028: the store's schema, 0029 undone.
	path := filepath.Join(dir, "meta.db")
	db, err := sqlstore.Open(ctx, path, sqlstore.Options{Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	newCols, newIdx := oplogShape(t, db.SQL())
	// Undo 0029 and every migration after it, newest first.
	latest := 0
	downs, _ := fs.Glob(files, "*.down.sql")
	sort.Sort(sort.Reverse(sort.StringSlice(downs)))
	for _, name := range downs {
		v, _ := strconv.Atoi(strings.SplitN(name, "_", 2)[0])
		latest = max(latest, v)
		if v >= 29 {
			if _, err := db.SQL().Exec(read(name)); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		}
	}
	if _, err := db.SQL().Exec(`UPDATE schema_migrations SET version = 28`); err != nil {
		t.Fatal(err)
	}
	if cols, idx := oplogShape(t, db.SQL()); !reflect.DeepEqual(cols, oldCols) || !reflect.DeepEqual(idx, oldIdx) {
		t.Fatalf("0029 down is not 0028's oplog:\n%v\n%v\nwant\n%v\n%v", cols, idx, oldCols, oldIdx)
	}
	if len(oldIdx) != 5 || len(newIdx) != 4 || newCols[0] != "seq INTEGER nn=0 dflt= pk=1" {
		t.Fatalf("before: %v; after: %v %v; want seq's own index gone, seq the rowid", oldIdx, newCols[0], newIdx)
	}

	// Entries written on the old schema, keyed and not.
	now := lockstep.TruncateTime(time.Now())
	keyed := func(db *sqlstore.DB, key, op string) *lockstep.OpEntry {
		t.Helper()
		c := &lockstep.IdemClaim{Owner: "key_test", Key: key, Token: "t-" + key, Status: 200,
			Deferred: &lockstep.IdemRecord{Owner: "key_test", Key: key, Fingerprint: "fp", Method: "POST",
				Path: "/api/v1/repos/app/merges", LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)}}
		e := entry(op)
		e.Repo = "app"
		e.ReadOnly = true
		e.Details = map[string]any{"ours": "main", "theirs": "ws:main", "clean": true}
		e.Answer = map[string]any{"clean": true}
		if err := db.AppendOp(lockstep.WithIdemClaim(ctx, c), e); err != nil {
			t.Fatal(err)
		}
		return e
	}
	for i := 0; i < 40; i++ {
		switch i % 3 {
		case 0:
			keyed(db, fmt.Sprintf("k-%d", i), "merge.preflight")
		case 1:
			e := &lockstep.OpEntry{KeyID: "key_other", KeyName: "other", Op: "push", Repo: fmt.Sprintf("r%d", i%4),
				Refs: []lockstep.RefMove{{Repo: "r", Ref: "refs/heads/main", Old: strings.Repeat("a", 40), New: strings.Repeat("b", 40)}}, Objects: 3, Bytes: 100}
			if err := db.AppendOp(ctx, e); err != nil {
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
	all := func(db *sqlstore.DB) []*lockstep.OpEntry {
		t.Helper()
		out, err := db.ListOps(ctx, lockstep.OpFilter{Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	before := all(db)
	if res, err := db.VerifyOps(ctx); err != nil || !res.OK || res.Entries != 40 || len(before) != 40 {
		t.Fatalf("before the migration: %v %+v, %d entries", err, res, len(before))
	}
	db.Close()

	// Open migrates (0029 and those after it).
	db, err = sqlstore.Open(ctx, path, sqlstore.Options{Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if v, dirty, err := db.SchemaVersion(); err != nil || dirty || int(v) != latest {
		t.Fatalf("schema version %d dirty=%v %v, want %d", v, dirty, err, latest)
	}
	if cols, idx := oplogShape(t, db.SQL()); !reflect.DeepEqual(cols, newCols) || !reflect.DeepEqual(idx, newIdx) {
		t.Fatalf("after 0029: %v %v, want %v %v", cols, idx, newCols, newIdx)
	}
	after := all(db)
	if !reflect.DeepEqual(after, before) {
		t.Fatalf("entries changed by the migration")
	}
	if res, err := db.VerifyOps(ctx); err != nil || !res.OK || res.Entries != 40 {
		t.Fatalf("after the migration: %v %+v", err, res)
	}
	ops, err := db.OpsByIdemKey(ctx, "key_test", "k-3")
	if err != nil || len(ops) != 1 || ops[0].Seq != 4 || ops[0].Replays != 1 {
		t.Fatalf("entries of k-3 after the migration: %v %+v", err, ops)
	}
	if rec, err := db.IdemByKey(ctx, "key_test", "k-3"); err != nil || rec.OpID != ops[0].ID || rec.Replays != 1 {
		t.Fatalf("record of k-3: %v %+v", err, rec)
	}
	if got, err := db.ListOps(ctx, lockstep.OpFilter{Repo: "r1", Newest: true}); err != nil || len(got) == 0 || got[0].Repo != "r1" {
		t.Fatalf("entries of one repository: %v %d", err, len(got))
	}
	// The chain goes on from the migrated head.
	e := keyed(db, "k-new", "merge.preflight")
	if e.Seq != 41 || e.PrevHash != before[39].Hash {
		t.Fatalf("first append after the migration: seq %d prev %s, want 41 after %s", e.Seq, e.PrevHash, before[39].Hash)
	}
	if res, err := db.VerifyOps(ctx); err != nil || !res.OK || res.Entries != 41 {
		t.Fatalf("after an append: %v %+v", err, res)
	}
}
