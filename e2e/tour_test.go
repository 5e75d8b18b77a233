package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/lockstep-hq/lockstep/internal/e2ekit"
	"github.com/lockstep-hq/lockstep/internal/testenv"
)

// tourBlocks returns the ```sh blocks of README.md's "A tour" section, in
// order: the test runs what the README says, so the two cannot drift.
func tourBlocks(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	start := strings.Index(readme, "\n## A tour\n")
	if start < 0 {
		t.Fatal(`README.md has no "## A tour" section`)
	}
	section := readme[start+1:]
	if end := strings.Index(section[3:], "\n## "); end >= 0 {
		section = section[:end+3]
	}
	var blocks []string
	for _, m := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(section, -1) {
		blocks = append(blocks, m[1])
	}
	if len(blocks) < 3 {
		t.Fatalf("the tour has %d sh blocks, want at least 3", len(blocks))
	}
	return blocks
}

// runItFlags are the flags of the README's "Run it" serve command.
func runItFlags(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	start := strings.Index(readme, "\n## Run it\n")
	if start < 0 {
		t.Fatal("README has no Run it section")
	}
	const cmd = "go run ./cmd/lockstep serve"
	i := strings.Index(readme[start:], cmd)
	if i < 0 {
		t.Fatalf("Run it has no %q", cmd)
	}
	line := readme[start+i+len(cmd):]
	line = line[:strings.IndexByte(line, '\n')]
	if j := strings.Index(line, "#"); j >= 0 {
		line = line[:j]
	}
	return strings.Fields(line)
}

