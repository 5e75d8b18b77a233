package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/lockstep-hq/lockstep/internal/e2ekit"
	"github.com/lockstep-hq/lockstep/redisbranch"
)

// TestFailedRunRollsBackRedisKeys: with --branch-redis on, a workspace's
// run gets REDIS_URL (its own redis-server, seeded from the base's
// template RDB); a failed run that wrote keys with redis-cli is rolled
// back with its files and code: the keys are the checkpoint's again,
// through the same URL.
func TestFailedRunRollsBackRedisKeys(t *testing.T) {
	t.Parallel()
	for _, b := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(b); err != nil {
			t.Skipf("%s not installed: Redis branching needs the real binaries (apt-get install redis-server)", b)
		}
	}
	ctx := context.Background()
	dir := t.TempDir()
	ports := 18000 + os.Getpid()%300*50

	// The base's template dataset: an RDB saved by a real redis-server.
	seedDir := t.TempDir()
	seed, err := redisbranch.New(redisbranch.Config{Dir: seedDir, Secret: []byte("seed"), PortMin: ports + 40, PortMax: ports + 49})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := seed.CreateBranch(ctx, "seed", "seed")
	if err != nil {
		t.Fatal(err)
	}
	so, _ := redis.ParseURL(sb.URL)
	sc := redis.NewClient(so)
	sc.Set(ctx, "cart:1", "apple", 0)
	sc.Close()
	if err := seed.Snapshot(ctx, "seed", "tpl"); err != nil {
		t.Fatal(err)
	}
	rdb, err := os.ReadFile(filepath.Join(seedDir, "branches", "seed", "snapshots", "tpl.rdb"))
	if err != nil {
		t.Fatal(err)
	}
	seed.Close()
	os.MkdirAll(filepath.Join(dir, "templates"), 0o700)
	if err := os.WriteFile(filepath.Join(dir, "templates", "app.rdb"), rdb, 0o600); err != nil {
		t.Fatal(err)
	}

	s := startRunServer(t, "LOCKSTEP_BRANCH_REDIS=on", "LOCKSTEP_BRANCH_REDIS_DIR="+dir,
		"LOCKSTEP_BRANCH_REDIS_PORTS="+strconv.Itoa(ports)+"-"+strconv.Itoa(ports+39))
	s.api(t, s.AdminKey, "POST", "/repos", map[string]string{"name": "app"}, 201)
	agent := s.api(t, s.AdminKey, "POST", "/keys", map[string]string{"name": "agent-1", "role": "agent"}, 201)["secret"].(string)
	base := t.TempDir()
	writeTree(t, base, map[string]string{"main.go": "package main\n\nfunc main() {}\n"})
	if out, err := s.cli(t, s.AdminKey, "push", base, "--repo", "app", "--json"); err != nil {
		t.Fatalf("push base: %v\n%s", err, out)
	}
	s.api(t, agent, "POST", "/repos/app/forks", map[string]string{"name": "task-1"}, 201)
	r := s.api(t, agent, "GET", "/repos/task-1/redis", nil, 200)
	url, _ := r["url"].(string)
	if r["template"] != true || !strings.HasPrefix(url, "redis://") {
		t.Fatalf("GET /redis = %v: want a URL seeded from the template", r)
	}
	work := t.TempDir()
	if out, err := s.cli(t, agent, "checkout", "task-1", work); err != nil {
		t.Fatalf("checkout: %v\n%s", err, out)
	}
	before := snapshotDir(t, work)

	script := `set -e
test -n "$REDIS_URL"
test "$(redis-cli --no-auth-warning -u "$REDIS_URL" GET cart:1)" = apple
redis-cli --no-auth-warning -u "$REDIS_URL" SET cart:1 broken >/dev/null
redis-cli --no-auth-warning -u "$REDIS_URL" SET session:9 leaked >/dev/null
echo ghost > ghost.txt
echo "// half-done" >> main.go
exit 4`
	cmd := exec.Command(e2ekit.Binary, "run", "--workspace", "task-1", "--dir", work, "--driver", "copy", "--state-root", t.TempDir(), "--json", "--", "sh", "-c", script)
	cmd.Env = append(os.Environ(), "LOCKSTEP_URL="+s.URL, "LOCKSTEP_KEY="+agent, "XDG_CACHE_HOME="+t.TempDir())
	out, err := cmd.Output()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 4 {
		t.Fatalf("lockstep run: want exit status 4 (the command's), got %v\n%s\n%s", err, out, errOut(err))
	}
	var rep struct {
		RolledBack bool `json:"rolled_back"`
		Restored   *struct {
			RedisRestored bool `json:"redis_restored"`
		} `json:"restored"`
	}
	if err := jsonUnmarshal(out, &rep); err != nil {
		t.Fatalf("report: %v\n%s", err, out)
	}
	if !rep.RolledBack || rep.Restored == nil || !rep.Restored.RedisRestored {
		t.Fatalf("report: %+v\n%s", rep, out)
	}
	o, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(o)
	defer c.Close()
	if v, err := c.Get(ctx, "cart:1").Result(); err != nil || v != "apple" {
		t.Fatalf("cart:1 = %q (%v) after the rollback, want apple (through the same URL)", v, err)
	}
	if n, err := c.Exists(ctx, "session:9").Result(); err != nil || n != 0 {
		t.Fatalf("session:9 survived the rollback (%d, %v)", n, err)
	}
	after := snapshotDir(t, work)
	if len(after) != len(before) {
		t.Fatalf("files differ after the rollback:\nbefore %v\nafter  %v", before, after)
	}
	for k, v := range before {
		if after[k] != v {
			t.Fatalf("%s differs after the rollback", k)
		}
	}
	cps := s.api(t, agent, "GET", "/repos/task-1/checkpoints", nil, 200)["checkpoints"].([]any)
	if cp := cps[0].(map[string]any); cp["redis_snapshot"] == "" {
		t.Fatalf("checkpoint without a redis snapshot: %v", cp)
	}
}
