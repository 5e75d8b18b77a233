package storetest

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep"
)

// packStore returns s as a PackStore. Only stores of object-storage mode
// need one (lockstep.Store does not include it); a store without it skips
// these tests, saying so.
func packStore(t *testing.T, s lockstep.Store) lockstep.PackStore {
	t.Helper()
	ps, ok := s.(lockstep.PackStore)
	if !ok {
		t.Skipf("%T does not implement lockstep.PackStore", s)
	}
	return ps
}

// packTest is the contract of one PackStore method; s is the same store.
type packTest func(t *testing.T, s lockstep.Store, ps lockstep.PackStore)

func pk(network string, n int) lockstep.PackRecord {
	return lockstep.PackRecord{Network: network, Hash: oid(n), PackBytes: int64(1000 + n), IdxBytes: int64(100 + n), Objects: n}
}

func gen(t *testing.T, ps lockstep.PackStore, network string) int64 {
	t.Helper()
	g, err := ps.NetworkGeneration(bg, network)
	must(t, err)
	return g
}

func mustRegister(t *testing.T, ps lockstep.PackStore, p lockstep.PackRecord) int64 {
	t.Helper()
	g, err := ps.RegisterPack(bg, p)
	must(t, err)
	return g
}

func packList(t *testing.T, ps lockstep.PackStore, network string) ([]lockstep.PackRecord, int64) {
	t.Helper()
	list, g, err := ps.NetworkPacks(bg, network)
	must(t, err)
	return list, g
}

// packState is "hash:live|retired ..." oldest first, and the generation.
func packState(t *testing.T, ps lockstep.PackStore, network string) string {
	t.Helper()
	list, g := packList(t, ps, network)
	var out []string
	for _, p := range list {
		st := "live"
		if !p.Live() {
			st = "retired"
		}
		out = append(out, p.Hash[36:]+":"+st)
	}
	return fmt.Sprintf("%v gen %d", out, g)
}

func mustClaimLease(t *testing.T, ps lockstep.PackStore, name, holder string, ttl time.Duration, want bool) {
	t.Helper()
	ok, err := ps.ClaimLease(bg, name, holder, ttl)
	must(t, err)
	if ok != want {
		t.Fatalf("ClaimLease(%s, %s, %v) = %v, want %v", name, holder, ttl, ok, want)
	}
}

