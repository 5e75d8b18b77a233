package sqlstore_test

import (
	"context"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/internal/testenv"
	"github.com/lockstep-hq/lockstep/migrations"
	"github.com/lockstep-hq/lockstep/sqlstore"
)

// clock is an injected store clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *clock) Set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

func openAt(t *testing.T, url string, c *clock) *sqlstore.DB {
	t.Helper()
	db, err := sqlstore.Open(context.Background(), url, sqlstore.Options{Migrate: true, Now: c.Now})
	if err != nil {
		t.Fatalf("open %s: %v", url, err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func packRec(network string, n int) lockstep.PackRecord {
	return lockstep.PackRecord{Network: network, Hash: fmt.Sprintf("%040x", n), PackBytes: 10, IdxBytes: 2, Objects: 1}
}

// TestPacksAndLeasesOnTheStoreClock: registration and retirement times and
// lease expiry are the store's clock (Options.Now), to the microsecond; a
// lease is free from the instant it expires.
func TestPacksAndLeasesOnTheStoreClock(t *testing.T) {
	for name, url := range backendURLs(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			t0 := time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC)
			c := &clock{t: t0}
			db := openAt(t, url, c)

			if _, err := db.RegisterPack(ctx, packRec("net", 1)); err != nil {
				t.Fatal(err)
			}
			c.Set(t0.Add(time.Minute))
			if _, err := db.ReplacePacks(ctx, packRec("net", 2), []string{packRec("net", 1).Hash}); err != nil {
				t.Fatal(err)
			}
			list, g, err := db.NetworkPacks(ctx, "net")
			if err != nil {
				t.Fatal(err)
			}
			micro := t0.Truncate(time.Microsecond)
			if g != 2 || len(list) != 2 || !list[0].RegisteredAt.Equal(micro) || !list[0].RetiredAt.Equal(micro.Add(time.Minute)) ||
				!list[1].RegisteredAt.Equal(micro.Add(time.Minute)) || !list[1].Live() {
				t.Fatalf("records %+v gen %d: want registered at %v, retired and replaced at %v", list, g, micro, micro.Add(time.Minute))
			}

			claim := func(holder string, want bool) {
				t.Helper()
				ok, err := db.ClaimLease(ctx, "compact:net", holder, 10*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				if ok != want {
					t.Fatalf("at %v %s claims: %v, want %v", c.Now(), holder, ok, want)
				}
			}
			c.Set(t0)
			claim("r1", true)
			c.Set(t0.Add(10*time.Second - time.Microsecond))
			claim("r2", false)
			c.Set(t0.Add(10 * time.Second))
			claim("r2", true)
			claim("r1", false)
		})
	}
}

// TestMigration0010DownAndUp: the down migration removes the tables and
// the index (refs still move without them) and the up migration applies
// again on top; the generation follows packs, not refs.
func TestMigration0010DownAndUp(t *testing.T) {
	for name, url := range backendURLs(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			db := mustOpen(t, url)
			files, err := migrations.FS(db.Dialect())
			if err != nil {
				t.Fatal(err)
			}
			run := func(file string) {
				t.Helper()
				b, err := fs.ReadFile(files, file)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := db.SQL().ExecContext(ctx, string(b)); err != nil {
					t.Fatalf("%s: %v", file, err)
				}
			}
			r := &lockstep.Repo{Name: "base", Network: "base", DefaultBranch: "main"}
			oidN := func(n int) string { return fmt.Sprintf("%040x", n) }
			if err := db.CreateRepo(ctx, r, []lockstep.Ref{{Name: "refs/heads/main", OID: oidN(1)}}, entry("repo.create")); err != nil {
				t.Fatal(err)
			}
			run("0010_packs.down.sql")
			if _, err := db.NetworkGeneration(ctx, "base"); lockstep.ErrorCode(err) != lockstep.EINTERNAL {
				t.Fatalf("network_state after the down migration: %v, want it gone", err)
			}
			move := lockstep.RefUpdate{RepoID: r.ID, Repo: r.Name, Name: "refs/heads/main", Old: oidN(1), New: oidN(2)}
			if err := db.UpdateRefs(ctx, []lockstep.RefUpdate{move}, nil, nil, entry("push")); err != nil {
				t.Fatalf("a ref move after the down migration: %v", err)
			}
			run("0010_packs.up.sql")
			run("0027_inline_packs.up.sql") // the later migrations of network_packs
			run("0030_pack_changed_gen.up.sql")
			move.Old, move.New = oidN(2), oidN(3)
			if err := db.UpdateRefs(ctx, []lockstep.RefUpdate{move}, nil, nil, entry("push")); err != nil {
				t.Fatal(err)
			}
			if g, err := db.NetworkGeneration(ctx, "base"); err != nil || g != 0 {
				t.Fatalf("generation after the up migration and one ref move: %d, %v; want 0 (refs do not move it)", g, err)
			}
			if _, err := db.RegisterPack(ctx, lockstep.PackRecord{Network: "base", Hash: oidN(9), PackBytes: 10, IdxBytes: 10, Objects: 1}); err != nil {
				t.Fatal(err)
			}
			if g, err := db.NetworkGeneration(ctx, "base"); err != nil || g != 1 {
				t.Fatalf("generation after the up migration and one pack: %d, %v; want 1", g, err)
			}
			// 0027 down and up again: the records stay, inline packs work.
			run("0027_inline_packs.down.sql")
			run("0027_inline_packs.up.sql")
			pack, idx := []byte("pack bytes"), []byte("idx")
			if _, err := db.RegisterInlinePack(ctx, lockstep.PackRecord{Network: "base", Hash: oidN(10), PackBytes: int64(len(pack)), IdxBytes: int64(len(idx)), Objects: 1}, pack, idx); err != nil {
				t.Fatal(err)
			}
			if list, g, err := db.NetworkPacks(ctx, "base"); err != nil || g != 2 || len(list) != 2 || list[0].Inline || !list[1].Inline {
				t.Fatalf("after 0027 down and up and one inline pack: %+v gen %d, %v", list, g, err)
			}
		})
	}
}

