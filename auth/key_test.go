package auth_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/auth"
	"github.com/lockstep-hq/lockstep/sqlstore"
)

func mustService(t *testing.T) (*auth.Service, *sqlstore.DB) {
	t.Helper()
	db, err := sqlstore.Open(context.Background(), filepath.Join(t.TempDir(), "m.db"), sqlstore.Options{Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return auth.New(db, nil), db
}

func TestKeyLifecycle(t *testing.T) {
	ctx := context.Background()
	s, db := mustService(t)
	k, secret, err := s.Create(ctx, auth.System, "agent-1", lockstep.RoleAgent)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(secret, k.Prefix+"_") || len(secret) < 40 {
		t.Fatalf("secret %q does not start with its visible prefix %q", secret, k.Prefix)
	}
	stored, _ := db.KeyByPrefix(ctx, k.Prefix)
	if strings.Contains(string(stored.Hash), secret) || len(stored.Hash) != 32 {
		t.Fatalf("stored hash looks wrong: %x", stored.Hash)
	}
	got, err := s.Authenticate(ctx, secret)
	if err != nil || got.ID != k.ID || got.Role != lockstep.RoleAgent {
		t.Fatalf("authenticate: %v %v", got, err)
	}
	// The last character changed (to one it is not: a fixed "A" equals it
	// one time in 64).
	last := "A"
	if strings.HasSuffix(secret, "A") {
		last = "B"
	}
	for _, bad := range []string{"", "nope", secret + "x", secret[:len(secret)-1] + last, "lsk_00000000_" + strings.Repeat("a", 43), k.Prefix + "_short"} {
		if _, err := s.Authenticate(ctx, bad); lockstep.ErrorCode(err) != lockstep.EUNAUTH {
			t.Errorf("Authenticate(%q) = %v, want unauthenticated", bad, err)
		}
	}
	agent := got
	if _, _, err := s.Create(ctx, agent, "x", lockstep.RoleAdmin); lockstep.ErrorCode(err) != lockstep.EFORBIDDEN {
		t.Fatalf("agent creating a key: %v", err)
	}
	if _, _, err := s.Create(ctx, auth.System, "x", "root"); lockstep.ErrorCode(err) != lockstep.EINVALID {
		t.Fatalf("bad role: %v", err)
	}
	if err := s.Revoke(ctx, auth.System, k.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Authenticate(ctx, secret); lockstep.ErrorCode(err) != lockstep.EUNAUTH {
		t.Fatalf("revoked key still works: %v", err)
	}
	ops, _ := db.ListOps(ctx, lockstep.OpFilter{})
	if len(ops) != 2 || ops[0].Op != "key.create" || ops[1].Op != "key.revoke" {
		t.Fatalf("oplog: %+v", ops)
	}
	for _, o := range ops {
		if strings.Contains(string(lockstep.CanonicalDetails(o.Details)), secret) {
			t.Fatal("the secret reached the operations log")
		}
	}
}

func TestBootstrapWritesAdminKeyOnce(t *testing.T) {
	ctx := context.Background()
	s, _ := mustService(t)
	dir := t.TempDir()
	path, err := s.Bootstrap(ctx, dir)
	if err != nil || path == "" {
		t.Fatalf("bootstrap: %q %v", path, err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("admin.key mode: %v %v", st, err)
	}
	b, _ := os.ReadFile(path)
	k, err := s.Authenticate(ctx, strings.TrimSpace(string(b)))
	if err != nil || k.Role != lockstep.RoleAdmin {
		t.Fatalf("admin key does not authenticate as admin: %v %v", k, err)
	}
	again, err := s.Bootstrap(ctx, dir)
	if err != nil || again != "" {
		t.Fatalf("second bootstrap created another key: %q %v", again, err)
	}
}