func packTests() map[string]test {
	ts := map[string]packTest{
		"RegisterInlinePack": func(t *testing.T, s lockstep.Store, ps lockstep.PackStore) {
			ips, ok := ps.(lockstep.InlinePackStore)
			if !ok {
				t.Skipf("%T does not implement lockstep.InlinePackStore", ps)
			}
			pack, idx := []byte("PACK\x00\x01 bytes of a small pack"), []byte("index\x00\xff")
			p := lockstep.PackRecord{Network: "net", Hash: oid(1), PackBytes: int64(len(pack)), IdxBytes: int64(len(idx)), Objects: 1}
			g, err := ips.RegisterInlinePack(bg, p, pack, idx)
			must(t, err)
			if g != 1 {
				t.Fatalf("inline pack: generation %d, want 1", g)
			}
			mustRegister(t, ps, pk("net", 2)) // a bucket pack beside it
			list, g := packList(t, ps, "net")
			if len(list) != 2 || g != 2 || list[0].Hash != oid(1) || !list[0].Inline || list[1].Inline || !list[0].Live() {
				t.Fatalf("pack list: %+v gen %d, want the inline pack then the bucket pack", list, g)
			}
			gp, gi, err := ips.InlinePack(bg, "net", oid(1))
			must(t, err)
			if string(gp) != string(pack) || string(gi) != string(idx) {
				t.Fatalf("InlinePack = %q, %q; want %q, %q", gp, gi, pack, idx)
			}
			// A bucket pack, an unknown one: not_found.
			_, _, err = ips.InlinePack(bg, "net", oid(2))
			wantCode(t, err, lockstep.ENOTFOUND)
			_, _, err = ips.InlinePack(bg, "net", oid(7))
			wantCode(t, err, lockstep.ENOTFOUND)
			// Sizes that are not the bytes', missing bytes: refused, nothing registered.
			bad := p
			bad.Hash, bad.PackBytes = oid(3), 1
			_, err = ips.RegisterInlinePack(bg, bad, pack, idx)
			wantCode(t, err, lockstep.EINVALID)
			bad.PackBytes = int64(len(pack))
			_, err = ips.RegisterInlinePack(bg, bad, pack, nil)
			wantCode(t, err, lockstep.EINVALID)
			if got := packState(t, ps, "net"); got != "[0001:live 0002:live] gen 2" {
				t.Fatalf("after refused inline packs: %s", got)
			}
			// Registered again: nothing changes.
			g, err = ips.RegisterInlinePack(bg, p, pack, idx)
			must(t, err)
			if g != 2 {
				t.Fatalf("re-register: generation %d, want 2", g)
			}
			// Retired by a compaction, then deleted (bucket GC): its bytes go with the record.
			_, err = ps.ReplacePacks(bg, pk("net", 4), []string{oid(1)})
			must(t, err)
			must(t, ps.DeletePackRecord(bg, "net", oid(1)))
			_, _, err = ips.InlinePack(bg, "net", oid(1))
			wantCode(t, err, lockstep.ENOTFOUND)
		},
		"InlinePack": func(t *testing.T, s lockstep.Store, ps lockstep.PackStore) {
			ips, ok := ps.(lockstep.InlinePackStore)
			if !ok {
				t.Skipf("%T does not implement lockstep.InlinePackStore", ps)
			}
			// Each network's own bytes.
			a, b := []byte("PACK a"), []byte("PACK bb")
			for _, x := range []struct {
				net  string
				pack []byte
				idx  []byte
			}{{"n1", a, []byte("idx a")}, {"n2", b, []byte("idx bb")}} {
				_, err := ips.RegisterInlinePack(bg, lockstep.PackRecord{Network: x.net, Hash: oid(1), PackBytes: int64(len(x.pack)), IdxBytes: int64(len(x.idx)), Objects: 1}, x.pack, x.idx)
				must(t, err)
			}
			gp, gi, err := ips.InlinePack(bg, "n1", oid(1))
			must(t, err)
			if string(gp) != "PACK a" || string(gi) != "idx a" {
				t.Fatalf("n1's inline pack: %q %q", gp, gi)
			}
			gp, gi, err = ips.InlinePack(bg, "n2", oid(1))
			must(t, err)
			if string(gp) != "PACK bb" || string(gi) != "idx bb" {
				t.Fatalf("n2's inline pack: %q %q", gp, gi)
			}
			_, _, err = ips.InlinePack(bg, "n3", oid(1))
			wantCode(t, err, lockstep.ENOTFOUND)
		},
		"RegisterPack": func(t *testing.T, s lockstep.Store, ps lockstep.PackStore) {
			if g := gen(t, ps, "net"); g != 0 {
				t.Fatalf("generation of a new network: %d, want 0", g)
			}
			if g := mustRegister(t, ps, pk("net", 1)); g != 1 {
				t.Fatalf("first pack: generation %d, want 1", g)
			}
			list, g := packList(t, ps, "net")
			if len(list) != 1 || g != 1 {
				t.Fatalf("after one pack: %+v gen %d", list, g)
			}
			p := list[0]
			if p.Network != "net" || p.Hash != oid(1) || p.PackBytes != 1001 || p.IdxBytes != 101 || p.Objects != 1 || !p.Live() || p.RegisteredAt.IsZero() {
				t.Fatalf("round trip: %+v", p)
			}
			// Registering it again (a retried write) changes nothing.
			if g := mustRegister(t, ps, pk("net", 1)); g != 1 {
				t.Fatalf("re-register: generation %d, want 1", g)
			}
			if g := mustRegister(t, ps, pk("net", 2)); g != 2 {
				t.Fatalf("second pack: generation %d, want 2", g)
			}
			// A retired pack registered again stays retired.
			if _, err := ps.ReplacePacks(bg, pk("net", 3), []string{oid(1)}); err != nil {
				t.Fatal(err)
			}
			if g := mustRegister(t, ps, pk("net", 1)); g != 3 {
				t.Fatalf("re-register of a retired pack: generation %d, want 3", g)
			}
			if got := packState(t, ps, "net"); got != "[0001:retired 0002:live 0003:live] gen 3" {
				t.Fatalf("state %s", got)
			}
			// Malformed records are refused and change nothing.
			for _, bad := range []lockstep.PackRecord{
				{Network: "net", Hash: "abc"},
				{Network: "net", Hash: "ABCDEF0123456789ABCDEF0123456789ABCDEF01"},
				{Network: "", Hash: oid(9)},
				{Network: "net", Hash: oid(9), PackBytes: -1},
			} {
				_, err := ps.RegisterPack(bg, bad)
				wantCode(t, err, lockstep.EINVALID)
			}
			if got := packState(t, ps, "net"); got != "[0001:retired 0002:live 0003:live] gen 3" {
				t.Fatalf("after refused records: %s", got)
			}
			// Networks are independent.
			if g := gen(t, ps, "other"); g != 0 {
				t.Fatalf("another network moved to %d", g)
			}
			if g := mustRegister(t, ps, pk("other", 1)); g != 1 {
				t.Fatalf("same hash in another network: generation %d, want 1", g)
			}
			if g := gen(t, ps, "net"); g != 3 {
				t.Fatalf("a pack of another network moved net to %d", g)
			}
		},
		"RegisterPack/concurrent": func(t *testing.T, s lockstep.Store, ps lockstep.PackStore) {
			// A first pack puts the network at some generation.
			mustRepo(t, s, "net", "", lockstep.Ref{Name: mainRef, OID: oid(1)})
			mustRegister(t, ps, pk("net", 1))
			initial := gen(t, ps, "net")
			if initial != 1 {
				t.Fatalf("one pack: generation %d, want 1", initial)
			}
			const n = 16
			gens := make([]int64, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			for i := 0; i < n; i++ {
				wg.Add(1)
				go func(i int) {
					defer wg.Done()
					gens[i], errs[i] = ps.RegisterPack(bg, pk("net", 100+i))
				}(i)
			}
			wg.Wait()
			for _, err := range errs {
				must(t, err)
			}
			if g := gen(t, ps, "net"); g != initial+n {
				t.Fatalf("generation %d after %d concurrent packs, want %d", g, n, initial+n)
			}
			// Each registration saw its own bump.
			slices.Sort(gens)
			for i, g := range gens {
				if g != initial+int64(i)+1 {
					t.Fatalf("returned generations %v, want %d..%d once each", gens, initial+1, initial+n)
				}
			}
			if list, g := packList(t, ps, "net"); len(list) != n+1 || g != initial+n {
				t.Fatalf("%d packs at generation %d, want %d at %d", len(list), g, n+1, initial+n)
			}
		},
		"ReplacePacks": func(t *testing.T, s lockstep.Store, ps lockstep.PackStore) {
			for i := 1; i <= 3; i++ {
				mustRegister(t, ps, pk("net", i))
			}
			// Two retired, one registered, one bump.
			g, err := ps.ReplacePacks(bg, pk("net", 4), []string{oid(2), oid(1), oid(1)})
			must(t, err)
			if g != 4 {
				t.Fatalf("replace: generation %d, want 4", g)
			}
			const after = "[0001:retired 0002:retired 0003:live 0004:live] gen 4"
			if got := packState(t, ps, "net"); got != after {
				t.Fatalf("after replace: %s", got)
			}
			list, _ := packList(t, ps, "net")
			if list[0].RetiredAt.IsZero() || list[0].RetiredAt.Before(list[0].RegisteredAt) {
				t.Fatalf("retired record %+v: want a retirement time after its registration", list[0])
			}
			// One pack of old already retired (another compaction won): a
			// ref_conflict, and nothing changes — the new pack is not
			// registered, the live one is not retired.
			_, err = ps.ReplacePacks(bg, pk("net", 5), []string{oid(3), oid(1)})
			wantCode(t, err, lockstep.EREFCONFLICT)
			// A pack of old never registered: the same.
			_, err = ps.ReplacePacks(bg, pk("net", 5), []string{oid(3), oid(99)})
			wantCode(t, err, lockstep.EREFCONFLICT)
			// A pack of another network is not this network's.
			mustRegister(t, ps, pk("other", 50))
			_, err = ps.ReplacePacks(bg, pk("net", 5), []string{oid(50)})
			wantCode(t, err, lockstep.EREFCONFLICT)
			// A retired pack is never made live again.
			_, err = ps.ReplacePacks(bg, pk("net", 1), []string{oid(3)})
			wantCode(t, err, lockstep.ECONFLICT)
			// A pack cannot replace itself; malformed names are refused.
			_, err = ps.ReplacePacks(bg, pk("net", 5), []string{oid(5)})
			wantCode(t, err, lockstep.EINVALID)
			_, err = ps.ReplacePacks(bg, pk("net", 5), []string{"nope"})
			wantCode(t, err, lockstep.EINVALID)
			if got := packState(t, ps, "net"); got != after {
				t.Fatalf("refused replaces changed %s into %s", after, got)
			}
			// The new pack may already be live (registered by a write):
			// the old ones are retired, it stays.
			g, err = ps.ReplacePacks(bg, pk("net", 4), []string{oid(3)})
			must(t, err)
			if g != 5 {
				t.Fatalf("replace into a live pack: generation %d, want 5", g)
			}
			if got := packState(t, ps, "net"); got != "[0001:retired 0002:retired 0003:retired 0004:live] gen 5" {
				t.Fatalf("after replace into a live pack: %s", got)
			}
		},
		"ReplacePacks/concurrent": func(t *testing.T, s lockstep.Store, ps lockstep.PackStore) {
			// Two compactions of overlapping packs: exactly one wins, the
			// other is a ref_conflict and registered nothing.
			for i := 1; i <= 3; i++ {
				mustRegister(t, ps, pk("net", i))
			}
			errs := make([]error, 2)
			var wg sync.WaitGroup
			for i, old := range [][]string{{oid(1), oid(2)}, {oid(2), oid(3)}} {
				wg.Add(1)
				go func(i int, old []string) {
					defer wg.Done()
					_, errs[i] = ps.ReplacePacks(bg, pk("net", 10+i), old)
				}(i, old)
			}
			wg.Wait()
			won := -1
			for i, err := range errs {
				if err == nil {
					if won >= 0 {
						t.Fatal("both overlapping compactions committed")
					}
					won = i
					continue
				}
				wantCode(t, err, lockstep.EREFCONFLICT)
			}
			if won < 0 {
				t.Fatalf("no compaction committed: %v", errs)
			}
			want := map[int]string{
				0: "[0001:retired 0002:retired 0003:live 000a:live] gen 4",
				1: "[0001:live 0002:retired 0003:retired 000b:live] gen 4",
			}[won]
			if got := packState(t, ps, "net"); got != want {
				t.Fatalf("compaction %d won: state %s, want %s", won, got, want)
			}
		},
		"NetworkPacks": func(t *testing.T, s lockstep.Store, ps lockstep.PackStore) {
			list, g := packList(t, ps, "net")
			if len(list) != 0 || g != 0 {
				t.Fatalf("unknown network: %+v gen %d, want nothing at 0", list, g)
			}
			// Oldest first, whatever the names (registered in descending
			// hash order; the pauses only make the registration times
			// distinct).
			for _, n := range []int{3, 2, 1} {
				mustRegister(t, ps, pk("net", n))
				time.Sleep(2 * time.Millisecond)
			}
			if got := packState(t, ps, "net"); got != "[0003:live 0002:live 0001:live] gen 3" {
				t.Fatalf("order: %s, want oldest first", got)
			}
			list, _ = packList(t, ps, "net")
			for i := 1; i < len(list); i++ {
				if list[i].RegisteredAt.Before(list[i-1].RegisteredAt) {
					t.Fatalf("record %d registered before record %d: %+v", i, i-1, list)
				}
			}
			// A network whose refs moved but that has no packs: no
			// records, generation 0 (refs do not move it).
			mustRepo(t, s, "refsonly", "", lockstep.Ref{Name: mainRef, OID: oid(1)})
			if list, g := packList(t, ps, "refsonly"); len(list) != 0 || g != 0 {
				t.Fatalf("refs-only network: %+v gen %d, want no packs at generation 0", list, g)
			}
		},
		"NetworkPacks/snapshot": func(t *testing.T, s lockstep.Store, ps lockstep.PackStore) {
			// Only registrations move this network, one bump each: every
			// snapshot taken while they run holds exactly g packs.
			const n = 30
			done := make(chan error, 1)
			go func() {
				for i := 1; i <= n; i++ {
					if _, err := ps.RegisterPack(bg, pk("net", i)); err != nil {
						done <- err
						return
					}
				}
				done <- nil
			}()
			reads := 0
			for finished := false; !finished; reads++ {
				select {
				case err := <-done:
					must(t, err)
					finished = true
				default:
				}
				list, g, err := ps.NetworkPacks(bg, "net")
				must(t, err)
				if int64(len(list)) != g {
					t.Fatalf("snapshot of %d packs at generation %d (read %d)", len(list), g, reads)
				}
			}
			if list, g := packList(t, ps, "net"); len(list) != n || g != n {
				t.Fatalf("final: %d packs at %d, want %d", len(list), g, n)
			}
		},
		"NetworkGeneration": func(t *testing.T, s lockstep.Store, ps lockstep.PackStore) {
			if g := gen(t, ps, "base"); g != 0 {
				t.Fatalf("unknown network: %d, want 0", g)
			}
			// Only the pack list moves the generation: a cache that holds
			// every live pack is up to date whatever the refs do (a ref
			// names objects of packs registered before it moved).
			last := int64(0)
			moved := func(what string) {
				t.Helper()
				g := gen(t, ps, "base")
				if g <= last {
					t.Fatalf("%s: generation %d, want more than %d", what, g, last)
				}
				last = g
			}
			still := func(what string) {
				t.Helper()
				if g := gen(t, ps, "base"); g != last {
					t.Fatalf("%s: generation %d, want %d", what, g, last)
				}
			}
			base := mustRepo(t, s, "base", "", lockstep.Ref{Name: mainRef, OID: oid(1)})
			still("CreateRepo with a ref")
			must(t, s.UpdateRefs(bg, []lockstep.RefUpdate{upd(base, mainRef, oid(1), oid(2))}, nil, nil, ent("push")))
			must(t, s.UpdateRefs(bg, []lockstep.RefUpdate{upd(base, "refs/heads/dev", lockstep.ZeroOID, oid(3))}, nil, nil, ent("push")))
			must(t, s.UpdateRefs(bg, []lockstep.RefUpdate{upd(base, "refs/heads/dev", oid(3), lockstep.ZeroOID)}, nil, nil, ent("push")))
			ws := mustRepo(t, s, "base-ws", "base", lockstep.Ref{Name: mainRef, OID: oid(2)})
			must(t, s.UpdateRefsAndStatus(bg, []lockstep.RefUpdate{upd(base, mainRef, oid(2), oid(4))}, nil, nil, ent("promote"),
				lockstep.StatusChange{RepoID: ws.ID, Repo: ws.Name, From: lockstep.StatusActive, To: lockstep.StatusPromoted, Entry: ent("status")}))
			still("refs created, moved, deleted; a workspace; a promote")
			mustRegister(t, ps, pk("base", 1))
			moved("pack registered")
			must(t, s.UpdateRefs(bg, []lockstep.RefUpdate{upd(base, mainRef, oid(4), oid(5))}, nil, nil, ent("push")))
			still("a ref moved after a registration")
			mustRegister(t, ps, pk("base", 1))
			still("the same pack registered again")
			mustRegister(t, ps, pk("base", 2))
			moved("a second pack")
			// Another network's packs do not move this one.
			mustRegister(t, ps, pk("other", 1))
			still("a pack of another network")
			if g := gen(t, ps, "other"); g != 1 {
				t.Fatalf("the other network: generation %d, want 1", g)
			}
		},
		"NetworkRefs": func(t *testing.T, s lockstep.Store, ps lockstep.PackStore) {
			refs, err := ps.NetworkRefs(bg, "m")
			must(t, err)
			if len(refs) != 0 {
				t.Fatalf("unknown network: %+v", refs)
			}
			mustRepo(t, s, "m", "", lockstep.Ref{Name: "refs/tags/v1", OID: oid(3)}, lockstep.Ref{Name: "refs/heads/z", OID: oid(2)}, lockstep.Ref{Name: mainRef, OID: oid(1)})
			mustRepo(t, s, "a-ws", "m", lockstep.Ref{Name: mainRef, OID: oid(4)})
			mustRepo(t, s, "x", "", lockstep.Ref{Name: mainRef, OID: oid(5)})
			refs, err = ps.NetworkRefs(bg, "m")
			must(t, err)
			var got []string
			for _, r := range refs {
				if r.UpdatedAt.IsZero() {
					t.Fatalf("ref without a time: %+v", r)
				}
				got = append(got, r.Repo+" "+r.Name+" "+r.OID[36:])
			}
			want := []string{"a-ws refs/heads/main 0004", "m refs/heads/main 0001", "m refs/heads/z 0002", "m refs/tags/v1 0003"}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("NetworkRefs(m) = %q, want %q (by repository, then ref)", got, want)
			}
		},
		"PackNetworks": func(t *testing.T, s lockstep.Store, ps lockstep.PackStore) {
			nets, err := ps.PackNetworks(bg)
			must(t, err)
			if len(nets) != 0 {
				t.Fatalf("fresh store: %v", nets)
			}
			mustRegister(t, ps, pk("n2", 1))
			mustRegister(t, ps, pk("n1", 1))
			mustRegister(t, ps, pk("n1", 2))
			// A network whose packs are all retired still has records.
			mustRegister(t, ps, pk("n3", 1))
			_, err = ps.ReplacePacks(bg, pk("n3", 2), []string{oid(1)})
			must(t, err)
			// Refs alone do not make a pack network.
			mustRepo(t, s, "n0", "", lockstep.Ref{Name: mainRef, OID: oid(1)})
			nets, err = ps.PackNetworks(bg)
			must(t, err)
			if fmt.Sprint(nets) != "[n1 n2 n3]" {
				t.Fatalf("PackNetworks = %v, want [n1 n2 n3]", nets)
			}
		},
		"DeletePackRecord": func(t *testing.T, s lockstep.Store, ps lockstep.PackStore) {
			mustRegister(t, ps, pk("net", 1))
			mustRegister(t, ps, pk("net", 2))
			_, err := ps.ReplacePacks(bg, pk("net", 3), []string{oid(1)})
			must(t, err)
			// A live pack's record is refused.
			err = ps.DeletePackRecord(bg, "net", oid(2))
			wantCode(t, err, lockstep.EINVALID)
			const before = "[0001:retired 0002:live 0003:live] gen 3"
			if got := packState(t, ps, "net"); got != before {
				t.Fatalf("refused delete: %s", got)
			}
			// A retired one goes, and the generation stays.
			must(t, ps.DeletePackRecord(bg, "net", oid(1)))
			if got := packState(t, ps, "net"); got != "[0002:live 0003:live] gen 3" {
				t.Fatalf("after delete: %s", got)
			}
			// Unknown packs (the one just deleted, one of another
			// network) are not errors.
			must(t, ps.DeletePackRecord(bg, "net", oid(1)))
			must(t, ps.DeletePackRecord(bg, "elsewhere", oid(2)))
			if got := packState(t, ps, "net"); got != "[0002:live 0003:live] gen 3" {
				t.Fatalf("after deleting unknown packs: %s", got)
			}
			wantCode(t, ps.DeletePackRecord(bg, "net", "not-a-hash"), lockstep.EINVALID)
		},
		"ClaimLease": func(t *testing.T, s lockstep.Store, ps lockstep.PackStore) {
			const name = "compact:net"
			mustClaimLease(t, ps, name, "r1", time.Hour, true)
			// Held: another holder is refused, the holder extends it.
			mustClaimLease(t, ps, name, "r2", time.Hour, false)
			mustClaimLease(t, ps, name, "r1", time.Hour, true)
			// Names are independent.
			mustClaimLease(t, ps, "gc", "r2", time.Hour, true)
			// Expired: anyone takes it, and then the old holder is refused.
			mustClaimLease(t, ps, "short", "r1", time.Millisecond, true)
			time.Sleep(20 * time.Millisecond)
			mustClaimLease(t, ps, "short", "r2", time.Hour, true)
			mustClaimLease(t, ps, "short", "r1", time.Hour, false)
			// Extended: a short lease claimed again for long outlives its
			// first end.
			mustClaimLease(t, ps, "ext", "r1", time.Millisecond, true)
			mustClaimLease(t, ps, "ext", "r1", time.Hour, true)
			time.Sleep(20 * time.Millisecond)
			mustClaimLease(t, ps, "ext", "r2", time.Hour, false)
			// Malformed claims.
			for _, c := range []struct {
				name, holder string
				ttl          time.Duration
			}{{"", "r1", time.Hour}, {"x", "", time.Hour}, {"x", "r1", 0}, {"x", "r1", -time.Second}} {
				_, err := ps.ClaimLease(bg, c.name, c.holder, c.ttl)
				wantCode(t, err, lockstep.EINVALID)
			}
			mustClaimLease(t, ps, "x", "r2", time.Hour, true)
		},
		"ClaimLease/concurrent": func(t *testing.T, s lockstep.Store, ps lockstep.PackStore) {
			// Free, and then expired: of 8 claimants exactly one wins.
			mustClaimLease(t, ps, "expired", "old", time.Millisecond, true)
			time.Sleep(20 * time.Millisecond)
			for _, name := range []string{"free", "expired"} {
				const n = 8
				got := make([]bool, n)
				errs := make([]error, n)
				var wg sync.WaitGroup
				for i := 0; i < n; i++ {
					wg.Add(1)
					go func(i int) {
						defer wg.Done()
						got[i], errs[i] = ps.ClaimLease(bg, name, fmt.Sprintf("replica-%d", i), time.Hour)
					}(i)
				}
				wg.Wait()
				winners := 0
				winner := ""
				for i := range got {
					must(t, errs[i])
					if got[i] {
						winners++
						winner = fmt.Sprintf("replica-%d", i)
					}
				}
				if winners != 1 {
					t.Fatalf("%s lease: %d of %d claimants hold it, want exactly 1", name, winners, n)
				}
				// The winner holds it; a loser still cannot take it.
				mustClaimLease(t, ps, name, winner, time.Hour, true)
				mustClaimLease(t, ps, name, "someone-else", time.Hour, false)
			}
		},
		"ReleaseLease": func(t *testing.T, s lockstep.Store, ps lockstep.PackStore) {
			mustClaimLease(t, ps, "gc", "r1", time.Hour, true)
			// Released by someone who does not hold it: still r1's.
			must(t, ps.ReleaseLease(bg, "gc", "r2"))
			mustClaimLease(t, ps, "gc", "r2", time.Hour, false)
			mustClaimLease(t, ps, "gc", "r1", time.Hour, true)
			// Released by its holder: free.
			must(t, ps.ReleaseLease(bg, "gc", "r1"))
			mustClaimLease(t, ps, "gc", "r2", time.Hour, true)
			// Releasing twice, or an unknown lease, is not an error.
			must(t, ps.ReleaseLease(bg, "gc", "r1"))
			must(t, ps.ReleaseLease(bg, "never", "r1"))
			mustClaimLease(t, ps, "gc", "r1", time.Hour, false)
		},
	}
	out := map[string]test{}
	for name, fn := range ts {
		out[name] = func(t *testing.T, s lockstep.Store) { fn(t, s, packStore(t, s)) }
	}
	return out
}