// TestMigration0030StampsExistingPacks: a database holding pack records
// from before migration 0030 (live, retired, inline) gets each stamped
// with its network's generation, so a cache behind that generation lists
// them all (as the full list did) and a current cache lists none; later
// changes are listed alone, and a record an older version writes
// (changed_gen 0) is always listed.
func TestMigration0030StampsExistingPacks(t *testing.T) {
	for name, url := range backendURLs(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			db := mustOpen(t, url)
			files, err := migrations.FS(db.Dialect())
			if err != nil {
				t.Fatal(err)
			}
			run := func(file string) {
				t.Helper()
				b, err := fs.ReadFile(files, file)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := db.SQL().ExecContext(ctx, string(b)); err != nil {
					t.Fatalf("%s: %v", file, err)
				}
			}
			oidN := func(n int) string { return fmt.Sprintf("%040x", n) }
			rec := func(net string, n int) lockstep.PackRecord {
				return lockstep.PackRecord{Network: net, Hash: oidN(n), PackBytes: 10, IdxBytes: 3, Objects: 1}
			}
			pack, idx := []byte("pack bytes"), []byte("idx")
			// The data of the previous version: the column dropped after
			// the records were written keeps them as they were.
			for _, p := range []lockstep.PackRecord{rec("a", 1), rec("a", 2), rec("b", 1)} {
				if _, err := db.RegisterPack(ctx, p); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := db.RegisterInlinePack(ctx, rec("a", 3), pack, idx); err != nil {
				t.Fatal(err)
			}
			if _, err := db.ReplacePacks(ctx, rec("a", 4), []string{oidN(1)}); err != nil { // generation 4 of a
				t.Fatal(err)
			}
			run("0030_pack_changed_gen.down.sql")
			run("0030_pack_changed_gen.up.sql")
			hashes := func(cs []lockstep.PackChange) (out []string) {
				for _, c := range cs {
					s := c.Hash[38:]
					if !c.Live() {
						s += "-retired"
					}
					if c.Pack != nil {
						s += "-bytes"
					}
					out = append(out, s)
				}
				return out
			}
			changes := func(net string, since int64, wantGen int64, want ...string) {
				t.Helper()
				cs, g, err := db.PackChanges(ctx, net, since)
				if err != nil {
					t.Fatal(err)
				}
				if got := hashes(cs); g != wantGen || !slices.Equal(got, want) {
					t.Fatalf("changes of %s since %d: %v at generation %d; want %v at %d", net, since, got, g, want, wantGen)
				}
			}
			changes("a", 3, 4, "01-retired", "02", "03-bytes", "04")
			changes("a", 4, 4)
			changes("b", 0, 1, "01")
			changes("b", 1, 1)
			changes("c", 0, 0)
			full, g, err := db.NetworkPacks(ctx, "a")
			if err != nil || g != 4 || len(full) != 4 {
				t.Fatalf("full list of a after 0030: %+v gen %d, %v", full, g, err)
			}
			// After the migration: a change is listed alone.
			if g, err := db.RegisterInlinePack(ctx, rec("a", 5), pack, idx); err != nil || g != 5 {
				t.Fatalf("register after 0030: gen %d, %v", g, err)
			}
			changes("a", 4, 5, "05-bytes")
			if _, err := db.ReplacePacks(ctx, rec("a", 6), []string{oidN(5), oidN(2)}); err != nil {
				t.Fatal(err)
			}
			changes("a", 5, 6, "02-retired", "05-retired", "06")
			// A record an older version writes during a rolling upgrade.
			if _, err := db.SQL().ExecContext(ctx, `INSERT INTO network_packs (network, hash, pack_bytes, idx_bytes, objects, registered_at) VALUES ('a', $1, 1, 1, 1, 99999999999999)`, oidN(7)); err != nil {
				t.Fatal(err)
			}
			changes("a", 6, 6, "07")
		})
	}
}

