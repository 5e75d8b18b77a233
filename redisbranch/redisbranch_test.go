package redisbranch

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc64"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/redis/go-redis/v9"
)

// Each test gets its own port range so tests of parallel packages (and a
// developer's redis on 6379) never collide.
var nextRange atomic.Int32

func newManager(t testing.TB) *Manager {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server not installed: Redis branching needs the real binary (apt-get install redis-server)")
	}
	base := 21000 + int(nextRange.Add(1))*50 + os.Getpid()%200*100
	m, err := New(Config{Dir: t.TempDir(), Secret: []byte("test-secret"), PortMin: base, PortMax: base + 49})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

func open(t testing.TB, url string) *redis.Client {
	t.Helper()
	o, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { c.Close() })
	return c
}

func get(t testing.TB, c *redis.Client, k string) string {
	t.Helper()
	v, err := c.Get(context.Background(), k).Result()
	if err == redis.Nil {
		return "<nil>"
	}
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func pidOf(t *testing.T, m *Manager, ws string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(m.branchDir(ws), "redis.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(string(b[:len(b)-1]))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

func TestBranchSnapshotRestoreDrop(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)

	// A template dataset bound to the base repository: an RDB saved by
	// a real redis-server.
	seed, err := m.CreateBranch(ctx, "seed", "seed-ws")
	if err != nil {
		t.Fatal(err)
	}
	sc := open(t, seed.URL)
	if err := sc.Set(ctx, "greeting", "from-template", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := m.Snapshot(ctx, "seed-ws", "tpl"); err != nil {
		t.Fatal(err)
	}
	if err := copyFile(m.snapPath("seed-ws", "tpl"), m.TemplatePath("app")); err != nil {
		t.Fatal(err)
	}

	b, err := m.CreateBranch(ctx, "app", "ws1")
	if err != nil {
		t.Fatal(err)
	}
	if !b.Template || b.Repo != "app" {
		t.Fatalf("branch = %+v, want seeded from app's template", b)
	}
	c := open(t, b.URL)
	if got := get(t, c, "greeting"); got != "from-template" {
		t.Fatalf("greeting = %q, want the template's value", got)
	}
	// Another workspace's instance is separate, with another password.
	b2, err := m.CreateBranch(ctx, "app", "ws2")
	if err != nil {
		t.Fatal(err)
	}
	if b2.URL == b.URL {
		t.Fatal("two workspaces share a URL")
	}
	wrong, _ := redis.ParseURL(b.URL)
	wrong.Password = "nope"
	wc := redis.NewClient(wrong)
	defer wc.Close()
	if err := wc.Ping(ctx).Err(); err == nil {
		t.Fatal("a wrong password was accepted")
	}

	// The agent cannot point the instance's RDB elsewhere (a write of
	// any file as the server's user).
	if err := c.ConfigSet(ctx, "dir", "/tmp").Err(); err == nil {
		t.Fatal("CONFIG SET dir was accepted")
	}
	if err := c.ConfigSet(ctx, "dbfilename", "x.rdb").Err(); err == nil {
		t.Fatal("CONFIG SET dbfilename was accepted")
	}
	c.Set(ctx, "k", "v1", 0)
	if err := m.Snapshot(ctx, "ws1", "ckpt1"); err != nil {
		t.Fatal(err)
	}
	c.Set(ctx, "k", "v2", 0)
	c.Set(ctx, "extra", "x", 0)
	c.Del(ctx, "greeting")
	if err := m.Restore(ctx, "ws1", "ckpt1"); err != nil {
		t.Fatal(err)
	}
	// The same URL answers, with the checkpoint's keys.
	c2 := open(t, b.URL)
	if got := get(t, c2, "k"); got != "v1" {
		t.Fatalf("k = %q after restore, want v1", got)
	}
	if got := get(t, c2, "extra"); got != "<nil>" {
		t.Fatalf("extra = %q after restore, want absent", got)
	}
	if got := get(t, c2, "greeting"); got != "from-template" {
		t.Fatalf("greeting = %q after restore, want back", got)
	}
	// ws2 untouched by all of it.
	if got := get(t, open(t, b2.URL), "k"); got != "<nil>" {
		t.Fatalf("ws2 sees k = %q", got)
	}

	if err := m.DropSnapshot(ctx, "ws1", "ckpt1"); err != nil {
		t.Fatal(err)
	}
	if err := m.Restore(ctx, "ws1", "ckpt1"); lockstep.ErrorCode(err) != lockstep.ENOTFOUND {
		t.Fatalf("restore of a dropped snapshot: %v, want not_found", err)
	}

	pid := pidOf(t, m, "ws1")
	if err := m.DropBranch(ctx, "ws1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(m.branchDir("ws1")); !os.IsNotExist(err) {
		t.Fatalf("branch directory still there after drop: %v", err)
	}
	if err := syscall.Kill(pid, 0); err == nil {
		t.Fatalf("redis-server %d still running after drop", pid)
	}
	if _, err := m.Branch(ctx, "ws1"); lockstep.ErrorCode(err) != lockstep.ENOTFOUND {
		t.Fatalf("Branch after drop: %v, want not_found", err)
	}
	if err := m.DropBranch(ctx, "ws1"); lockstep.ErrorCode(err) != lockstep.ENOTFOUND {
		t.Fatalf("second drop: %v, want not_found", err)
	}
}

// A restart of Lockstep (Close, then a new Manager on the same directory)
// keeps the dataset and the URL: the instance starts again lazily.
func TestSurvivesRestart(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	b, err := m.CreateBranch(ctx, "app", "ws")
	if err != nil {
		t.Fatal(err)
	}
	open(t, b.URL).Set(ctx, "k", "kept", 0)
	if err := m.Snapshot(ctx, "ws", "s1"); err != nil {
		t.Fatal(err)
	}
	open(t, b.URL).Set(ctx, "after", "also-kept", 0)
	m.Close()

	m2, err := New(m.cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m2.Close)
	b2, err := m2.Branch(ctx, "ws")
	if err != nil {
		t.Fatal(err)
	}
	if b2.URL != b.URL {
		t.Fatalf("URL changed across a restart: %s, was %s", b2.URL, b.URL)
	}
	c := open(t, b2.URL)
	if get(t, c, "k") != "kept" || get(t, c, "after") != "also-kept" {
		t.Fatal("dataset lost across a restart")
	}
	if err := m2.Restore(ctx, "ws", "s1"); err != nil {
		t.Fatal(err)
	}
	if got := get(t, open(t, b2.URL), "after"); got != "<nil>" {
		t.Fatalf("after = %q, want the snapshot's state", got)
	}
}

// Snapshots beyond MaxSnapshots drop the oldest; the newest stay
// restorable.
func TestSnapshotsBounded(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	m.cfg.MaxSnapshots = 2
	b, err := m.CreateBranch(ctx, "app", "ws")
	if err != nil {
		t.Fatal(err)
	}
	c := open(t, b.URL)
	for i, id := range []string{"s1", "s2", "s3"} {
		c.Set(ctx, "k", id, 0)
		if err := m.Snapshot(ctx, "ws", id); err != nil {
			t.Fatal(err)
		}
		// Distinct modification times, whatever the file system's
		// timestamp granularity.
		at := time.Now().Add(time.Duration(i-10) * time.Minute)
		os.Chtimes(m.snapPath("ws", id), at, at)
	}
	if err := m.Restore(ctx, "ws", "s1"); lockstep.ErrorCode(err) != lockstep.ENOTFOUND {
		t.Fatalf("restore of the oldest snapshot beyond the bound: %v, want not_found", err)
	}
	if err := m.Restore(ctx, "ws", "s2"); err != nil {
		t.Fatal(err)
	}
	if got := get(t, open(t, b.URL), "k"); got != "s2" {
		t.Fatalf("k = %q after restoring s2", got)
	}
}

func TestBadNames(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	if _, err := m.CreateBranch(ctx, "app", "../x"); lockstep.ErrorCode(err) != lockstep.EINVALID {
		t.Fatalf("CreateBranch(../x): %v", err)
	}
	if err := m.Snapshot(ctx, "ws", "../../x"); lockstep.ErrorCode(err) != lockstep.EINVALID {
		t.Fatalf("Snapshot(../../x): %v", err)
	}
	if err := m.Snapshot(ctx, "nows", "s"); lockstep.ErrorCode(err) != lockstep.ENOTFOUND {
		t.Fatalf("Snapshot of no branch: %v", err)
	}
}

func BenchmarkRedisBranch(b *testing.B) {
	ctx := context.Background()
	m := newManager(b)
	seedTemplate(b, m, "app", 10000)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ws := fmt.Sprintf("w%d", i)
		if _, err := m.CreateBranch(ctx, "app", ws); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := m.DropBranch(ctx, ws); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

func BenchmarkRedisSnapshot(b *testing.B) {
	ctx := context.Background()
	m := newManager(b)
	seedTemplate(b, m, "app", 10000)
	if _, err := m.CreateBranch(ctx, "app", "ws"); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := m.Snapshot(ctx, "ws", fmt.Sprintf("s%d", i)); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRedisRestore(b *testing.B) {
	ctx := context.Background()
	m := newManager(b)
	seedTemplate(b, m, "app", 10000)
	if _, err := m.CreateBranch(ctx, "app", "ws"); err != nil {
		b.Fatal(err)
	}
	if err := m.Snapshot(ctx, "ws", "s"); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := m.Restore(ctx, "ws", "s"); err != nil {
			b.Fatal(err)
		}
	}
}

// seedTemplate writes repo's template: n keys, saved by a real instance.
func seedTemplate(b testing.TB, m *Manager, repo string, n int) {
	ctx := context.Background()
	s, err := m.CreateBranch(ctx, "seed", "seed-"+repo)
	if err != nil {
		b.Fatal(err)
	}
	c := open(b, s.URL)
	p := c.Pipeline()
	for i := 0; i < n; i++ {
		p.Set(ctx, fmt.Sprintf("key:%d", i), fmt.Sprintf("value-%d", i), 0)
	}
	if _, err := p.Exec(ctx); err != nil {
		b.Fatal(err)
	}
	if err := m.Snapshot(ctx, "seed-"+repo, "t"); err != nil {
		b.Fatal(err)
	}
	if err := copyFile(m.snapPath("seed-"+repo, "t"), m.TemplatePath(repo)); err != nil {
		b.Fatal(err)
	}
	if err := m.DropBranch(ctx, "seed-"+repo); err != nil {
		b.Fatal(err)
	}
}

// The agent's URL can use its Redis fully (FLUSHALL, KEYS, CONFIG GET)
// but cannot lock Lockstep out (CONFIG SET requirepass, ACL SETUSER),
// stop the instance (SHUTDOWN), or reach other hosts from the server's
// (REPLICAOF, MIGRATE); Lockstep's snapshots and restores keep working
// after every attempt. Before the two ACL users, the agent held the only
// password: CONFIG SET requirepass made every later Snapshot fail.
func TestAgentCannotAdministerItsRedis(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	b, err := m.CreateBranch(ctx, "app", "ws")
	if err != nil {
		t.Fatal(err)
	}
	c := open(t, b.URL)
	if err := c.Set(ctx, "k", "v1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.ConfigGet(ctx, "maxmemory-policy").Err(); err != nil {
		t.Fatalf("CONFIG GET refused to the agent: %v", err)
	}
	if err := c.Keys(ctx, "*").Err(); err != nil {
		t.Fatalf("KEYS refused to the agent: %v", err)
	}
	if err := m.Snapshot(ctx, "ws", "s1"); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range [][]any{
		{"CONFIG", "SET", "requirepass", "stolen"},
		{"ACL", "SETUSER", "lockstep", "off"},
		{"ACL", "SETUSER", "default", "resetpass", ">stolen"},
		{"CONFIG", "SET", "dir", "/tmp"},
		{"REPLICAOF", "127.0.0.1", "1"}, // port 1: nothing listens, nothing outside the test is touched
		{"MIGRATE", "127.0.0.1", "1", "k", "0", "1000"},
		{"SHUTDOWN", "NOSAVE"},
		{"SAVE"},
		{"ACL", "LIST"},
		{"MONITOR"},
	} {
		err := c.Do(ctx, cmd...).Err()
		if err == nil || !strings.Contains(err.Error(), "NOPERM") {
			t.Errorf("%v: err = %v, want NOPERM", cmd, err)
		}
	}
	if err := c.FlushAll(ctx).Err(); err != nil {
		t.Fatalf("FLUSHALL refused to the agent: %v", err)
	}
	if err := m.Snapshot(ctx, "ws", "s2"); err != nil {
		t.Fatalf("snapshot after the agent's attempts: %v", err)
	}
	if err := m.Restore(ctx, "ws", "s1"); err != nil {
		t.Fatalf("restore after the agent's attempts: %v", err)
	}
	if got := get(t, open(t, b.URL), "k"); got != "v1" {
		t.Fatalf("k = %q after restoring s1, want v1", got)
	}
}

// An instance started by an older Lockstep (requirepass only, no "acl"
// marker) is still reached, as "default", and gets the two users at its
// next start.
func TestAdoptsInstanceWithoutACLUsers(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	b, err := m.CreateBranch(ctx, "app", "ws")
	if err != nil {
		t.Fatal(err)
	}
	open(t, b.URL).Set(ctx, "k", "kept", 0)
	m.Close() // SHUTDOWN SAVE
	port, err := m.port("ws")
	if err != nil {
		t.Fatal(err)
	}
	// What an older Lockstep ran: one password, the default user's.
	os.Remove(m.aclMarker("ws"))
	dir := m.branchDir("ws")
	old := exec.Command("redis-server", "-")
	old.Dir = dir
	old.Stdin = strings.NewReader(fmt.Sprintf("bind 127.0.0.1\nport %d\nrequirepass %s\ndir %s\ndbfilename dump.rdb\nsave \"\"\nappendonly no\n",
		port, m.password("ws"), dir))
	if err := old.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { old.Process.Kill(); old.Wait() })

	m2, err := New(m.cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m2.Close)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err = m2.Branch(ctx, "ws"); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := m2.Snapshot(ctx, "ws", "s1"); err != nil {
		t.Fatalf("snapshot of an adopted instance: %v", err)
	}
	if err := m2.Restore(ctx, "ws", "s1"); err != nil {
		t.Fatalf("restore of an adopted instance: %v", err)
	}
	if !exists(m2.aclMarker("ws")) {
		t.Fatal("the restart by Restore did not start the instance with the ACL users")
	}
	c := open(t, b.URL)
	if got := get(t, c, "k"); got != "kept" {
		t.Fatalf("k = %q, want kept", got)
	}
	if err := c.Do(ctx, "CONFIG", "SET", "requirepass", "x").Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("CONFIG SET after the restart: %v, want NOPERM", err)
	}
}

// TestRelativeDir: the server's default data directory is relative
// (./lockstep-data), and redis-server runs in the branch directory, so a
// relative dir in its config named a path below itself: it exited at
// start with an empty log, and every branch of the README's default setup
// answered 503.
func TestRelativeDir(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server not installed: Redis branching needs the real binary (apt-get install redis-server)")
	}
	t.Chdir(t.TempDir())
	base := 21000 + int(nextRange.Add(1))*50 + os.Getpid()%200*100
	m, err := New(Config{Dir: filepath.Join("lockstep-data", "redis-branches"), Secret: []byte("test-secret"), PortMin: base, PortMax: base + 49})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	ctx := context.Background()
	b, err := m.CreateBranch(ctx, "app", "rel-ws")
	if err != nil {
		t.Fatalf("CreateBranch with a relative directory: %v", err)
	}
	c := open(t, b.URL)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := m.Snapshot(ctx, "rel-ws", "s1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join("lockstep-data", "redis-branches", "branches", "rel-ws", "redis.log")); err != nil {
		t.Fatalf("the instance's log is not in its branch directory: %v", err)
	}
}

// TestStartFailureSaysWhy: a redis-server that refuses its configuration
// (an older one does not know enable-protected-configs) writes why on
// stderr, before it opens its log file: the error named nothing
// ("exited at start: "). It names redis-server's own words now.
func TestStartFailureSaysWhy(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "redis-server")
	script := "#!/bin/sh\ncat >/dev/null\necho '*** FATAL CONFIG FILE ERROR (Redis 6.0.16) ***' >&2\necho \">>> 'enable-protected-configs no'\" >&2\necho 'Bad directive or wrong number of arguments' >&2\nexit 1\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	base := 21000 + int(nextRange.Add(1))*50 + os.Getpid()%200*100
	m, err := New(Config{Binary: bin, Dir: t.TempDir(), Secret: []byte("test-secret"), PortMin: base, PortMax: base + 49})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	_, err = m.CreateBranch(context.Background(), "app", "old-redis")
	if err == nil || !strings.Contains(err.Error(), "Bad directive") || !strings.Contains(err.Error(), "enable-protected-configs") {
		t.Fatalf("CreateBranch with a redis-server refusing its config: %v; want its reason", err)
	}
}

