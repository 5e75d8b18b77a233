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

// TestCLIOplogOrder (issue 14): `lockstep oplog` lists newest first,
// --oldest-first the other way. The rest of what a newcomer met on the
// tour is the script testdata/script/newcomer.txtar.
func TestCLIOplogOrder(t *testing.T) {
	t.Parallel()
	s := startRunServer(t)
	s.api(t, s.AdminKey, "POST", "/repos", map[string]string{"name": "app"}, 201)
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"a.txt": "v1\n"})
	if out, err := s.cli(t, s.AdminKey, "push", dir, "--repo", "app"); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	for _, x := range []struct {
		args        []string
		newestFirst bool
	}{{[]string{"oplog", "--json"}, true}, {[]string{"oplog", "--json", "--oldest-first"}, false}} {
		out, err := s.cli(t, s.AdminKey, x.args...)
		var page struct {
			Entries []struct {
				Seq int64 `json:"seq"`
			} `json:"entries"`
		}
		if err != nil || json.Unmarshal([]byte(out), &page) != nil || len(page.Entries) < 2 ||
			(page.Entries[0].Seq > page.Entries[1].Seq) != x.newestFirst {
			t.Errorf("lockstep %v (newest first: %v): %v\n%s", x.args, x.newestFirst, err, out)
		}
	}
}

// TestRunCommandPathAndEnv: `lockstep run --dir W -- ./step.sh` runs the
// step.sh of the caller's directory (as a shell would), and the command
// gets DATABASE_URL (the workspace's branch DSN), LOCKSTEP_WORKSPACE and
// LOCKSTEP_URL.
func TestRunCommandPathAndEnv(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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
