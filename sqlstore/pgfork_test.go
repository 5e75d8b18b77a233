package sqlstore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/internal/testenv"
	"github.com/lockstep-hq/lockstep/sqlstore"
)

// oddStrings are the values the hashed append must encode as Go does:
// JSON escapes, HTML characters (escaped by encoding/json), unicode
// beyond the BMP, U+2028, a NUL-free control character, SQL quotes.
var oddStrings = []string{
	"", "plain", `quote " and \ backslash`, "<script>&amp;</script>", "tab\tnew\nline\rcr", "\x01\x1f\x7f",
	"é ü ß 日本語 🚀", "\u2028\u2029", "'; DROP TABLE oplog; --", `{"seq":1,"time_us":2,"prev_hash":"x"}`,
	`,"time_us":0,`, strings.Repeat("ä", 300), "\ufffd", "%s %d $1 $17",
}

// TestPostgresHashedAppendMatchesGo: entries appended by the one-round-trip
// path, whose hash PostgreSQL computes from the canonical JSON Go encodes
// around seq, time_us and prev_hash, hash exactly as lockstep.EntryHash
// does (the value handed to OnOp, the stored column and VerifyOps agree),
// with every kind of string in every field, keyed or not, with details,
// refs and a minted key's parent; and the chain verifies.
func TestPostgresHashedAppendMatchesGo(t *testing.T) {
	db := mustOpen(t, testenv.MustPostgresDB(t))
	ctx := context.Background()
	now := lockstep.TruncateTime(time.Now())
	if err := db.CreateKey(ctx, &lockstep.Key{ID: "key_parent", Name: "parent", Role: lockstep.RoleAdmin, Prefix: "lsk_pppppppp", Hash: []byte{1}, CreatedAt: now}, nil); err != nil {
		t.Fatal(err)
	}
	if err := db.CreateKey(ctx, &lockstep.Key{ID: "key_child", Name: "child", Role: lockstep.RoleAgent, Prefix: "lsk_cccccccc", Hash: []byte{2}, CreatedAt: now, ParentKeyID: "key_parent"}, nil); err != nil {
		t.Fatal(err)
	}
	published := map[string]lockstep.OpEntry{}
	db.OnOp(func(e lockstep.OpEntry) { published[e.ID] = e })
	n := 0
	for i, s := range oddStrings {
		for j, keyID := range []string{"key_child", "sys_" + s} {
			name := fmt.Sprintf("r-%02d-%d", i, j)
			e := &lockstep.OpEntry{KeyID: keyID, KeyName: s, Op: "op " + s, Repo: name, TraceID: s, Follows: s, Result: s,
				Objects: i * 7, Bytes: int64(i) << 40, DurationUS: -int64(i), ReadOnly: j == 1,
				Details: map[string]any{s: s, "n": i, "f": 1.5e300, "nested": map[string]any{"a": []any{s, nil, true}}, "invalid": "\xff\xfe" + s},
				Refs:    []lockstep.RefMove{{Repo: name, Ref: "refs/heads/" + s, Old: lockstep.ZeroOID, New: strings.Repeat("a", 40)}}}
			c := ctx
			if j == 0 {
				key := fmt.Sprintf("k-%d-%s", i, s)
				e.Answer = map[string]string{"s": s}
				c = lockstep.WithIdemClaim(ctx, &lockstep.IdemClaim{Owner: keyID, Key: key, Token: "tok", Status: 201,
					Deferred: &lockstep.IdemRecord{Owner: keyID, Key: key, Fingerprint: "fp", Method: "POST", Path: "/x",
						LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)}})
			}
			if err := db.CreateRepo(c, &lockstep.Repo{Name: name, Network: name, DefaultBranch: "main"}, nil, e); err != nil {
				t.Fatalf("%q: %v", s, err)
			}
			n++
			if e.Hash == "" || e.Seq != int64(n) {
				t.Fatalf("%q: entry after the append: seq %d hash %q", s, e.Seq, e.Hash)
			}
			// What the two-round-trip append computes in Go (linkEntry).
			if want := lockstep.EntryHash(e, lockstep.CanonicalDetails(e.Details)); e.Hash != want {
				t.Fatalf("%q: the append's hash %s, Go's %s", s, e.Hash, want)
			}
			if got := published[e.ID]; got.Hash != e.Hash || got.Seq != e.Seq || !got.Time.Equal(e.Time) {
				t.Fatalf("%q: OnOp got seq %d hash %s time %v, the append set %d %s %v", s, got.Seq, got.Hash, got.Time, e.Seq, e.Hash, e.Time)
			}
		}
	}
	ops, err := db.ListOps(ctx, lockstep.OpFilter{Limit: 1000})
	if err != nil || len(ops) != n {
		t.Fatalf("list: %v, %d entries, want %d", err, len(ops), n)
	}
	for _, o := range ops {
		if pub := published[o.ID]; o.Hash != pub.Hash || o.PrevHash != pub.PrevHash || !o.Time.Equal(pub.Time) {
			t.Fatalf("entry %d: stored %s %s %v, published %s %s %v", o.Seq, o.Hash, o.PrevHash, o.Time, pub.Hash, pub.PrevHash, pub.Time)
		}
	}
	if ops[0].Details["parent_key_id"] != "key_parent" {
		t.Fatalf("a minted key's entry lost its parent: %+v", ops[0].Details)
	}
	if v, err := db.VerifyOps(ctx); err != nil || !v.OK || v.Entries != int64(n) {
		t.Fatalf("chain: %v %+v", err, v)
	}
}

