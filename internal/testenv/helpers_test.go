package testenv_test

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockstep-hq/lockstep/internal/testenv"
)

// TestHintNamesDeadHelper: under scripts/test, a test that cannot reach a
// helper scripts/test started is told that the helper died and where its
// log is, not to "run the tests through scripts/test".
func TestHintNamesDeadHelper(t *testing.T) {
	port := closedPort(t)
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	helpers := filepath.Join(dir, "helpers")
	redisURL := fmt.Sprintf("redis://127.0.0.1:%d/0", port)
	pgURL := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", closedPort(t))
	lines := fmt.Sprintf("redis %d %s %s/redis.log\npostgres %d %s %s/server.log\n",
		dead.Process.Pid, redisURL, dir, os.Getpid(), pgURL, dir)
	if err := os.WriteFile(helpers, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("LOCKSTEP_TEST_HELPERS", helpers)
	t.Setenv("LOCKSTEP_TEST_REDIS_URL", redisURL)
	t.Setenv("LOCKSTEP_TEST_POSTGRES_URL", pgURL+"&connect_timeout=2")
	redis.SetLogger(discardLogger{})

	msg := runFatal(t, func(tb testing.TB) { testenv.MustRedis(tb) })
	for _, want := range []string{"cannot reach Redis at " + redisURL, "throwaway redis", fmt.Sprintf("pid %d", dead.Process.Pid), "DIED", dir + "/redis.log"} {
		if !strings.Contains(msg, want) {
			t.Errorf("dead helper: message lacks %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "run the tests through scripts/test") {
		t.Errorf("dead helper: message tells to run scripts/test, which is running:\n%s", msg)
	}
	// A helper that is alive but refuses (here: this process "serves" the
	// Postgres URL) is not called dead.
	msg = runFatal(t, func(tb testing.TB) { testenv.MustPostgresDB(tb) })
	if !strings.Contains(msg, "is running but did not answer") || strings.Contains(msg, "DIED") {
		t.Errorf("live helper: %s", msg)
	}
	// A URL scripts/test did not start anything for.
	t.Setenv("LOCKSTEP_TEST_REDIS_URL", fmt.Sprintf("redis://127.0.0.1:%d/0", closedPort(t)))
	msg = runFatal(t, func(tb testing.TB) { testenv.MustRedis(tb) })
	if !strings.Contains(msg, "scripts/test did not start a redis") {
		t.Errorf("foreign URL: %s", msg)
	}
}

// TestServicesScriptNamesKilledHelper starts throwaway redis and versitygw
// with scripts/lib/services.sh (as scripts/test does), kills both on
// purpose, and checks that the watcher names each (pid, URL) at once and
// keeps its log, that a test then hears that the helper died, and that the
// check after the stage names it again and starts it on the same URL.
func TestServicesScriptNamesKilledHelper(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		if _, err := os.Stat("/usr/sbin/redis-server"); err != nil {
			t.Fatalf("redis-server not found: apt-get install -y redis-server (scripts/test installs it)")
		}
	}
	vgw := testenv.Versitygw(t)
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	tmp, kept := t.TempDir(), t.TempDir()
	script := `
set -euo pipefail
LOG_NAME=services-test
source scripts/lib/services.sh
services_init
start_redis
start_s3
services_watch
echo "helpers $LOCKSTEP_TEST_HELPERS"
echo "redis $LOCKSTEP_TEST_REDIS_URL $_svc_redis_pid"
echo "versitygw $LOCKSTEP_TEST_S3_URL $_svc_s3_pid"
kill -9 "$_svc_redis_pid" "$_svc_s3_pid"
# The watcher notices within seconds; wait for its markers.
for i in $(seq 1 1200); do
	[[ -e $_svc_dir/dead/redis.$_svc_redis_pid && -e $_svc_dir/dead/versitygw.$_svc_s3_pid ]] && break
	sleep 0.1
done
echo noticed
read -r _  # the Go test asks testenv what it makes of the dead helpers
services_check "the stage" && echo "check: nothing died" || echo "check: died"
redis_reachable && echo "redis answers again"
s3_reachable && echo "versitygw answers again"
services_summary
`
	cmd := exec.Command("bash", "-c", script)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp, "LOCKSTEP_TEST_LOG_DIR="+kept, "LOCKSTEP_TEST_VERSITYGW="+vgw,
		"LOCKSTEP_TEST_KEEP_SERVICES=", "LOCKSTEP_TEST_S3_URL=", "LOCKSTEP_TEST_HELPERS=")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	t.Cleanup(func() {
		stdin.Close()
		select {
		case <-exited:
		case <-time.After(60 * time.Second):
			cmd.Process.Kill()
		}
	})
	vals := map[string][]string{}
	sc := bufio.NewScanner(stdout)
	for sc.Scan() && sc.Text() != "noticed" {
		f := strings.Fields(sc.Text())
		vals[f[0]] = f[1:]
	}
	if len(vals["redis"]) != 2 || len(vals["versitygw"]) != 2 || len(vals["helpers"]) != 1 {
		stdin.Close()
		io.Copy(io.Discard, stdout)
		cmd.Wait()
		close(exited)
		t.Fatalf("script did not start the helpers: %v\nstderr:\n%s", vals, stderr.String())
	}
	// What a test sees while the helper is dead.
	t.Setenv("LOCKSTEP_TEST_HELPERS", vals["helpers"][0])
	t.Setenv("LOCKSTEP_TEST_REDIS_URL", vals["redis"][0])
	t.Setenv("LOCKSTEP_TEST_S3_URL", vals["versitygw"][0])
	redis.SetLogger(discardLogger{})
	// (MustS3Bucket takes the same path, but minio retries a refused
	// connection for its whole 15 s budget: Redis keeps this test quick.)
	msg := runFatal(t, func(tb testing.TB) { testenv.MustRedis(tb) })
	if !strings.Contains(msg, "throwaway redis") || !strings.Contains(msg, "DIED") || !strings.Contains(msg, "pid "+vals["redis"][1]) {
		t.Errorf("redis killed: the test's failure does not say it died:\n%s", msg)
	}
	io.WriteString(stdin, "go on\n")
	rest, _ := io.ReadAll(stdout)
	waitErr = cmd.Wait()
	close(exited)
	if err := waitErr; err != nil {
		t.Fatalf("script: %v\nstdout:\n%s\nstderr:\n%s", err, rest, stderr.String())
	}
	out, errs := string(rest), stderr.String()
	for _, want := range []string{"check: died", "redis answers again", "versitygw answers again"} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s\nstderr:\n%s", want, out, errs)
		}
	}
	for name, v := range vals {
		if name == "helpers" {
			continue
		}
		// Named at once by the watcher, after the stage, and in the summary.
		re := regexp.MustCompile(`(?m)^services-test: (HELPER DIED|HELPER DIED during the stage|helper died): (the throwaway )?` + name + ` \(pid ` + v[1])
		if n := len(re.FindAllString(errs, -1)); n != 3 {
			t.Errorf("%s named %d times, want 3 (watcher, check, summary):\n%s", name, n, errs)
		}
		logs, _ := filepath.Glob(filepath.Join(kept, "*-"+name+".log"))
		if len(logs) != 1 {
			t.Errorf("%s: kept logs %v, want one in %s", name, logs, kept)
		}
	}
	if !strings.Contains(errs, "killed by signal 9") {
		t.Errorf("versitygw's exit status not named:\n%s", errs)
	}
}