// TestReadmeTour (issue 14): the README's tour, run as a bash script
// (set -euo pipefail) from the built binary against a real server with
// database branching. The only substitutions are the server's address and
// a unique template database name. The tour was written in an order that
// did not work (a runner started after the push never tested it, the
// build made ./lockstep but the tour called lockstep, a promoted workspace
// was then used for a run); this keeps it working.
func TestReadmeTour(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"bash", "psql", "createdb", "git", "go", "redis-server", "redis-cli"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the tour needs %s on PATH", tool)
		}
	}
	blocks := tourBlocks(t)
	ctx := context.Background()
	adminURL := testenv.PostgresURL(t)
	prefix := "e" + randHex(2)
	t.Cleanup(func() { dropPrefix(t, adminURL, prefix) })
	tpl := "shoptpl_" + prefix
	// The tour makes the template itself (createdb shop_dev): the client
	// tools reach the test server through the PG* variables.
	pgc, err := pgx.ParseConfig(adminURL)
	if err != nil {
		t.Fatal(err)
	}
	pgEnv := []string{"PGHOST=" + pgc.Host, fmt.Sprintf("PGPORT=%d", pgc.Port), "PGUSER=" + pgc.User, "PGPASSWORD=" + pgc.Password}
	t.Cleanup(func() {
		c, err := pgx.Connect(ctx, adminURL)
		if err == nil {
			c.Exec(ctx, `DROP DATABASE IF EXISTS `+tpl+` WITH (FORCE)`)
			c.Close(ctx)
		}
	})
	// The server runs as "Run it" starts it: its flags, and not the
	// harness's loopback allowance for hooks (without the README's
	// --hook-allow-hosts the runner could not register its hook).
	s := &server{e2ekit.StartServer(t, e2ekit.ServerOpts{Args: runItFlags(t),
		Env: []string{"LOCKSTEP_HOOK_ALLOW_HOSTS=", "LOCKSTEP_BRANCH_DATABASE_URL=" + adminURL, "LOCKSTEP_BRANCH_PREFIX=" + prefix,
			"LOCKSTEP_BRANCH_REDIS=on", "LOCKSTEP_BRANCH_REDIS_PORTS=" + redisPorts()}})}

	// The reader's directory: lockstep-data/admin.key as the server
	// wrote it, and lockstep on PATH as "Run it" puts it.
	work := t.TempDir()
	os.MkdirAll(filepath.Join(work, "lockstep-data"), 0o700)
	os.WriteFile(filepath.Join(work, "lockstep-data", "admin.key"), []byte(s.AdminKey+"\n"), 0o600)
	bin := filepath.Join(t.TempDir(), "bin")
	os.MkdirAll(bin, 0o755)
	if err := os.Symlink(e2ekit.Binary, filepath.Join(bin, "lockstep")); err != nil {
		t.Fatal(err)
	}

	host := strings.TrimPrefix(s.URL, "http://")
	script := "set -euxo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n"
	for _, b := range blocks {
		b = strings.ReplaceAll(b, "http://127.0.0.1:7070", s.URL)
		b = strings.ReplaceAll(b, "127.0.0.1:7070", host)
		b = strings.ReplaceAll(b, "shop_dev", tpl)
		script += b
	}
	goCache, _ := exec.Command("go", "env", "GOCACHE").Output()
	home := t.TempDir()
	cmd := exec.Command("bash", "-c", script)
	cmd.Dir = work
	cmd.Env = append(e2ekit.GitEnv(home), "PATH="+bin+":"+os.Getenv("PATH"), "XDG_CACHE_HOME="+t.TempDir(),
		"XDG_STATE_HOME="+t.TempDir(), "GOCACHE="+strings.TrimSpace(string(goCache)), "GOPATH="+filepath.Join(home, "go"),
		"GOFLAGS=-mod=mod", "GOPROXY=off", "GOTOOLCHAIN=local", "GOWORK=off", "CGO_ENABLED=0")
	cmd.Env = append(cmd.Env, pgEnv...)
	done := make(chan struct{})
	var out []byte
	go func() { out, err = cmd.CombinedOutput(); close(done) }()
	select {
	case <-done:
	case <-time.After(8 * time.Minute):
		cmd.Process.Kill()
		<-done
	}
	text := string(out)
	if err != nil {
		runnerLog, _ := os.ReadFile(filepath.Join(work, "runner.log"))
		t.Fatalf("the README tour failed: %v\n%s\nrunner.log:\n%s", err, text, runnerLog)
	}
	for _, want := range []string{
		"role admin",                       // whoami
		"promoted task-42 into shop:main",  // the gate passed with the runner started after the push
		"failed: code, database and files", // the run failed and was rolled back
		"restored task-43 to cp-",
		"a checkout of task-42 still has the old files", // rollback says to check out again
		"redis restored: true",                          // the Redis step's keys rolled back
		"failed: keys, code and files rolled back",      // …with the run
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the tour's output lacks %q:\n%s", want, text)
		}
	}
	if got := s.Call(t, "GET", "/api/v1/repos/shop/blob/main/shop.go", s.AdminKey, nil, ""); !strings.Contains(string(got.Body), "func Double") ||
		strings.Contains(string(got.Body), "oops") {
		t.Errorf("main after the promote: %s", got.Body)
	}
	// Checked out again after the rollback: the broken edit is gone.
	if b, err := os.ReadFile(filepath.Join(work, "work", "shop.go")); err != nil || strings.Contains(string(b), "oops") || !strings.Contains(string(b), "func Double") {
		t.Errorf("work/shop.go after the rollback and checkout: %v %q", err, b)
	}
	// The clone authenticated with a header: no key in its config.
	if b, err := os.ReadFile(filepath.Join(work, "clone-42", ".git", "config")); err != nil || strings.Contains(string(b), "lsk_") {
		t.Errorf("clone-42/.git/config: %v\n%s", err, b)
	}
	if b, err := os.ReadFile(filepath.Join(work, "work43", "shop.go")); err != nil || strings.Contains(string(b), "half-done") {
		t.Errorf("work43/shop.go after the failed run: %v %q", err, b)
	}
	// The Redis step's key is gone, through the workspace's own URL.
	r := s.api(t, s.AdminKey, "GET", "/repos/task-43/redis", nil, 200)
	o, err := redis.ParseURL(r["url"].(string))
	if err != nil {
		t.Fatal(err)
	}
	rc := redis.NewClient(o)
	defer rc.Close()
	if n, err := rc.Exists(ctx, "cart:43").Result(); err != nil || n != 0 {
		t.Errorf("cart:43 survived the failed Redis step (%d, %v)", n, err)
	}
}

// redisPorts is a port range for the tour's Redis branches away from the
// default (a developer's own server) and from the other e2e tests'.
func redisPorts() string {
	p := 19000 + os.Getpid()%100*20
	return strconv.Itoa(p) + "-" + strconv.Itoa(p+19)
}
