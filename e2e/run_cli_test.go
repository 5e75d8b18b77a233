package e2e

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestCheckpointCLI: checkpoint, list and restore from the CLI (code only:
// no branch server), and the database command's clear error without one.
func TestCheckpointCLI(t *testing.T) {
	t.Parallel()
	s := startRunServer(t)
	s.api(t, s.AdminKey, "POST", "/repos", map[string]string{"name": "app"}, 201)
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"a.txt": "v1\n"})
	if out, err := s.cli(t, s.AdminKey, "push", dir, "--repo", "app"); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	s.api(t, s.AdminKey, "POST", "/repos/app/forks", map[string]string{"name": "ws"}, 201)
	out, err := s.cli(t, s.AdminKey, "checkpoint", "ws", "--label", "before refactor", "--json")
	if err != nil {
		t.Fatalf("checkpoint: %v %s", err, out)
	}
	var cp struct {
		ID, Commit, Tree, Label string
	}
	json.Unmarshal([]byte(out), &cp)
	if cp.ID == "" || cp.Label != "before refactor" {
		t.Fatalf("checkpoint: %s", out)
	}
	writeTree(t, dir, map[string]string{"a.txt": "v2 broken\n"})
	if out, err := s.cli(t, s.AdminKey, "push", dir, "--repo", "ws", "--expect-current"); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	if out, err := s.cli(t, s.AdminKey, "checkpoints", "ws"); err != nil || !strings.Contains(out, cp.ID) {
		t.Fatalf("checkpoints: %v %s", err, out)
	}
	if out, err := s.cli(t, s.AdminKey, "restore", "ws", cp.ID); err != nil || !strings.Contains(out, "restored ws to "+cp.ID) {
		t.Fatalf("restore: %v %s", err, out)
	}
	c := s.api(t, s.AdminKey, "GET", "/repos/ws/commits/main", nil, 200)
	if c["tree"] != cp.Tree {
		t.Fatalf("tree after restore %v, want the checkpoint's %s", c["tree"], cp.Tree)
	}
	if out, err := s.cli(t, s.AdminKey, "restore", "ws", "cp-000000000000"); err == nil || !strings.Contains(out, "not_found") {
		t.Fatalf("unknown checkpoint: %v %s", err, out)
	}
	if out, err := s.cli(t, s.AdminKey, "database", "show", "app"); err == nil || !strings.Contains(out, "LOCKSTEP_BRANCH_DATABASE_URL") {
		t.Fatalf("database without a branch server: %v %s", err, out)
	}
}