// benchURL is a fresh store of one implementation for one benchmark run.
// "postgres-nosync" commits without waiting for the WAL flush
// (synchronous_commit=off for its connections): the fsync that dominates
// and blurs a commit's time on a small machine is gone, what remains is
// the statements' own cost.
func benchURL(b *testing.B, name string) string {
	switch name {
	case "postgres":
		return testenv.MustPostgresDB(b)
	case "postgres-nosync":
		return testenv.MustPostgresDB(b) + "?synchronous_commit=off"
	}
	return filepath.Join(b.TempDir(), "meta.db")
}

// BenchmarkNetworkGeneration is the read a replica does before serving a
// network.
func BenchmarkNetworkGeneration(b *testing.B) {
	for _, name := range []string{"sqlite", "postgres"} {
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			db := mustOpen(b, benchURL(b, name))
			for i := 0; i < 100; i++ {
				if _, err := db.RegisterPack(ctx, packRec(fmt.Sprintf("net%03d", i), i)); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := db.NetworkGeneration(ctx, "net042"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkUpdateRefs moves one ref (or ten in one transaction) with the
// generation triggers of migration 0010 and, for comparison, with them
// dropped: the difference is what the triggers add to every ref write.
func BenchmarkUpdateRefs(b *testing.B) {
	for _, name := range []string{"sqlite", "postgres", "postgres-nosync"} {
		for _, triggers := range []bool{true, false} {
			for _, refs := range []int{1, 10} {
				label := fmt.Sprintf("%s/triggers=%v/refs=%d", name, triggers, refs)
				b.Run(label, func(b *testing.B) {
					ctx := context.Background()
					db := mustOpen(b, benchURL(b, name))
					if !triggers {
						for _, op := range []string{"insert", "update", "delete"} {
							q := "DROP TRIGGER refs_bump_generation_" + op
							if db.Dialect() == "postgres" {
								q += " ON refs"
							}
							if _, err := db.SQL().ExecContext(ctx, q); err != nil {
								b.Fatal(err)
							}
						}
					}
					r := &lockstep.Repo{Name: fmt.Sprintf("bench-%v-%d", triggers, refs), DefaultBranch: "main"}
					r.Network = r.Name
					var init []lockstep.Ref
					cur := make([]string, refs)
					for j := 0; j < refs; j++ {
						cur[j] = fmt.Sprintf("%040x", 1)
						init = append(init, lockstep.Ref{Name: fmt.Sprintf("refs/heads/b%02d", j), OID: cur[j]})
					}
					if err := db.CreateRepo(ctx, r, init, entry("repo.create")); err != nil {
						b.Fatal(err)
					}
					b.ResetTimer()
					for i := 0; i < b.N; i++ {
						ups := make([]lockstep.RefUpdate, refs)
						for j := range ups {
							next := fmt.Sprintf("%040x", i+2)
							ups[j] = lockstep.RefUpdate{RepoID: r.ID, Repo: r.Name, Name: init[j].Name, Old: cur[j], New: next}
							cur[j] = next
						}
						if err := db.UpdateRefs(ctx, ups, nil, nil, entry("push")); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
	}
}
