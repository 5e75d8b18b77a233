package e2e

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/lockstep-hq/lockstep/internal/e2ekit"
	"github.com/lockstep-hq/lockstep/internal/testenv"
)

// TestCLINewcomerWords (issue 14): what a newcomer met on the tour. A
// push without --expect names the CLI's flags, not the API's fields;
// --json errors are an envelope on stdout with the exit status kept;
// gate/database/hooks print for people unless --json; list answers are
// objects; oplog lists newest first; whoami exists; a made-up
// --fs-snapshot is refused; database bind says to restart the server.
func TestCLINewcomerWords(t *testing.T) {
	s := startRunServer(t)
	s.api(t, s.AdminKey, "POST", "/repos", map[string]string{"name": "app"}, 201)
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"a.txt": "v1\n"})
	if out, err := s.cli(t, s.AdminKey, "push", dir, "--repo", "app"); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	writeTree(t, dir, map[string]string{"a.txt": "v2\n"})
	run := func(args ...string) e2ekit.CLIResult {
		t.Helper()
		return s.CLIEnv(t, s.AdminKey, "", []string{"XDG_CACHE_HOME=" + t.TempDir(), "XDG_STATE_HOME=" + t.TempDir()}, args...)
	}

	r := run("push", dir, "--repo", "app")
	if r.Code != 3 || !strings.Contains(r.Stderr, "--expect ") || !strings.Contains(r.Stderr, "--expect-current") ||
		!strings.Contains(r.Stderr, "--force") || strings.Contains(r.Stderr, "expect_oid=") || strings.Contains(r.Stderr, "force=true") {
		t.Errorf("push without --expect should name the CLI's flags:\n%s", r)
	}

	r = run("push", dir, "--repo", "app", "--json")
	var env struct {
		Error struct {
			Code    string         `json:"code"`
			Message string         `json:"message"`
			Details map[string]any `json:"details"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &env); err != nil || r.Code != 3 || env.Error.Code != "precondition_required" || env.Error.Message == "" {
		t.Errorf("--json error: want the envelope on stdout and exit 3:\n%s", r)
	}
	if r = run("repo", "show", "nope", "--json"); r.Code != 1 || !strings.Contains(r.Stdout, `"code": "not_found"`) {
		t.Errorf("--json not found: %s", r)
	}

	if r = run("gate", "show", "app"); r.Code != 0 || strings.HasPrefix(strings.TrimSpace(r.Stdout), "{") || !strings.Contains(r.Stdout, "promote mode:") {
		t.Errorf("gate show should print for people by default:\n%s", r)
	}
	if r = run("gate", "show", "app", "--json"); r.Code != 0 || !json.Valid([]byte(r.Stdout)) {
		t.Errorf("gate show --json:\n%s", r)
	}
	if r = run("hooks", "list", "app"); r.Code != 0 || strings.HasPrefix(strings.TrimSpace(r.Stdout), "{") {
		t.Errorf("hooks list should print for people by default:\n%s", r)
	}

	r = run("keys", "list", "--json")
	var keys struct {
		Keys []map[string]any `json:"keys"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &keys); err != nil || len(keys.Keys) == 0 || !strings.HasPrefix(r.Stdout, "{\n  \"keys\"") {
		t.Errorf("keys list --json should be an indented object {\"keys\": [...]}:\n%s", r)
	}

	r = run("oplog", "--json")
	var page struct {
		Entries []struct {
			Seq int64 `json:"seq"`
		} `json:"entries"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &page); err != nil || len(page.Entries) < 2 || page.Entries[0].Seq < page.Entries[1].Seq {
		t.Errorf("oplog should list newest first:\n%s", r)
	}
	r = run("oplog", "--json", "--oldest-first")
	page.Entries = nil
	if err := json.Unmarshal([]byte(r.Stdout), &page); err != nil || len(page.Entries) < 2 || page.Entries[0].Seq > page.Entries[1].Seq {
		t.Errorf("oplog --oldest-first:\n%s", r)
	}

	if r = run("whoami"); r.Code != 0 || !strings.Contains(r.Stdout, "role admin") {
		t.Errorf("whoami:\n%s", r)
	}

	s.api(t, s.AdminKey, "POST", "/repos/app/forks", map[string]string{"name": "ws"}, 201)
	if r = run("checkpoint", "ws", "--fs-snapshot", "nope"); r.Code == 0 || !strings.Contains(r.Stderr, "snapshot take") {
		t.Errorf("checkpoint with a made-up --fs-snapshot was accepted:\n%s", r)
	}
	if r = run("checkpoint", "ws", "--fs-snapshot", "Not An Id"); r.Code != 2 {
		t.Errorf("checkpoint with a malformed --fs-snapshot: want exit 2:\n%s", r)
	}
	if cps := s.api(t, s.AdminKey, "GET", "/repos/ws/checkpoints", nil, 200); len(cps["checkpoints"].([]any)) != 0 {
		t.Errorf("a refused checkpoint was recorded: %v", cps)
	}

	if r = run("database", "bind", "app", "--template", "shop_dev"); r.Code == 0 || !strings.Contains(r.Stderr, "start it again with LOCKSTEP_BRANCH_DATABASE_URL") ||
		!strings.Contains(r.Stderr, "lockstep database bind app --template shop_dev") {
		t.Errorf("database bind without branching should say to restart the server with the URL:\n%s", r)
	}
}

// TestRunCommandPathAndEnv: `lockstep run --dir W -- ./step.sh` runs the
// step.sh of the caller's directory (as a shell would), and the command
// gets DATABASE_URL (the workspace's branch DSN), LOCKSTEP_WORKSPACE and
// LOCKSTEP_URL.
func TestRunCommandPathAndEnv(t *testing.T) {
	ctx := context.Background()
	adminURL := testenv.PostgresURL(t)
	prefix := "e" + randHex(2)
	t.Cleanup(func() { dropPrefix(t, adminURL, prefix) })
	tpl := "apptpl_" + prefix
	admin, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, `CREATE DATABASE `+tpl); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(ctx, adminURL)
		if err == nil {
			c.Exec(ctx, `DROP DATABASE IF EXISTS `+tpl+` WITH (FORCE)`)
			c.Close(ctx)
		}
	})
	if _, err := url.Parse(adminURL); err != nil {
		t.Fatal(err)
	}
	s := startRunServer(t, "LOCKSTEP_BRANCH_DATABASE_URL="+adminURL, "LOCKSTEP_BRANCH_PREFIX="+prefix)
	s.api(t, s.AdminKey, "POST", "/repos", map[string]string{"name": "app"}, 201)
	s.api(t, s.AdminKey, "PUT", "/repos/app/database", map[string]string{"template": tpl}, 200)
	base := t.TempDir()
	writeTree(t, base, map[string]string{"README.md": "app\n"})
	if out, err := s.cli(t, s.AdminKey, "push", base, "--repo", "app"); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	s.api(t, s.AdminKey, "POST", "/repos/app/forks", map[string]string{"name": "task-1"}, 201)
	dsn := s.api(t, s.AdminKey, "GET", "/repos/task-1/database", nil, 200)["dsn"].(string)

	work := t.TempDir()
	if out, err := s.cli(t, s.AdminKey, "checkout", "task-1", work); err != nil {
		t.Fatalf("checkout: %v\n%s", err, out)
	}
	caller := t.TempDir()
	got := filepath.Join(t.TempDir(), "env")
	os.WriteFile(filepath.Join(caller, "step.sh"), []byte("#!/bin/sh\nprintf '%s\\n%s\\n%s\\n' \"$DATABASE_URL\" \"$LOCKSTEP_WORKSPACE\" \"$LOCKSTEP_URL\" > "+got+"\n"), 0o755)
	cmd := exec.Command(e2ekit.Binary, "run", "--workspace", "task-1", "--dir", work, "--driver", "copy", "--state-root", t.TempDir(), "--", "./step.sh")
	cmd.Dir = caller
	cmd.Env = append(e2ekit.CleanEnv(), "LOCKSTEP_URL="+s.URL, "LOCKSTEP_KEY="+s.AdminKey, "XDG_CACHE_HOME="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("run ./step.sh from the caller's directory: %v\n%s", err, out)
	}
	b, err := os.ReadFile(got)
	if err != nil {
		t.Fatalf("step.sh did not run: %v\n%s", err, out)
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) < 3 || lines[0] != dsn || lines[1] != "task-1" || lines[2] != s.URL {
		t.Errorf("the command's environment: DATABASE_URL, LOCKSTEP_WORKSPACE, LOCKSTEP_URL = %q, want %q, task-1, %s", lines, dsn, s.URL)
	}
}

// TestCheckoutProgress: checkout of a large tree shows progress on
// stderr, as push does; --quiet and --json keep it silent.
func TestCheckoutProgress(t *testing.T) {
	s := startRunServer(t)
	s.api(t, s.AdminKey, "POST", "/repos", map[string]string{"name": "big"}, 201)
	dir := t.TempDir()
	blob := make([]byte, 3<<20)
	rand.Read(blob)
	os.WriteFile(filepath.Join(dir, "big.bin"), blob, 0o644)
	if out, err := s.cli(t, s.AdminKey, "push", dir, "--repo", "big"); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	co := func(args ...string) e2ekit.CLIResult {
		return s.CLIEnv(t, s.AdminKey, "", []string{"XDG_CACHE_HOME=" + t.TempDir()}, append([]string{"checkout", "big", filepath.Join(t.TempDir(), "w")}, args...)...)
	}
	if r := co(); r.Code != 0 || !strings.Contains(r.Stderr, "downloading: 3.0 MiB, done") {
		t.Errorf("checkout of 3 MiB shows no progress:\n%s", r)
	}
	for _, flag := range []string{"--quiet", "--json"} {
		if r := co(flag); r.Code != 0 || strings.Contains(r.Stderr, "downloading") {
			t.Errorf("checkout %s printed progress:\n%s", flag, r)
		}
	}
}
