//go:build lockstep_server

package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestBranchPrefix (issue 27 item 4): two services on one Postgres server
// used to share the default prefix "ls", so their databases and roles
// collided. The default is now derived from the branch secret and kept in
// <data>/branch.prefix; replicas sharing the secret agree; a data
// directory that branched before (branch.secret, no branch.prefix) keeps
// "ls"; --branch-prefix overrides.
func TestBranchPrefix(t *testing.T) {
	valid := regexp.MustCompile(`^ls[a-z0-9]{4}$`)
	fresh := func() (*serveConfig, string) {
		t.Helper()
		c := &serveConfig{Data: t.TempDir()}
		secret, generated, err := branchSecret(c)
		if err != nil || !generated {
			t.Fatalf("branchSecret: generated %v, %v", generated, err)
		}
		p, err := branchPrefix(c, secret, generated)
		if err != nil {
			t.Fatal(err)
		}
		return c, p
	}
	c1, p1 := fresh()
	_, p2 := fresh()
	if !valid.MatchString(p1) || !valid.MatchString(p2) || p1 == p2 {
		t.Fatalf("two new services got prefixes %q and %q: want distinct ls+4", p1, p2)
	}
	// A restart keeps it.
	secret, generated, err := branchSecret(c1)
	if err != nil || generated {
		t.Fatalf("restart: generated %v, %v", generated, err)
	}
	if p, err := branchPrefix(c1, secret, generated); err != nil || p != p1 {
		t.Fatalf("after a restart: %q %v, want %q", p, err, p1)
	}
	if b, _ := os.ReadFile(filepath.Join(c1.Data, "branch.prefix")); strings.TrimSpace(string(b)) != p1 {
		t.Fatalf("branch.prefix holds %q, want %q", b, p1)
	}

	// Replicas: one secret in the environment, separate data directories.
	r1 := &serveConfig{Data: t.TempDir(), BranchSecret: "shared-secret-shared-secret-shared"}
	r2 := &serveConfig{Data: t.TempDir(), BranchSecret: r1.BranchSecret}
	a, _ := branchPrefix(r1, []byte(r1.BranchSecret), false)
	b, _ := branchPrefix(r2, []byte(r2.BranchSecret), false)
	// They agree, and keep "ls": a secret from the setting may have
	// branched under the old fixed prefix (an upgrade must not lose its
	// databases); such a fleet sets --branch-prefix to share a server.
	if a != b || a != "ls" {
		t.Fatalf("replicas with one secret: %q and %q, want ls", a, b)
	}

	// A data directory that branched with "ls" before keeps it.
	old := &serveConfig{Data: t.TempDir()}
	if err := os.WriteFile(filepath.Join(old.Data, "branch.secret"), []byte(strings.Repeat("ab", 32)), 0o600); err != nil {
		t.Fatal(err)
	}
	secret, generated, err = branchSecret(old)
	if err != nil {
		t.Fatal(err)
	}
	if p, err := branchPrefix(old, secret, generated); err != nil || p != "ls" {
		t.Fatalf("an older data directory: %q %v, want ls", p, err)
	}

	// The setting wins.
	set := &serveConfig{Data: c1.Data, BranchPrefix: "mine"}
	if p, err := branchPrefix(set, secret, false); err != nil || p != "mine" {
		t.Fatalf("--branch-prefix mine: %q %v", p, err)
	}
}
