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

			// A minted key: expiry, parent, scope round-trip; its entries
			// name its parent in their details, inside the hash chain.
			exp := at(3600)
			child := &lockstep.Key{ID: "key_c", Name: "child", Role: lockstep.RoleAgent, Prefix: "lsk_cccccccc", Hash: []byte("h"), CreatedAt: at(1),
				ExpiresAt: &exp, ParentKeyID: "key_a", Scope: &lockstep.KeyScope{Base: "app", Task: "t1", Owner: "key_a"}}
			must(t, s.CreateKey(bg, child, ent("key.create")))
			got, err = s.KeyByPrefix(bg, "lsk_cccccccc")
			must(t, err)
			if got.ExpiresAt == nil || !got.ExpiresAt.Equal(exp) || got.ParentKeyID != "key_a" || got.Scope == nil ||
				*got.Scope != (lockstep.KeyScope{Base: "app", Task: "t1", Owner: "key_a"}) || got.QuotaWorkspaces != nil {
				t.Fatalf("minted key round trip: %+v", got)
			}
			must(t, s.AppendOp(bg, &lockstep.OpEntry{KeyID: "key_c", KeyName: "child", Op: "push"}))
			must(t, s.AppendOp(bg, &lockstep.OpEntry{KeyID: "key_a", KeyName: "name-key_a", Op: "push"}))
			pushes := opsOf(t, s, "push")
			if len(pushes) != 2 || pushes[0].Details["parent_key_id"] != "key_a" || pushes[1].Details["parent_key_id"] != nil {
				t.Fatalf("push entries %+v %+v: want the minted key's naming its parent, the other none", pushes[0].Details, pushes[1].Details)
			}
			wantChain(t, s, 4)
			// A revoked parent mints nothing.
			must(t, s.RevokeKey(bg, "key_a", at(2), ent("key.revoke")))
			late := &lockstep.Key{ID: "key_d", Name: "late", Role: lockstep.RoleAgent, Prefix: "lsk_dddddddd", Hash: []byte("h"), CreatedAt: at(3), ParentKeyID: "key_a"}
			wantCode(t, s.CreateKey(bg, late, ent("key.create")), lockstep.EUNAUTH)
		},
		"SetKeyQuota": func(t *testing.T, s lockstep.Store) {
			mustKey(t, s, "key_a", "lsk_aaaaaaaa", at(0))
			five, ten := 5, 10
			big := int64(1) << 40
			wantCode(t, s.SetKeyQuota(bg, "key_missing", lockstep.KeyQuota{Workspaces: &five}, ent("key.quota")), lockstep.ENOTFOUND)
			wantOps(t, s, "key.quota", 0)
			must(t, s.SetKeyQuota(bg, "key_a", lockstep.KeyQuota{Workspaces: &five, StorageBytes: &big, Runs: &ten}, ent("key.quota")))
			got, _ := s.KeyByPrefix(bg, "lsk_aaaaaaaa")
			if got.QuotaWorkspaces == nil || *got.QuotaWorkspaces != 5 {
				t.Fatalf("quota %v, want 5", got.QuotaWorkspaces)
			}
			if got.QuotaStorageBytes == nil || *got.QuotaStorageBytes != big || got.QuotaRuns == nil || *got.QuotaRuns != 10 {
				t.Fatalf("storage %v runs %v, want %d and 10", got.QuotaStorageBytes, got.QuotaRuns, big)
			}
			keys, err := s.ListKeys(bg)
			must(t, err)
			if len(keys) != 1 || keys[0].QuotaStorageBytes == nil || *keys[0].QuotaStorageBytes != big || keys[0].QuotaRuns == nil || *keys[0].QuotaRuns != 10 {
				t.Fatalf("ListKeys does not carry the overrides: %+v", keys)
			}
			zero, zero64 := 0, int64(0)
			must(t, s.SetKeyQuota(bg, "key_a", lockstep.KeyQuota{Workspaces: &zero, StorageBytes: &zero64, Runs: &zero}, ent("key.quota")))
			if got, _ = s.KeyByPrefix(bg, "lsk_aaaaaaaa"); got.QuotaWorkspaces == nil || *got.QuotaWorkspaces != 0 ||
				got.QuotaStorageBytes == nil || *got.QuotaStorageBytes != 0 || got.QuotaRuns == nil || *got.QuotaRuns != 0 {
				t.Fatalf("quota %v %v %v, want 0 (unlimited, not the default)", got.QuotaWorkspaces, got.QuotaStorageBytes, got.QuotaRuns)
			}
			must(t, s.SetKeyQuota(bg, "key_a", lockstep.KeyQuota{Runs: &ten}, ent("key.quota")))
			if got, _ = s.KeyByPrefix(bg, "lsk_aaaaaaaa"); got.QuotaWorkspaces != nil || got.QuotaStorageBytes != nil || got.QuotaRuns == nil || *got.QuotaRuns != 10 {
				t.Fatalf("quota %+v, want only runs 10 (the others cleared)", got)
			}
			must(t, s.SetKeyQuota(bg, "key_a", lockstep.KeyQuota{}, ent("key.quota")))
			if got, _ = s.KeyByPrefix(bg, "lsk_aaaaaaaa"); got.QuotaWorkspaces != nil || got.QuotaStorageBytes != nil || got.QuotaRuns != nil {
				t.Fatalf("quota %+v after clearing, want nil (the default)", got)
			}
			wantOps(t, s, "key.quota", 4)
		},
		"CountOwnedWorkspaces": func(t *testing.T, s lockstep.Store) {
			mustRepo(t, s, "app", "")
			mk := func(name, owner string, st lockstep.Status) {
				r := &lockstep.Repo{Name: name, Network: "app", ForkOf: "app", DefaultBranch: "main", Status: st, OwnerKeyID: owner, OwnerName: owner}
				must(t, s.CreateRepo(bg, r, nil, ent("fork")))
			}
			mk("ws1", "key_a", lockstep.StatusActive)
			mk("ws2", "key_a", lockstep.StatusActive)
			mk("ws3", "key_a", lockstep.StatusAbandoned)
			mk("ws4", "key_b", lockstep.StatusActive)
			base := &lockstep.Repo{Name: "lib", Network: "lib", DefaultBranch: "main", Status: lockstep.StatusActive, OwnerKeyID: "key_a"}
			must(t, s.CreateRepo(bg, base, nil, ent("repo.create")))
			n, err := s.CountOwnedWorkspaces(bg, "key_a")
			must(t, err)
			if n != 2 {
				t.Fatalf("CountOwnedWorkspaces = %d, want 2 (active workspaces only; no base, not abandoned)", n)
			}
			if n, _ = s.CountOwnedWorkspaces(bg, "key_none"); n != 0 {
				t.Fatalf("CountOwnedWorkspaces of a key owning nothing = %d", n)
			}
		},
		"KeyStorageBytes": func(t *testing.T, s lockstep.Store) {
			mustRepo(t, s, "app", "")
			mk := func(name, owner string) *lockstep.Repo {
				r := &lockstep.Repo{Name: name, Network: "app", ForkOf: "app", DefaultBranch: "main", Status: lockstep.StatusActive, OwnerKeyID: owner, OwnerName: owner}
				must(t, s.CreateRepo(bg, r, nil, ent("fork")))
				return r
			}
			_, ws2, _ := mk("ws1", "key_a"), mk("ws2", "key_a"), mk("ws3", "key_b")
			write := func(repo, key string, bytes int64, result string) {
				must(t, s.AppendOp(bg, &lockstep.OpEntry{KeyID: key, KeyName: key, Op: "push", Repo: repo, Objects: 1, Bytes: bytes, Result: result}))
			}
			write("ws1", "key_a", 1000, "")
			write("ws1", "key_x", 200, "") // another key writing into key_a's workspace counts for its owner
			write("ws1", "key_a", 5000, "refused")
			write("ws2", "key_a", 30, "")
			write("ws3", "key_b", 7, "")
			write("app", "key_a", 90000, "") // the base repository is not a workspace
			n, err := s.KeyStorageBytes(bg, "key_a")
			must(t, err)
			if n != 1230 {
				t.Fatalf("KeyStorageBytes = %d, want 1230 (successful writes into key_a's active workspaces)", n)
			}
			setStatus(t, s, ws2, lockstep.StatusAbandoned, "workspace.abandoned")
			if n, _ = s.KeyStorageBytes(bg, "key_a"); n != 1200 {
				t.Fatalf("KeyStorageBytes after abandoning ws2 = %d, want 1200", n)
			}
			if n, _ = s.KeyStorageBytes(bg, "key_none"); n != 0 {
				t.Fatalf("KeyStorageBytes of a key owning nothing = %d", n)
			}
		},
		"PurgeRepo": func(t *testing.T, s lockstep.Store) {
			base := mustRepo(t, s, "base", "", lockstep.Ref{Name: "refs/heads/main", OID: oid(1)})
			r := &lockstep.Repo{Name: "ws", Network: "base", ForkOf: "base", DefaultBranch: "main", Status: lockstep.StatusActive, OwnerKeyID: "k1", OwnerName: "k1"}
			must(t, s.CreateRepo(bg, r, []lockstep.Ref{{Name: "refs/heads/main", OID: oid(1)}, {Name: "refs/heads/x", OID: oid(2)}}, ent("fork")))
			mustCheckpoint(t, s, r, "ckpt_1", 1)
			_, err := s.PurgeRepo(bg, 999999, ent("workspace.purge"))
			wantCode(t, err, lockstep.ENOTFOUND)
			// An active workspace is abandoned first.
			_, err = s.PurgeRepo(bg, r.ID, ent("workspace.purge"))
			wantCode(t, err, lockstep.EINVALID)
			wantOps(t, s, "workspace.purge", 0)
			setStatus(t, s, r, lockstep.StatusAbandoned, "workspace.abandoned")
			refs, err := s.PurgeRepo(bg, r.ID, ent("workspace.purge"))
			must(t, err)
			if len(refs) != 2 || refs[0].Name != "refs/heads/main" || refs[1].OID != oid(2) {
				t.Fatalf("PurgeRepo returned %+v", refs)
			}
			if left, _ := s.Refs(bg, r.ID); len(left) != 0 {
				t.Fatalf("refs left after purge: %+v", left)
			}
			if left, _ := s.Refs(bg, base.ID); len(left) != 1 {
				t.Fatalf("the base's refs changed: %+v", left)
			}
			if cs, _ := s.Checkpoints(bg, r.ID, 100); len(cs) != 0 {
				t.Fatalf("checkpoint records left after purge: %+v", cs)
			}
			ops := opsOf(t, s, "workspace.purge")
			if len(ops) != 1 || len(ops[0].Refs) != 2 || ops[0].Refs[0].New != lockstep.ZeroOID || ops[0].Details["checkpoints"] != float64(1) {
				t.Fatalf("purge entries %+v", ops)
			}
			if got, err := s.RepoByName(bg, "ws"); err != nil || got.Status != lockstep.StatusAbandoned {
				t.Fatalf("repository row after purge: %+v %v", got, err)
			}
			res, err := s.VerifyOps(bg)
			must(t, err)
			if !res.OK {
				t.Fatalf("chain after purge: %+v", res)
			}
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

			// Revocation cascades to the keys a key minted, transitively,
			// and to no other.
			mint := func(id, prefix, parent string) {
				must(t, s.CreateKey(bg, &lockstep.Key{ID: id, Name: id, Role: lockstep.RoleAgent, Prefix: prefix, Hash: []byte(id), CreatedAt: at(10), ParentKeyID: parent}, ent("key.create")))
			}
			mustKey(t, s, "key_p", "lsk_pppppppp", at(10))
			mint("key_c1", "lsk_c1c1c1c1", "key_p")
			mint("key_c2", "lsk_c2c2c2c2", "key_c1")
			mustKey(t, s, "key_o", "lsk_oooooooo", at(10))
			mint("key_oc", "lsk_ocococoo", "key_o")
			must(t, s.RevokeKey(bg, "key_p", at(20), ent("key.revoke")))
			for _, p := range []string{"lsk_pppppppp", "lsk_c1c1c1c1", "lsk_c2c2c2c2"} {
				if k, _ := s.KeyByPrefix(bg, p); k.RevokedAt == nil || !k.RevokedAt.Equal(at(20)) {
					t.Fatalf("%s revoked at %v after its ancestor's revocation, want %v", p, k.RevokedAt, at(20))
				}
			}
			for _, p := range []string{"lsk_oooooooo", "lsk_ocococoo"} {
				if k, _ := s.KeyByPrefix(bg, p); k.RevokedAt != nil {
					t.Fatalf("%s revoked by another key's revocation", p)
				}
			}
			revs := opsOf(t, s, "key.revoke")
			last := revs[len(revs)-1]
			if ch, _ := last.Details["children"].([]any); len(ch) != 2 {
				t.Fatalf("revocation entry details %v: want the 2 minted keys named", last.Details)
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