// TestPostgresForkPredictionChecked: a fork predicts its base from the last
// fork of it; when the base changed since (here on another replica: a
// second store on the same database), the prediction is refused inside
// the transaction and the fork copies, records and answers the base as it
// is — refs, base commit, entry — and no half of the refused attempt
// commits. A base removed since is not_found with nothing created. An
// entry's time is never before its predecessor's, though the entry is
// stamped before the head is locked and the replicas' clocks disagree.
func TestPostgresForkPredictionChecked(t *testing.T) {
	url, p := testenv.ProxiedPostgresDB(t)
	ctx := context.Background()
	late := time.Now().Add(time.Hour)
	a := mustOpen(t, url)
	b, err := sqlstore.Open(ctx, url, sqlstore.Options{Now: func() time.Time { return late }}) // a replica whose clock is ahead
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	oid := func(c byte) string { return strings.Repeat(string(c), 40) }
	if err := a.CreateRepo(ctx, &lockstep.Repo{Name: "app", Network: "app", DefaultBranch: "main"},
		[]lockstep.Ref{{Name: "refs/heads/main", OID: oid('1')}, {Name: "refs/heads/dev", OID: oid('2')}, {Name: "refs/tags/v1", OID: oid('3')}}, nil); err != nil {
		t.Fatal(err)
	}
	type forked struct {
		ws     *lockstep.Repo
		e      *lockstep.OpEntry
		copied []lockstep.Ref
	}
	fork := func(db *sqlstore.DB, name string) (forked, error) {
		f := forked{ws: &lockstep.Repo{Name: name}, e: &lockstep.OpEntry{KeyID: "sys_t", KeyName: "t", Op: "fork", Repo: name}}
		err := db.ForkRepo(ctx, "app", f.ws, 0, f.e, func(c []lockstep.Ref) {
			f.copied = c
			f.e.Details = map[string]any{"base_commit": f.ws.BaseCommit, "refs": len(c)}
		})
		return f, err
	}
	// One warm connection for a's work, beside those held since Open.
	n := a.SQL().Stats().InUse + 1
	a.SQL().SetMaxIdleConns(n)
	a.SQL().SetMaxOpenConns(n)
	for i := range 3 { // the prediction is made, the statements prepared
		if _, err := fork(a, fmt.Sprintf("warm-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	before := p.Turns()
	if _, err := fork(a, "ws-1"); err != nil {
		t.Fatal(err)
	}
	if got := p.Turns() - before; got != 1 {
		t.Fatalf("a predicted fork: %d round trips, want 1", got)
	}

	// Another replica moves main and adds a branch (a later clock).
	if _, err := b.SQL().ExecContext(ctx, `UPDATE refs SET oid = $1 WHERE name = 'refs/heads/main' AND repo_id = (SELECT id FROM repos WHERE name = 'app')`, oid('4')); err != nil {
		t.Fatal(err)
	}
	if _, err := b.SQL().ExecContext(ctx, `INSERT INTO refs (repo_id, name, oid, updated_at) SELECT id, 'refs/heads/new', $1, 0 FROM repos WHERE name = 'app'`, oid('5')); err != nil {
		t.Fatal(err)
	}
	if _, err := fork(b, "ws-b"); err != nil {
		t.Fatal(err)
	}
	before = p.Turns()
	f, err := fork(a, "ws-2")
	if err != nil {
		t.Fatal(err)
	}
	// Refused, rolled back, the base read and the append; pgx also
	// deallocates and prepares again the statements of a batch that
	// failed (one round trip each way, the next fork's prepare below).
	if got := p.Turns() - before; got < 4 || got > 7 {
		t.Errorf("a fork whose prediction is refused: %d round trips, want 4 to 7", got)
	}
	want := []lockstep.Ref{{Name: "refs/heads/dev", OID: oid('2')}, {Name: "refs/heads/main", OID: oid('4')}, {Name: "refs/heads/new", OID: oid('5')}}
	if fmt.Sprint(f.copied) != fmt.Sprint(want) || f.ws.BaseCommit != oid('4') {
		t.Fatalf("fork after the base moved: copied %v, base commit %s; want %v, %s", f.copied, f.ws.BaseCommit, want, oid('4'))
	}
	r, err := a.RepoByName(ctx, "ws-2")
	if err != nil {
		t.Fatal(err)
	}
	if refs, err := a.Refs(ctx, r.ID); err != nil || len(refs) != 3 || r.BaseCommit != oid('4') || r.ID != f.ws.ID {
		t.Fatalf("ws-2 stored: %v %+v %+v", err, r, refs)
	}
	ops, err := a.ListOps(ctx, lockstep.OpFilter{Newest: true, Limit: 2})
	if err != nil || len(ops) != 2 || ops[0].Repo != "ws-2" || ops[0].Details["base_commit"] != oid('4') || ops[0].Details["refs"] != float64(3) {
		t.Fatalf("ws-2's entry: %v %+v", err, ops)
	}
	if _, err := fork(a, "ws-3"); err != nil { // prepares again
		t.Fatal(err)
	}
	before = p.Turns()
	if _, err := fork(a, "ws-3a"); err != nil {
		t.Fatal(err)
	}
	if got := p.Turns() - before; got != 1 {
		t.Errorf("the next fork, predicted anew: %d round trips, want 1", got)
	}
	// b's clock is an hour ahead: a's next entry, stamped by a's clock
	// before the head's lock, still does not go back in time.
	if _, err := fork(b, "ws-b2"); err != nil {
		t.Fatal(err)
	}
	f, err = fork(a, "ws-3b")
	if err != nil {
		t.Fatal(err)
	}
	ops, err = a.ListOps(ctx, lockstep.OpFilter{Newest: true, Limit: 2})
	if err != nil || len(ops) != 2 || ops[0].Repo != "ws-3b" || !ops[0].Time.Equal(ops[1].Time) || !f.e.Time.Equal(ops[0].Time) {
		t.Fatalf("entries of ws-b2 (clock ahead) then ws-3b: %v %+v; ws-3b's entry says %v", err, ops, f.e.Time)
	}

	// This store moves the base's ref itself: it forgets its prediction,
	// so the next fork reads the base (two round trips), never refused.
	app, err := a.RepoByName(ctx, "app")
	if err != nil {
		t.Fatal(err)
	}
	if err := a.UpdateRefs(ctx, []lockstep.RefUpdate{{RepoID: app.ID, Repo: "app", Name: "refs/heads/main", Old: oid('4'), New: oid('6')}}, nil, nil,
		&lockstep.OpEntry{KeyID: "sys_t", KeyName: "t", Op: "push", Repo: "app"}); err != nil {
		t.Fatal(err)
	}
	before = p.Turns()
	if f, err = fork(a, "ws-3c"); err != nil {
		t.Fatal(err)
	}
	if got := p.Turns() - before; got != 2 || f.ws.BaseCommit != oid('6') {
		t.Errorf("a fork after this store moved its base: %d round trips (want 2), base commit %s (want %s)", got, f.ws.BaseCommit, oid('6'))
	}

	// The base is gone: not_found, nothing created, nothing logged.
	v0, _ := a.VerifyOps(ctx)
	if _, err := b.SQL().ExecContext(ctx, `UPDATE repos SET name = 'app-old' WHERE name = 'app'`); err != nil {
		t.Fatal(err)
	}
	if _, err := fork(a, "ws-4"); lockstep.ErrorCode(err) != lockstep.ENOTFOUND {
		t.Fatalf("fork of a base gone since the prediction: %v, want not_found", err)
	}
	if _, err := a.RepoByName(ctx, "ws-4"); lockstep.ErrorCode(err) != lockstep.ENOTFOUND {
		t.Fatalf("ws-4: %v, want not_found", err)
	}
	if v, err := a.VerifyOps(ctx); err != nil || !v.OK || v.Entries != v0.Entries {
		t.Fatalf("chain: %v %+v (before %+v)", err, v, v0)
	}
	// The connection went back clean: the store still works.
	if _, err := b.SQL().ExecContext(ctx, `UPDATE repos SET name = 'app' WHERE name = 'app-old'`); err != nil {
		t.Fatal(err)
	}
	if _, err := fork(a, "ws-5"); err != nil {
		t.Fatal(err)
	}
}
