package storetest

import (
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep"
)

func mustKey(t *testing.T, s lockstep.Store, id, prefix string, created time.Time) *lockstep.Key {
	t.Helper()
	k := &lockstep.Key{ID: id, Name: "name-" + id, Role: lockstep.RoleAgent, Prefix: prefix, Hash: []byte("hash-" + id), CreatedAt: created}
	must(t, s.CreateKey(bg, k, ent("key.create")))
	return k
}

func keyTests() map[string]test {
	return map[string]test{
		"CreateKey": func(t *testing.T, s lockstep.Store) {
			k := mustKey(t, s, "key_a", "lsk_aaaaaaaa", at(0))
			got, err := s.KeyByPrefix(bg, k.Prefix)
			must(t, err)
			if got.ID != k.ID || got.Name != k.Name || got.Role != k.Role || string(got.Hash) != string(k.Hash) || !got.CreatedAt.Equal(k.CreatedAt) || got.RevokedAt != nil || got.LastUsedAt != nil {
				t.Fatalf("round trip: %+v, want %+v", got, k)
			}
			wantOps(t, s, "key.create", 1)
			// The prefix is unique; a refused key appends nothing.
			dup := *k
			dup.ID = "key_b"
			wantCode(t, s.CreateKey(bg, &dup, ent("key.create")), lockstep.ECONFLICT)
			wantOps(t, s, "key.create", 1)
			wantChain(t, s, 1)
		},
		"KeyByPrefix": func(t *testing.T, s lockstep.Store) {
			mustKey(t, s, "key_a", "lsk_aaaaaaaa", at(0))
			_, err := s.KeyByPrefix(bg, "lsk_bbbbbbbb")
			wantCode(t, err, lockstep.ENOTFOUND)
			got, err := s.KeyByPrefix(bg, "lsk_aaaaaaaa")
			must(t, err)
			if got.ID != "key_a" {
				t.Fatalf("got %s", got.ID)
			}
		},
		"ListKeys": func(t *testing.T, s lockstep.Store) {
			keys, err := s.ListKeys(bg)
			must(t, err)
			if len(keys) != 0 {
				t.Fatalf("fresh store lists %d keys", len(keys))
			}
			// Oldest first whatever the insertion order; revoked ones included.
			mustKey(t, s, "key_c", "lsk_cccccccc", at(30))
			mustKey(t, s, "key_a", "lsk_aaaaaaaa", at(10))
			mustKey(t, s, "key_b", "lsk_bbbbbbbb", at(20))
			must(t, s.RevokeKey(bg, "key_b", at(40), ent("key.revoke")))
			keys, err = s.ListKeys(bg)
			must(t, err)
			var ids []string
			for _, k := range keys {
				ids = append(ids, k.ID)
			}
			if len(ids) != 3 || ids[0] != "key_a" || ids[1] != "key_b" || ids[2] != "key_c" {
				t.Fatalf("ListKeys = %v, want [key_a key_b key_c]", ids)
			}
			if keys[1].RevokedAt == nil {
				t.Fatal("revoked key listed without its revocation time")
			}
		},
		"RevokeKey": func(t *testing.T, s lockstep.Store) {
			mustKey(t, s, "key_a", "lsk_aaaaaaaa", at(0))
			wantCode(t, s.RevokeKey(bg, "key_missing", at(1), ent("key.revoke")), lockstep.ENOTFOUND)
			wantOps(t, s, "key.revoke", 0)
			must(t, s.RevokeKey(bg, "key_a", at(5), ent("key.revoke")))
			// Revoking twice keeps the first time.
			must(t, s.RevokeKey(bg, "key_a", at(9), ent("key.revoke")))
			got, err := s.KeyByPrefix(bg, "lsk_aaaaaaaa")
			must(t, err)
			if got.RevokedAt == nil || !got.RevokedAt.Equal(at(5)) {
				t.Fatalf("revoked at %v, want %v", got.RevokedAt, at(5))
			}
			if n := len(opsOf(t, s, "key.revoke")); n < 1 {
				t.Fatal("a revocation appended no entry")
			}
		},
		"TouchKey": func(t *testing.T, s lockstep.Store) {
			mustKey(t, s, "key_a", "lsk_aaaaaaaa", at(0))
			must(t, s.TouchKey(bg, "key_a", at(7)))
			got, err := s.KeyByPrefix(bg, "lsk_aaaaaaaa")
			must(t, err)
			if got.LastUsedAt == nil || !got.LastUsedAt.Equal(at(7)) {
				t.Fatalf("last used %v, want %v", got.LastUsedAt, at(7))
			}
			must(t, s.TouchKey(bg, "key_a", at(8)))
			got, _ = s.KeyByPrefix(bg, "lsk_aaaaaaaa")
			if !got.LastUsedAt.Equal(at(8)) {
				t.Fatalf("last used %v after a second touch, want %v", got.LastUsedAt, at(8))
			}
		},
		"CountKeys": func(t *testing.T, s lockstep.Store) {
			n, err := s.CountKeys(bg)
			must(t, err)
			if n != 0 {
				t.Fatalf("fresh store counts %d keys", n)
			}
			mustKey(t, s, "key_a", "lsk_aaaaaaaa", at(0))
			mustKey(t, s, "key_b", "lsk_bbbbbbbb", at(1))
			must(t, s.RevokeKey(bg, "key_a", at(2), ent("key.revoke")))
			if n, _ = s.CountKeys(bg); n != 1 {
				t.Fatalf("CountKeys = %d, want 1 (revoked keys do not count)", n)
			}
		},
	}
}
