package storetest

import (
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep"
)

// claim builds a record of owner and key held by token, leased for lease
// and expiring after ttl (negative: in the past).
func claim(owner, key, token string, lease, ttl time.Duration) *lockstep.IdemRecord {
	now := time.Now()
	return &lockstep.IdemRecord{Owner: owner, Key: key, Fingerprint: "fp-" + key, Method: "POST", Path: "/api/v1/repos", Token: token,
		LeaseUntil: now.Add(lease), ExpiresAt: now.Add(ttl)}
}

func mustClaim(t *testing.T, s lockstep.Store, rec *lockstep.IdemRecord) {
	t.Helper()
	existing, err := s.ClaimIdem(bg, rec)
	must(t, err)
	if existing != nil {
		t.Fatalf("claim of %s found %+v", rec.Key, existing)
	}
}

func idem(t *testing.T, s lockstep.Store, owner, key string) *lockstep.IdemRecord {
	t.Helper()
	r, err := s.IdemByKey(bg, owner, key)
	must(t, err)
	return r
}

// opUnder appends an entry committed under (owner, key).
func opUnder(t *testing.T, s lockstep.Store, owner, key string) *lockstep.OpEntry {
	t.Helper()
	e := &lockstep.OpEntry{KeyID: owner, KeyName: "suite", Op: "repo.create", IdempotencyKey: key}
	must(t, s.AppendOp(bg, e))
	return e
}

