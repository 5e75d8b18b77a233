package e2e

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/lockstep-hq/lockstep/fssnap/contain"
	"github.com/lockstep-hq/lockstep/internal/testenv"
	"github.com/lockstep-hq/lockstep/redisbranch"
)

// randomizedRuns is how many failing `lockstep run --workspace` rounds
// TestRandomizedRunsWithData drives by default (randomizedRunsShort with
// -short; LOCKSTEP_TEST_RANDOMIZED_RUNS=N overrides both, e.g. 200 for
// the full count). Each round is one real `lockstep run` process:
// push the worktree, checkpoint (Postgres branch + Redis branch
// snapshots), contained command (sh, psql, redis-cli, maybe python3),
// evidence push, restore of code, database and Redis, whole-instance
// verification, run report.
//
// Why 25 and not 200: measured on this 2-CPU machine at load average
// 11-20 (2026-12-06, RR_DEBUG=1 prints the phases), a round costs
// 0.7-0.95 s in the loop (the run itself ~0.55 s: checkpoint 56 ms, the
// command ~290 ms, the server's restore of code + database + Redis
// ~200 ms) plus 0.45-1.3 s after the rounds: server shutdown (the
// database manager waits for the background work each checkpoint and
// restore queued) and dropping the per-checkpoint snapshot databases;
// 5 s of setup. 200 rounds took 273 s (179 s of rounds, all clean); 25
// fit in 60 s.
const (
	randomizedRuns      = 25
	randomizedRunsShort = 10
)

