package sqlstore_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/internal/testenv"
	"github.com/lockstep-hq/lockstep/sqlstore"
)

// TestTargetURLQueriesSealedAtOpen: the queries of an effect's URLs
// (request and compensation) and of a hook's URL, stored in plaintext by
// a server without a key (or an older version), are encrypted when the
// store opens with a key: neither the rows nor, on SQLite, the database
// files hold them after, and they read back whole. A second open finds
// nothing left to do; a URL written with the key is sealed at once.
func TestTargetURLQueriesSealedAtOpen(t *testing.T) {
	for name, url := range map[string]string{
		"sqlite":   filepath.Join(t.TempDir(), "lockstep.db"),
		"postgres": testenv.MustPostgresDB(t),
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			files := []string{url, url + "-wal", url + "-shm"}
			const (
				effURL  = "https://api.example.com/charge?token=legacy-effect-tok-51c2&amount=4200#f"
				compURL = "https://api.example.com/refund?key=legacy-comp-key-9a1e"
				hookURL = "https://ci.example.com/hook?token=legacy-hook-tok-e07b"
				newURL  = "https://ci.example.com/hook?token=fresh-hook-tok-33d9"
			)
			plains := []string{"legacy-effect-tok-51c2", "legacy-comp-key-9a1e", "legacy-hook-tok-e07b"}

			old := openWithKey(t, url, nil)
			base := &lockstep.Repo{Name: "base", Network: "base", DefaultBranch: "main", Status: lockstep.StatusActive}
			if err := old.CreateRepo(ctx, base, nil, entry("repo.create")); err != nil {
				t.Fatal(err)
			}
			ws := &lockstep.Repo{Name: "ws", Network: "base", ForkOf: "base", DefaultBranch: "main", Status: lockstep.StatusActive}
			if err := old.CreateRepo(ctx, ws, nil, entry("repo.create")); err != nil {
				t.Fatal(err)
			}
			e := &lockstep.Effect{ID: "eff_legacy", RepoID: ws.ID, Repo: ws.Name, Request: lockstep.EffectHTTP{Method: "POST", URL: effURL},
				Compensation: &lockstep.EffectHTTP{Method: "POST", URL: compURL}}
			if err := old.StageEffect(ctx, e, 0, entry("effect.stage")); err != nil {
				t.Fatal(err)
			}
			plainEff := &lockstep.Effect{ID: "eff_noquery", RepoID: ws.ID, Repo: ws.Name, Request: lockstep.EffectHTTP{Method: "POST", URL: "https://api.example.com/x"}}
			if err := old.StageEffect(ctx, plainEff, 0, entry("effect.stage")); err != nil {
				t.Fatal(err)
			}
			h := &lockstep.Hook{ID: "hook_legacy", RepoID: base.ID, URL: hookURL, Secret: "legacy-hook-secret-0123", Events: []string{"push"}, Active: true}
			if err := old.CreateHook(ctx, h, entry("hook.create")); err != nil {
				t.Fatal(err)
			}
			rows := func(db *sqlstore.DB) string {
				t.Helper()
				var req, comp, hurl string
				if err := db.SQL().QueryRow(`SELECT request, compensation FROM effects WHERE id = $1`, e.ID).Scan(&req, &comp); err != nil {
					t.Fatal(err)
				}
				if err := db.SQL().QueryRow(`SELECT url FROM hooks WHERE id = $1`, h.ID).Scan(&hurl); err != nil {
					t.Fatal(err)
				}
				return req + "\n" + comp + "\n" + hurl
			}
			for _, p := range plains {
				if !strings.Contains(rows(old), p) {
					t.Fatalf("setup: the keyless store should keep %q in plaintext:\n%s", p, rows(old))
				}
				if name == "sqlite" && len(grepFiles(t, p, files...)) == 0 {
					t.Fatalf("setup: %q should be in the SQLite files before encryption", p)
				}
			}
			old.Close()

			db := openWithKey(t, url, testKey)
			if n := db.SealedAtOpen(); n != 2 { // the effect and the hook (its secret and URL: one row)
				t.Errorf("rows encrypted at open: %d, want 2", n)
			}
			stored := rows(db)
			for _, p := range plains {
				if strings.Contains(stored, p) {
					t.Errorf("BUG: %q is stored in plaintext after open:\n%s", p, stored)
				}
			}
			if !strings.Contains(stored, "https://api.example.com/charge") || !strings.Contains(stored, "https://ci.example.com/hook?"+sqlstore.SealPrefix) {
				t.Errorf("stored after open:\n%s\nwant the URLs' paths in clear, the queries sealed", stored)
			}
			got, err := db.Effect(ctx, e.ID)
			if err != nil || got.Request.URL != effURL || got.Compensation == nil || got.Compensation.URL != compURL {
				t.Fatalf("effect read back: %+v %v", got, err)
			}
			if got, err := db.Effect(ctx, plainEff.ID); err != nil || got.Request.URL != "https://api.example.com/x" {
				t.Fatalf("effect without a query read back: %+v %v", got, err)
			}
			gh, err := db.Hook(ctx, h.ID)
			if err != nil || gh.URL != hookURL || gh.Secret != h.Secret {
				t.Fatalf("hook read back: %+v %v", gh, err)
			}
			h2 := &lockstep.Hook{ID: "hook_fresh", RepoID: base.ID, URL: newURL, Secret: "fresh-hook-secret-4567", Events: []string{"push"}, Active: true}
			if err := db.CreateHook(ctx, h2, entry("hook.create")); err != nil {
				t.Fatal(err)
			}
			var raw string
			if err := db.SQL().QueryRow(`SELECT url FROM hooks WHERE id = $1`, h2.ID).Scan(&raw); err != nil || strings.Contains(raw, "fresh-hook-tok") {
				t.Errorf("a hook created with the key stored its URL as %q (%v)", raw, err)
			}
			if list, err := db.Hooks(ctx, base.ID); err != nil || len(list) != 2 || list[1].URL != newURL {
				t.Errorf("hooks read back: %+v %v", list, err)
			}
			if name == "sqlite" {
				for _, p := range append(plains, "fresh-hook-tok-33d9") {
					if hits := grepFiles(t, p, files...); len(hits) > 0 {
						t.Errorf("BUG: %q is in %v", p, hits)
					}
				}
			}
			db.Close()

			again := openWithKey(t, url, testKey)
			defer again.Close()
			if n := again.SealedAtOpen(); n != 0 {
				t.Errorf("a second open encrypted %d rows, want 0", n)
			}
			if got, err := again.Effect(ctx, e.ID); err != nil || got.Request.URL != effURL {
				t.Fatalf("effect read back after a second open: %+v %v", got, err)
			}
		})
	}
}
