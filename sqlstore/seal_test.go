package sqlstore_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/internal/testenv"
	"github.com/lockstep-hq/lockstep/sqlstore"
)

var testKey = bytes.Repeat([]byte{7}, 32)

func openWithKey(tb testing.TB, url string, key []byte) *sqlstore.DB {
	tb.Helper()
	db, err := sqlstore.Open(context.Background(), url, sqlstore.Options{Migrate: true, SecretKey: key})
	if err != nil {
		tb.Fatalf("open %s: %v", url, err)
	}
	return db
}

// rawSecret reads the hooks.secret column as stored.
func rawSecret(t *testing.T, db *sqlstore.DB, id string) (secret, prev string) {
	t.Helper()
	if err := db.SQL().QueryRow(`SELECT secret, prev_secret FROM hooks WHERE id = $1`, id).Scan(&secret, &prev); err != nil {
		t.Fatal(err)
	}
	return secret, prev
}

// grepFiles reports which of the files contain needle.
func grepFiles(t *testing.T, needle string, paths ...string) []string {
	t.Helper()
	var hits []string
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(needle)) {
			hits = append(hits, filepath.Base(p))
		}
	}
	return hits
}

// TestHookSecretsEncryptedAtRest: with a key, a hook secret (and a rotated
// previous secret) is stored as AES-GCM ciphertext and read back as given;
// a secret stored in plaintext by an older version is encrypted when the
// store opens with a key, and on SQLite no plaintext is left in the
// database file or its WAL. Without the key the secret does not open.
func TestHookSecretsEncryptedAtRest(t *testing.T) {
	for name, url := range map[string]string{
		"sqlite":   filepath.Join(t.TempDir(), "lockstep.db"),
		"postgres": testenv.MustPostgresDB(t),
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			files := []string{url, url + "-wal", url + "-shm"}
			const legacy = "legacy-plaintext-secret-4d1f9a"
			const fresh = "fresh-secret-value-77c2e0b1"
			const rotated = "rotated-secret-value-0a9e33"

			// An older server (no key) stored a secret in plaintext.
			old := openWithKey(t, url, nil)
			base := &lockstep.Repo{Name: "base", Network: "base", DefaultBranch: "main"}
			if err := old.CreateRepo(ctx, base, nil, entry("repo.create")); err != nil {
				t.Fatal(err)
			}
			h1 := &lockstep.Hook{ID: "hook_legacy", RepoID: base.ID, URL: "https://ci.example.com/h", Secret: legacy, Events: []string{"push"}, Active: true}
			if err := old.CreateHook(ctx, h1, entry("hook.create")); err != nil {
				t.Fatal(err)
			}
			if s, _ := rawSecret(t, old, h1.ID); s != legacy {
				t.Fatalf("setup: the keyless store should keep plaintext, got %q", s)
			}
			if name == "sqlite" && len(grepFiles(t, legacy, files...)) == 0 {
				t.Fatal("setup: the plaintext secret should be in the SQLite files before encryption (else the grep proves nothing)")
			}
			old.Close()

			db := openWithKey(t, url, testKey)
			defer db.Close()
			if n := db.SealedAtOpen(); n != 1 {
				t.Errorf("encrypted at open: %d, want 1", n)
			}
			h2 := &lockstep.Hook{ID: "hook_fresh", RepoID: base.ID, URL: "https://ci.example.com/h2", Secret: fresh, Events: []string{"push"}, Active: true}
			if err := db.CreateHook(ctx, h2, entry("hook.create")); err != nil {
				t.Fatal(err)
			}
			until := time.Now().Add(time.Hour)
			if err := db.RotateHookSecret(ctx, h2.ID, rotated, fresh, until, entry("hook.rotate")); err != nil {
				t.Fatal(err)
			}
			for _, id := range []string{h1.ID, h2.ID} {
				s, p := rawSecret(t, db, id)
				if !strings.HasPrefix(s, sqlstore.SealPrefix) || (p != "" && !strings.HasPrefix(p, sqlstore.SealPrefix)) {
					t.Errorf("hook %s stored as %q / %q: not encrypted", id, s, p)
				}
			}
			got1, err := db.Hook(ctx, h1.ID)
			if err != nil || got1.Secret != legacy {
				t.Fatalf("legacy hook read back: %+v %v", got1, err)
			}
			got2, err := db.Hook(ctx, h2.ID)
			if err != nil || got2.Secret != rotated || got2.PrevSecret != fresh || got2.PrevSecretUntil == nil {
				t.Fatalf("rotated hook read back: %+v %v", got2, err)
			}
			if name == "sqlite" {
				for _, secret := range []string{legacy, fresh, rotated} {
					if hits := grepFiles(t, secret, files...); len(hits) > 0 {
						t.Errorf("BUG: the plaintext secret %q is in %v", secret, hits)
					}
				}
				for _, f := range files {
					if st, err := os.Stat(f); err == nil && st.Mode().Perm() != 0o600 {
						t.Errorf("%s has mode %04o, want 0600", filepath.Base(f), st.Mode().Perm())
					}
				}
			}

			// Another key (a replica without the shared key file) cannot
			// read the secrets: a clear error, not garbage.
			db.Close()
			other := openWithKey(t, url, bytes.Repeat([]byte{9}, 32))
			defer other.Close()
			if _, err := other.Hook(ctx, h2.ID); lockstep.ErrorCode(err) != lockstep.EUNAVAILABLE {
				t.Errorf("hook read with another key: %v, want unavailable", err)
			}
		})
	}
}