// TestRandomizedRunsWithData: issue 22's "Done when" row, end to end.
// Randomized failing runs of `lockstep run --workspace` against a real
// server with Postgres and Redis branching: each run writes files inside
// --dir and outside it (/tmp, /var/tmp, $HOME), leaves processes (some
// listening on a TCP socket), writes rows into the workspace's Postgres
// branch (inserts, updates, deletes, a new table) and keys into its Redis
// branch, then fails. After every run the worktree, the database rows and
// tables, the Redis keys and values are exactly the pre-run state, nothing
// written outside --dir exists on the real filesystems and no process of
// the run is alive: every retry starts from a verified clean instance. A
// last, successful run makes every failing run's successor a retry, so
// the server's /metrics (fed by the run reports) must count all of them
// as retries from a clean instance and read purity index 1 (100%).
//
// Cost: see randomizedRuns (and README / docs/benchmarks.md).
func TestRandomizedRunsWithData(t *testing.T) {
	for _, b := range []string{"redis-server", "redis-cli", "psql", "/usr/bin/python3"} {
		if _, err := exec.LookPath(b); err != nil {
			t.Skipf("%s not installed: this test's agent command needs it", b)
		}
	}
	if err := contain.Available(); err != nil {
		t.Skipf("instance containment unavailable here: %v", err)
	}
	runs := randomizedRuns
	if testing.Short() {
		runs = randomizedRunsShort
	}
	if v := os.Getenv("LOCKSTEP_TEST_RANDOMIZED_RUNS"); v != "" { // to measure the per-round cost
		runs, _ = strconv.Atoi(v)
	}
	ctx := context.Background()
	t0 := time.Now()
	dbg := func(what string) {
		if os.Getenv("RR_DEBUG") != "" {
			t.Logf("%s at %v", what, time.Since(t0))
		}
	}

	// Postgres: the base repository's template database, a few rows.
	adminURL := testenv.PostgresURL(t)
	prefix := "rr" + randHex(2)
	t.Cleanup(func() { dbg("cleanup done") })
	t.Cleanup(func() { dropPrefix(t, adminURL, prefix) })
	t.Cleanup(func() { dbg("dropPrefix starts") })
	tpl := "apptpl_" + prefix
	t.Cleanup(func() {
		if c, err := pgx.Connect(ctx, adminURL); err == nil {
			c.Exec(ctx, `DROP DATABASE IF EXISTS `+tpl+` WITH (FORCE)`)
			c.Close(ctx)
		}
	})
	admin, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, `CREATE DATABASE `+tpl); err != nil {
		t.Fatal(err)
	}
	admin.Close(ctx)
	u, _ := url.Parse(adminURL)
	u.Path = "/" + tpl
	tc, err := pgx.Connect(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tc.Exec(ctx, `CREATE TABLE items (id int primary key, v text); INSERT INTO items SELECT g, 'v' || g FROM generate_series(1, 5) g`); err != nil {
		t.Fatal(err)
	}
	tc.Close(ctx)

	dbg("pg template")
	// Redis: the base's template dataset, an RDB saved by a real redis-server.
	rdir := t.TempDir()
	ports := 21000 + os.Getpid()%300*30
	seedDir := t.TempDir()
	seed, err := redisbranch.New(redisbranch.Config{Dir: seedDir, Secret: []byte("seed"), PortMin: ports + 20, PortMax: ports + 29})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := seed.CreateBranch(ctx, "seed", "seed")
	if err != nil {
		t.Fatal(err)
	}
	so, _ := redis.ParseURL(sb.URL)
	sc := redis.NewClient(so)
	for i := 1; i <= 5; i++ {
		sc.Set(ctx, fmt.Sprintf("k:%d", i), fmt.Sprintf("v%d", i), 0)
	}
	sc.Close()
	if err := seed.Snapshot(ctx, "seed", "tpl"); err != nil {
		t.Fatal(err)
	}
	rdb, err := os.ReadFile(filepath.Join(seedDir, "branches", "seed", "snapshots", "tpl.rdb"))
	if err != nil {
		t.Fatal(err)
	}
	seed.Close()
	os.MkdirAll(filepath.Join(rdir, "templates"), 0o700)
	if err := os.WriteFile(filepath.Join(rdir, "templates", "app.rdb"), rdb, 0o600); err != nil {
		t.Fatal(err)
	}

	dbg("redis template")
	s := startRunServer(t, "LOCKSTEP_BRANCH_DATABASE_URL="+adminURL, "LOCKSTEP_BRANCH_PREFIX="+prefix,
		"LOCKSTEP_BRANCH_REDIS=on", "LOCKSTEP_BRANCH_REDIS_DIR="+rdir,
		"LOCKSTEP_BRANCH_REDIS_PORTS="+strconv.Itoa(ports)+"-"+strconv.Itoa(ports+19))
	dbg("server")
	s.api(t, s.AdminKey, "POST", "/repos", map[string]string{"name": "app"}, 201)
	s.api(t, s.AdminKey, "PUT", "/repos/app/database", map[string]string{"template": tpl}, 200)
	agent := s.api(t, s.AdminKey, "POST", "/keys", map[string]string{"name": "agent-1", "role": "agent"}, 201)["secret"].(string)
	base := t.TempDir()
	writeTree(t, base, map[string]string{"main.go": "package main\n\nfunc main() {}\n", "a.txt": "a\n", "d/b.txt": "b\n"})
	if out, err := s.cli(t, s.AdminKey, "push", base, "--repo", "app"); err != nil {
		t.Fatalf("push base: %v\n%s", err, out)
	}
	s.api(t, agent, "POST", "/repos/app/forks", map[string]string{"name": "ws"}, 201)
	dbg("forked")
	dsn := s.api(t, agent, "GET", "/repos/ws/database", nil, 200)["dsn"].(string)
	rurl, _ := s.api(t, agent, "GET", "/repos/ws/redis", nil, 200)["url"].(string)
	if !strings.HasPrefix(rurl, "redis://") {
		t.Fatalf("workspace has no Redis branch: %q", rurl)
	}
	work := t.TempDir()
	if out, err := s.cli(t, agent, "checkout", "ws", work); err != nil {
		t.Fatalf("checkout: %v\n%s", err, out)
	}

	dbg("checkout")
	tag := fmt.Sprintf("lockstep-rr-%d-%d", os.Getpid(), time.Now().UnixNano())
	t.Cleanup(func() { killMarked(tag) })
	home := filepath.Join(t.TempDir(), "home")
	os.MkdirAll(home, 0o755)
	shared := t.TempDir() // written through (--share): where a listener says it is up
	state, cache := t.TempDir(), t.TempDir()
	outside := func(i int) []string {
		return []string{fmt.Sprintf("/tmp/%s-%d", tag, i), fmt.Sprintf("/var/tmp/%s-%d", tag, i), filepath.Join(home, fmt.Sprintf(".%s-%d", tag, i))}
	}
	t.Cleanup(func() { // only if containment failed a round: never leave them
		for i := 0; i < runs; i++ {
			for _, p := range outside(i) {
				os.Remove(p)
			}
		}
	})

	files0, rows0, keys0 := snapshotDir(t, work), dbState(t, dsn), redisState(t, rurl)
	rnd := rand.New(rand.NewPCG(22, 200))
	start := time.Now()
	for i := 0; i < runs; i++ {
		var b strings.Builder
		b.WriteString("set -e\n")
		for k, p := range outside(i) {
			if k == 0 || rnd.IntN(2) == 0 {
				fmt.Fprintf(&b, "echo %d > %s\n", i, p)
			}
		}
		// Files inside --dir: an edit, a new file, a deletion.
		fmt.Fprintf(&b, "echo run%d >> a.txt\nmkdir -p gen && echo %d > gen/f%d\n", i, i, rnd.IntN(3))
		if rnd.IntN(2) == 0 {
			b.WriteString("rm -f d/b.txt\n")
		}
		// Rows: inserts always, then an update, a delete or a new table.
		sql := fmt.Sprintf("INSERT INTO items VALUES (%d, 'run%d');", 1000+i, i)
		switch rnd.IntN(3) {
		case 0:
			sql += fmt.Sprintf(" UPDATE items SET v = 'broken%d' WHERE id = %d;", i, 1+rnd.IntN(5))
		case 1:
			sql += fmt.Sprintf(" DELETE FROM items WHERE id = %d;", 1+rnd.IntN(5))
		case 2:
			sql += fmt.Sprintf(" CREATE TABLE t%d (x int); INSERT INTO t%d VALUES (%d);", i, i, i)
		}
		fmt.Fprintf(&b, "psql \"$DSN\" -X -q -v ON_ERROR_STOP=1 -c %q\n", sql)
		// Keys: a new key always, then an overwrite or a deletion.
		fmt.Fprintf(&b, "redis-cli --no-auth-warning -u \"$REDIS_URL\" SET run:%d x >/dev/null\n", i)
		if rnd.IntN(2) == 0 {
			fmt.Fprintf(&b, "redis-cli --no-auth-warning -u \"$REDIS_URL\" SET k:%d broken >/dev/null\n", 1+rnd.IntN(5))
		} else {
			fmt.Fprintf(&b, "redis-cli --no-auth-warning -u \"$REDIS_URL\" DEL k:%d >/dev/null\n", 1+rnd.IntN(5))
		}
		// Processes: a detached sleeper, or a detached TCP listener.
		switch rnd.IntN(3) {
		case 0:
			fmt.Fprintf(&b, "(setsid env -i /bin/sh -c 'exec sleep 1000 %s' &)\n", tag)
		case 1:
			port := filepath.Join(shared, fmt.Sprintf("port-%d", i))
			fmt.Fprintf(&b, "(setsid env -i /usr/bin/python3 -S -c 'import socket,time; s=socket.socket(); s.bind((\"127.0.0.1\",0)); s.listen(); open(\"%s\",\"w\").write(\"up\"); time.sleep(1000)' %s &)\n", port, tag)
			fmt.Fprintf(&b, "for k in $(seq 200); do [ -s %s ] && break; sleep 0.02; done\n", port)
		}
		code := 1 + rnd.IntN(9) // 10 and 11 are lockstep run's own (residue, quarantined)
		fmt.Fprintf(&b, "exit %d\n", code)

		r := s.CLIEnv(t, agent, work, []string{"XDG_CACHE_HOME=" + cache, "HOME=" + home, "DSN=" + dsn, "PATH=" + os.Getenv("PATH")},
			"run", "--workspace", "ws", "--dir", work, "--driver", "copy", "--state-root", state, "--share", shared, "--json", "--", "sh", "-c", b.String())
		if r.Code != code {
			t.Fatalf("run %d: exit %d, want %d (the command's)\nscript:\n%s\nstdout %s\nstderr %s", i, r.Code, code, b.String(), r.Stdout, r.Stderr)
		}
		if strings.Contains(r.Stderr, "could not report") {
			t.Fatalf("run %d: the report was not sent:\n%s", i, r.Stderr)
		}
		var rep struct {
			RolledBack bool   `json:"rolled_back"`
			Contain    string `json:"contain"`
			Purity     struct {
				Checked, Clean, Instance bool
			}
			Restored *struct {
				DBRestored    bool `json:"db_restored"`
				RedisRestored bool `json:"redis_restored"`
			} `json:"restored"`
		}
		if err := jsonUnmarshal([]byte(r.Stdout), &rep); err != nil {
			t.Fatalf("run %d: report: %v\n%s", i, err, r.Stdout)
		}
		if !rep.RolledBack || rep.Contain != "instance" || !rep.Purity.Checked || !rep.Purity.Clean || !rep.Purity.Instance ||
			rep.Restored == nil || !rep.Restored.DBRestored || !rep.Restored.RedisRestored {
			t.Fatalf("run %d: report %+v\n%s\n%s", i, rep, r.Stdout, r.Stderr)
		}
		// Verified independently of the report: the pre-run state, everywhere.
		if got := snapshotDir(t, work); !sameMap(got, files0) {
			t.Fatalf("run %d: files in --dir differ after the rollback:\nbefore %v\nafter  %v", i, files0, got)
		}
		if got := dbState(t, dsn); got != rows0 {
			t.Fatalf("run %d: database differs after the rollback:\nbefore %s\nafter  %s", i, rows0, got)
		}
		if got := redisState(t, rurl); got != keys0 {
			t.Fatalf("run %d: Redis differs after the rollback:\nbefore %s\nafter  %s", i, keys0, got)
		}
		for _, p := range outside(i) {
			if _, err := os.Lstat(p); err == nil {
				t.Fatalf("run %d: %s exists on the real filesystem", i, p)
			}
		}
		if left := killMarked(tag); len(left) > 0 {
			t.Fatalf("run %d: processes survived: %v", i, left)
		}
	}
	elapsed := time.Since(start)
	// The last run succeeds: it, like every failing run after the first,
	// is a retry after a failed run.
	if r := s.CLIEnv(t, agent, work, []string{"XDG_CACHE_HOME=" + cache, "HOME=" + home, "PATH=" + os.Getenv("PATH")},
		"run", "--workspace", "ws", "--dir", work, "--driver", "copy", "--state-root", state, "--", "true"); r.Code != 0 {
		t.Fatalf("final run: exit %d\n%s", r.Code, r.Stderr)
	}

	resp, err := http.Get(s.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	m, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{fmt.Sprintf(`lockstep_run_retries_total{from_clean="true"} %d`, runs), "lockstep_run_purity_index 1\n",
		fmt.Sprintf("lockstep_run_rollback_seconds_count %d", runs)} {
		if !strings.Contains(string(m), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if strings.Contains(string(m), `lockstep_run_retries_total{from_clean="false"}`) {
		t.Errorf("/metrics counts a retry from an unverified instance")
	}
	dbg("final run and metrics")
	t.Logf("purity index %d/%d (100%%): %d failing runs with rows and keys in %v, %v per round", runs, runs, runs, elapsed.Round(time.Millisecond), (elapsed / time.Duration(max(runs, 1))).Round(time.Millisecond))
}

func sameMap(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// dbState is every table of the public schema and every row of items.
func dbState(t *testing.T, dsn string) string {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("the workspace's DSN: %v", err)
	}
	defer c.Close(ctx)
	var tables, rows string
	if err := c.QueryRow(ctx, `SELECT coalesce(string_agg(tablename, ',' ORDER BY tablename), '') FROM pg_tables WHERE schemaname = 'public'`).Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if err := c.QueryRow(ctx, `SELECT coalesce(string_agg(id || '=' || v, ',' ORDER BY id), '') FROM items`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	return "tables " + tables + "; items " + rows
}

// redisState is every key and its value.
func redisState(t *testing.T, u string) string {
	t.Helper()
	ctx := context.Background()
	o, err := redis.ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(o)
	defer c.Close()
	keys, err := c.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatalf("the workspace's Redis URL: %v", err)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		v, _ := c.Get(ctx, k).Result()
		fmt.Fprintf(&b, "%s=%s,", k, v)
	}
	return b.String()
}