// The agent's URL may RESTORE a payload it built itself; redis-server
// (running as Lockstep's user, next to its data directory) checks only
// the payload's checksum and version unless sanitize-dump-payload says so,
// and crafted payloads that pass those have corrupted its memory (CVE
// after CVE in ziplist/listpack/intset decoding). Every payload is
// deep-checked; DUMP and RESTORE keep working.
func TestAgentRestoreIsSanitized(t *testing.T) {
	ctx := context.Background()
	m := newManager(t)
	b, err := m.CreateBranch(ctx, "app", "ws")
	if err != nil {
		t.Fatal(err)
	}
	c := open(t, b.URL)
	got, err := c.ConfigGet(ctx, "sanitize-dump-payload").Result()
	if err != nil {
		t.Fatal(err)
	}
	if got["sanitize-dump-payload"] != "clients" {
		t.Fatalf("sanitize-dump-payload = %q, want clients", got["sanitize-dump-payload"])
	}
	if err := c.HSet(ctx, "h", "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	dump, err := c.Dump(ctx, "h").Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Restore(ctx, "h2", 0, dump).Err(); err != nil {
		t.Fatalf("RESTORE of a DUMP: %v", err)
	}
	if v := c.HGet(ctx, "h2", "f").Val(); v != "v" {
		t.Fatalf("h2.f = %q after RESTORE", v)
	}
	// A crafted payload with a valid checksum: a hash whose listpack holds
	// the same field twice (accepted unsanitized: HGETALL then lists fa
	// twice).
	if err := c.HSet(ctx, "h3", "fa", "v", "fb", "v").Err(); err != nil {
		t.Fatal(err)
	}
	d, err := c.Dump(ctx, "h3").Result()
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(d[:len(d)-8])
	i := strings.Index(string(body), "fb")
	if i < 0 {
		t.Fatalf("no field fb in the dump %q", d)
	}
	copy(body[i:], "fa")
	tab := crc64.MakeTable(0x95ac9329ac4bc9b5) // Redis' CRC-64/Jones, reflected, no pre- or post-inversion
	crafted := binary.LittleEndian.AppendUint64(body, ^crc64.Update(^uint64(0), tab, body))
	if err := c.Restore(ctx, "h4", 0, string(crafted)).Err(); err == nil || !strings.Contains(err.Error(), "Bad data format") {
		t.Fatalf("RESTORE of a hash with a duplicate field: %v (HGETALL %v), want Bad data format", err, c.HGetAll(ctx, "h4").Val())
	}
}
