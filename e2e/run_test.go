package e2e

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockstep-hq/lockstep/internal/e2ekit"
	"github.com/lockstep-hq/lockstep/internal/testenv"
)

func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for p, c := range files {
		full := filepath.Join(dir, p)
		os.MkdirAll(filepath.Dir(full), 0o755)
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// snapshotDir reads every file (path → content) for comparison.
func snapshotDir(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		switch {
		case info.IsDir():
			out[rel+"/"] = info.Mode().String()
		case info.Mode()&os.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			out[rel] = "-> " + l
		default:
			b, _ := os.ReadFile(p)
			out[rel] = info.Mode().String() + " " + string(b)
		}
		return nil
	})
	return out
}

// TestFailedRunRestoresCodeDataAndFiles is the checkpoint issue's
// acceptance scenario, end to end with the real binary, real Postgres and
// the copy driver (which works on any filesystem; the fssnap package tests
// the overlay, btrfs and reflink drivers on real mounts).
func TestFailedRunRestoresCodeDataAndFiles(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("psql"); err != nil {
		t.Fatal("psql is needed by this test's agent command: apt-get install -y postgresql-client")
	}
	ctx := context.Background()
	adminURL := testenv.PostgresURL(t)
	prefix := "e" + randHex(2)
	t.Cleanup(func() { dropPrefix(t, adminURL, prefix) })

	// The application's template database with one table.
	tpl := "apptpl_" + prefix
	t.Cleanup(func() {
		c, err := pgx.Connect(ctx, adminURL)
		if err == nil {
			c.Exec(ctx, `DROP DATABASE IF EXISTS `+tpl+` WITH (FORCE)`)
			c.Close(ctx)
		}
	})
	admin, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, `CREATE DATABASE `+tpl); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(adminURL)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + tpl
	tplURL := u.String()
	tc, err := pgx.Connect(ctx, tplURL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tc.Exec(ctx, `CREATE TABLE users (id int primary key, name text); INSERT INTO users VALUES (1, 'ada')`); err != nil {
		t.Fatal(err)
	}
	tc.Close(ctx)

	s := startRunServer(t, "LOCKSTEP_BRANCH_DATABASE_URL="+adminURL, "LOCKSTEP_BRANCH_PREFIX="+prefix)
	s.api(t, s.AdminKey, "POST", "/repos", map[string]string{"name": "app"}, 201)
	s.api(t, s.AdminKey, "PUT", "/repos/app/database", map[string]string{"template": tpl}, 200)
	agent := s.api(t, s.AdminKey, "POST", "/keys", map[string]string{"name": "agent-1", "role": "agent"}, 201)["secret"].(string)

	base := t.TempDir()
	writeTree(t, base, map[string]string{"main.go": "package main\n\nfunc main() {}\n", "README.md": "app\n"})
	if out, err := s.cli(t, s.AdminKey, "push", base, "--repo", "app", "--json"); err != nil {
		t.Fatalf("push base: %v\n%s", err, out)
	}
	s.api(t, agent, "POST", "/repos/app/forks", map[string]string{"name": "task-1"}, 201)
	db := s.api(t, agent, "GET", "/repos/task-1/database", nil, 200)
	dsn := db["dsn"].(string)

	work := t.TempDir()
	if out, err := s.cli(t, agent, "checkout", "task-1", work); err != nil {
		t.Fatalf("checkout: %v\n%s", err, out)
	}
	before := snapshotDir(t, work)

	// The agent's step: a migration, new files, a code edit, a background
	// process — then failure.
	script := `set -e
psql "$DSN" -v ON_ERROR_STOP=1 -q -c 'CREATE TABLE invoices (id int); INSERT INTO invoices VALUES (42); UPDATE users SET name = $$broken$$'
echo "ghost" > ghost.txt
mkdir -p gen && echo "generated" > gen/out.txt
echo "// half-done edit" >> main.go
rm README.md
(sleep 600 &)
echo "migration broke: users renamed" >&2
exit 3`
	state := t.TempDir()
	cmd := exec.Command(e2ekit.Binary, "run", "--workspace", "task-1", "--dir", work, "--driver", "copy", "--state-root", state, "--json", "--", "sh", "-c", script)
	cmd.Env = append(os.Environ(), "LOCKSTEP_URL="+s.URL, "LOCKSTEP_KEY="+agent, "DSN="+dsn, "XDG_CACHE_HOME="+t.TempDir())
	out, err := cmd.Output()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 {
		t.Fatalf("lockstep run: want exit status 3 (the command's), got %v\n%s\n%s", err, out, errOut(err))
	}
	var rep struct {
		Succeeded  bool   `json:"succeeded"`
		RolledBack bool   `json:"rolled_back"`
		Checkpoint string `json:"checkpoint"`
		Purity     struct{ Checked, Clean bool }
		Restored   *struct {
			Commit     string `json:"commit"`
			Tree       string `json:"tree"`
			DBRestored bool   `json:"db_restored"`
		} `json:"restored"`
	}
	if err := jsonUnmarshal(out, &rep); err != nil {
		t.Fatalf("report: %v\n%s", err, out)
	}
	if rep.Succeeded || !rep.RolledBack || !rep.Purity.Checked || !rep.Purity.Clean || rep.Restored == nil || !rep.Restored.DBRestored {
		t.Fatalf("report: %+v\n%s", rep, out)
	}

	// Data: the migration is gone, the row is back, through the same DSN.
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("the agent's DSN no longer works: %v", err)
	}
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE tablename = 'invoices'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("invoices table survived the restore (%d, %v)", n, err)
	}
	var name string
	conn.QueryRow(ctx, `SELECT name FROM users WHERE id = 1`).Scan(&name)
	conn.Close(ctx)
	if name != "ada" {
		t.Fatalf("users row = %q, want ada", name)
	}

	// Files: exactly as before.
	after := snapshotDir(t, work)
	if len(after) != len(before) {
		t.Fatalf("files differ after restore:\nbefore %v\nafter  %v", before, after)
	}
	for k, v := range before {
		if after[k] != v {
			t.Fatalf("%s differs after restore: %q vs %q", k, after[k], v)
		}
	}
	// No process of the run is left (the background sleep was killed).
	if out, _ := exec.Command("pgrep", "-f", "sleep 600").Output(); len(strings.TrimSpace(string(out))) > 0 {
		exec.Command("pkill", "-f", "sleep 600").Run()
		t.Fatalf("a process of the run survived: %s", out)
	}

	// Code: the failed attempt is kept, then a rollback commit whose tree is
	// the checkpoint's.
	cps := s.api(t, agent, "GET", "/repos/task-1/checkpoints", nil, 200)["checkpoints"].([]any)
	cp := cps[0].(map[string]any)
	log := s.api(t, agent, "GET", "/repos/task-1/commits?limit=10", nil, 200)["commits"].([]any)
	tip := log[0].(map[string]any)
	failed := log[1].(map[string]any)
	if tip["tree"] != cp["tree"] {
		t.Fatalf("tip tree %v != checkpoint tree %v", tip["tree"], cp["tree"])
	}
	if failed["tree"] == cp["tree"] || !strings.Contains(failed["message"].(string), "failed run") {
		t.Fatalf("the failed attempt is not kept as evidence: %v", failed)
	}

	// The operations log links checkpoint → failure → restore.
	ops := s.api(t, s.AdminKey, "GET", "/oplog?repo=task-1&limit=100", nil, 200)["entries"].([]any)
	byOp := map[string]map[string]any{}
	for _, o := range ops {
		e := o.(map[string]any)
		byOp[e["op"].(string)] = e
	}
	ck, fail, rest := byOp["checkpoint"], byOp["run.failed"], byOp["checkpoint.restore"]
	if ck == nil || fail == nil || rest == nil {
		t.Fatalf("oplog lacks checkpoint/run.failed/checkpoint.restore: %v", ops)
	}
	// The failure record says why: the real exit code, how long it ran, the
	// tail of its error output and the evidence commit.
	fd := fail["details"].(map[string]any)
	if fd["exit_code"] != 3.0 || fd["reason"] != "exit code 3" || fd["duration_ms"] == nil || fd["evidence"] != failed["commit"] ||
		!strings.Contains(fmt.Sprint(fd["stderr_tail"]), "migration broke") {
		t.Fatalf("run.failed details: %v (evidence commit %v)", fd, failed["commit"])
	}
	if msg := failed["message"].(string); !strings.Contains(msg, "exit code 3 after") || !strings.Contains(msg, "migration broke") {
		t.Fatalf("evidence commit message does not say how the run failed:\n%s", msg)
	}
	if fail["follows"] != ck["id"] || rest["follows"] != fail["id"] {
		t.Fatalf("oplog chain not linked: checkpoint %v, failure follows %v (id %v), restore follows %v", ck["id"], fail["follows"], fail["id"], rest["follows"])
	}
	if v := s.api(t, s.AdminKey, "GET", "/oplog/verify", nil, 200); v["ok"] != true {
		t.Fatalf("oplog verify: %v", v)
	}
	_ = time.Second
}