func idemTests() map[string]test {
	return map[string]test{
		"ClaimIdem": func(t *testing.T, s lockstep.Store) {
			mustClaim(t, s, claim("k1", "idem-1", "tok-a", time.Minute, time.Hour))
			// The same (owner, key) again: the live record, unchanged.
			existing, err := s.ClaimIdem(bg, claim("k1", "idem-1", "tok-b", time.Minute, time.Hour))
			must(t, err)
			if existing == nil || existing.Token != "tok-a" || existing.State != lockstep.IdemRunning || existing.Fingerprint != "fp-idem-1" {
				t.Fatalf("second claim: %+v, want the first (running, tok-a)", existing)
			}
			// Keys are per owner.
			mustClaim(t, s, claim("k2", "idem-1", "tok-c", time.Minute, time.Hour))
			// An expired record whose lease ended is replaced.
			mustClaim(t, s, claim("k1", "idem-old", "tok-d", -time.Hour, -time.Minute))
			mustClaim(t, s, claim("k1", "idem-old", "tok-e", time.Minute, time.Hour))
			if r := idem(t, s, "k1", "idem-old"); r.Token != "tok-e" {
				t.Fatalf("expired record not replaced: %+v", r)
			}
		},
		"IdemByKey": func(t *testing.T, s lockstep.Store) {
			_, err := s.IdemByKey(bg, "k1", "idem-none")
			wantCode(t, err, lockstep.ENOTFOUND)
			rec := claim("k1", "idem-1", "tok-a", time.Minute, time.Hour)
			mustClaim(t, s, rec)
			got := idem(t, s, "k1", "idem-1")
			if got.Owner != "k1" || got.Key != "idem-1" || got.Fingerprint != rec.Fingerprint || got.Method != "POST" || got.Path != rec.Path ||
				got.State != lockstep.IdemRunning || got.Token != "tok-a" || !got.LeaseUntil.Equal(lockstep.TruncateTime(rec.LeaseUntil)) ||
				!got.ExpiresAt.Equal(lockstep.TruncateTime(rec.ExpiresAt)) || got.CreatedAt.IsZero() {
				t.Fatalf("round trip %+v, want %+v", got, rec)
			}
			_, err = s.IdemByKey(bg, "k2", "idem-1")
			wantCode(t, err, lockstep.ENOTFOUND)
		},
		"TakeOverIdem": func(t *testing.T, s lockstep.Store) {
			lease := time.Now().Add(time.Minute)
			// A live lease is not taken over.
			mustClaim(t, s, claim("k1", "live", "tok-a", time.Hour, time.Hour))
			if ok, err := s.TakeOverIdem(bg, "k1", "live", "tok-a", "tok-b", lease); err != nil || ok {
				t.Fatalf("took over a live lease: %v %v", ok, err)
			}
			// A dead one is, once, and only from the token it had.
			mustClaim(t, s, claim("k1", "dead", "tok-a", -time.Minute, time.Hour))
			if ok, err := s.TakeOverIdem(bg, "k1", "dead", "tok-wrong", "tok-b", lease); err != nil || ok {
				t.Fatalf("took over with a stale token: %v %v", ok, err)
			}
			if ok, err := s.TakeOverIdem(bg, "k1", "dead", "tok-a", "tok-b", lease); err != nil || !ok {
				t.Fatalf("take over of a dead lease: %v %v", ok, err)
			}
			if r := idem(t, s, "k1", "dead"); r.Token != "tok-b" || !r.LeaseUntil.Equal(lockstep.TruncateTime(lease)) {
				t.Fatalf("after take over: %+v", r)
			}
			// Not when an entry was committed under the key.
			mustClaim(t, s, claim("k1", "committed", "tok-a", -time.Minute, time.Hour))
			opUnder(t, s, "k1", "committed")
			if ok, err := s.TakeOverIdem(bg, "k1", "committed", "tok-a", "tok-b", lease); err != nil || ok {
				t.Fatalf("took over a key with a committed entry: %v %v", ok, err)
			}
		},
		"ExtendIdem": func(t *testing.T, s lockstep.Store) {
			mustClaim(t, s, claim("k1", "idem-1", "tok-a", time.Minute, time.Hour))
			until := time.Now().Add(10 * time.Minute)
			must(t, s.ExtendIdem(bg, "k1", "idem-1", "tok-a", until))
			if r := idem(t, s, "k1", "idem-1"); !r.LeaseUntil.Equal(lockstep.TruncateTime(until)) {
				t.Fatalf("lease %v, want %v", r.LeaseUntil, until)
			}
			// Another token's extension changes nothing.
			_ = s.ExtendIdem(bg, "k1", "idem-1", "tok-other", until.Add(time.Hour))
			if r := idem(t, s, "k1", "idem-1"); !r.LeaseUntil.Equal(lockstep.TruncateTime(until)) {
				t.Fatalf("a claim not held moved the lease to %v", r.LeaseUntil)
			}
		},
		"FinishIdem": func(t *testing.T, s lockstep.Store) {
			mustClaim(t, s, claim("k1", "idem-1", "tok-a", time.Minute, time.Hour))
			must(t, s.FinishIdem(bg, "k1", "idem-1", "tok-a", 201, map[string]string{"Location": "/x"}, []byte(`{"ok":true}`)))
			r := idem(t, s, "k1", "idem-1")
			if r.State != lockstep.IdemDone || r.Status != 201 || r.Header["Location"] != "/x" || string(r.Body) != `{"ok":true}` {
				t.Fatalf("finished record %+v", r)
			}
			// Not held: refused, nothing changes.
			if err := s.FinishIdem(bg, "k1", "idem-1", "tok-other", 500, nil, []byte("x")); err == nil {
				t.Fatal("FinishIdem with a token that does not hold the claim succeeded")
			}
			if r := idem(t, s, "k1", "idem-1"); r.Status != 201 {
				t.Fatalf("a refused FinishIdem changed the record: %+v", r)
			}
		},
		"ReleaseIdem": func(t *testing.T, s lockstep.Store) {
			mustClaim(t, s, claim("k1", "idem-1", "tok-a", time.Minute, time.Hour))
			// Another token does not release it.
			_ = s.ReleaseIdem(bg, "k1", "idem-1", "tok-other")
			idem(t, s, "k1", "idem-1")
			must(t, s.ReleaseIdem(bg, "k1", "idem-1", "tok-a"))
			_, err := s.IdemByKey(bg, "k1", "idem-1")
			wantCode(t, err, lockstep.ENOTFOUND)
			// Released: a retry claims afresh.
			mustClaim(t, s, claim("k1", "idem-1", "tok-b", time.Minute, time.Hour))
		},
		"CountIdemReplay": func(t *testing.T, s lockstep.Store) {
			mustClaim(t, s, claim("k1", "idem-1", "tok-a", time.Minute, time.Hour))
			e := opUnder(t, s, "k1", "idem-1")
			other := opUnder(t, s, "k1", "idem-2")
			must(t, s.CountIdemReplay(bg, "k1", "idem-1"))
			must(t, s.CountIdemReplay(bg, "k1", "idem-1"))
			if r := idem(t, s, "k1", "idem-1"); r.Replays != 2 {
				t.Fatalf("record replays %d, want 2", r.Replays)
			}
			ops, err := s.OpsByIdemKey(bg, "k1", "idem-1")
			must(t, err)
			if len(ops) != 1 || ops[0].ID != e.ID || ops[0].Replays != 2 {
				t.Fatalf("entries under the key: %+v", ops)
			}
			if ops, _ := s.OpsByIdemKey(bg, "k1", "idem-2"); len(ops) != 1 || ops[0].ID != other.ID || ops[0].Replays != 0 {
				t.Fatalf("another key's entry counted a replay: %+v", ops)
			}
			// The replays annotation is outside the hash chain.
			wantChain(t, s, 2)
		},
		"PurgeIdem": func(t *testing.T, s lockstep.Store) {
			mustClaim(t, s, claim("k1", "expired", "tok", -time.Hour, -time.Minute))
			mustClaim(t, s, claim("k1", "running", "tok", time.Hour, -time.Minute)) // expired but its lease is alive
			mustClaim(t, s, claim("k1", "fresh", "tok", time.Minute, time.Hour))
			n, err := s.PurgeIdem(bg, time.Now())
			must(t, err)
			if n != 1 {
				t.Fatalf("purged %d, want 1", n)
			}
			_, err = s.IdemByKey(bg, "k1", "expired")
			wantCode(t, err, lockstep.ENOTFOUND)
			idem(t, s, "k1", "running")
			idem(t, s, "k1", "fresh")
		},
		"OpsByIdemKey": func(t *testing.T, s lockstep.Store) {
			a := opUnder(t, s, "k1", "idem-1")
			opUnder(t, s, "k2", "idem-1") // another owner
			must(t, s.AppendOp(bg, ent("unrelated")))
			b := opUnder(t, s, "k1", "idem-1")
			ops, err := s.OpsByIdemKey(bg, "k1", "idem-1")
			must(t, err)
			if len(ops) != 2 || ops[0].ID != a.ID || ops[1].ID != b.ID || ops[0].IdempotencyKey != "idem-1" {
				t.Fatalf("OpsByIdemKey = %+v, want the two entries of k1 oldest first", ops)
			}
			if ops, err := s.OpsByIdemKey(bg, "k1", "idem-none"); err != nil || len(ops) != 0 {
				t.Fatalf("unknown key: %v %v", ops, err)
			}
		},
	}
}