// TestSuccessfulRunCommits: --commit-on-success pushes the result and
// nothing is rolled back.
func TestSuccessfulRunCommits(t *testing.T) {
	t.Parallel()
	s := startRunServer(t)
	s.api(t, s.AdminKey, "POST", "/repos", map[string]string{"name": "app"}, 201)
	base := t.TempDir()
	writeTree(t, base, map[string]string{"a.txt": "a\n"})
	if out, err := s.cli(t, s.AdminKey, "push", base, "--repo", "app"); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	s.api(t, s.AdminKey, "POST", "/repos/app/forks", map[string]string{"name": "ws"}, 201)
	work := t.TempDir()
	if out, err := s.cli(t, s.AdminKey, "checkout", "ws", work); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	out, err := s.cli(t, s.AdminKey, "run", "--workspace", "ws", "--dir", work, "--driver", "copy", "--state-root", t.TempDir(),
		"--commit-on-success", "--json", "--", "sh", "-c", "echo b > b.txt")
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	blob := s.api(t, s.AdminKey, "GET", "/repos/ws/tree/main", nil, 200)["entries"].([]any)
	found := false
	for _, e := range blob {
		if e.(map[string]any)["name"] == "b.txt" {
			found = true
		}
	}
	if !found {
		t.Fatalf("b.txt was not committed: %v", blob)
	}
	if _, err := os.Stat(filepath.Join(work, "b.txt")); err != nil {
		t.Fatal("the successful run's file was rolled back")
	}
}

// TestDatabaseRoutesWithoutBranchServer: a clear error saying how to
// enable it.
func TestDatabaseRoutesWithoutBranchServer(t *testing.T) {
	t.Parallel()
	s := startRunServer(t)
	s.api(t, s.AdminKey, "POST", "/repos", map[string]string{"name": "app"}, 201)
	m := s.api(t, s.AdminKey, "PUT", "/repos/app/database", map[string]string{"template": "x"}, 501)
	msg := m["error"].(map[string]any)["message"].(string)
	if !strings.Contains(msg, "LOCKSTEP_BRANCH_DATABASE_URL") {
		t.Fatalf("message does not say how to enable it: %s", msg)
	}
	s.api(t, s.AdminKey, "GET", "/repos/app/database", nil, 501)
}
