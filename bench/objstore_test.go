package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep/client"
	"github.com/lockstep-hq/lockstep/internal/e2ekit"
	"github.com/lockstep-hq/lockstep/internal/testenv"
	"github.com/lockstep-hq/lockstep/s3packs"
)

func TestParseObjstoreURL(t *testing.T) {
	// LOCKSTEP_TEST_S3_URL's form: a bucket of the bench's own.
	cfg, own, err := parseObjstoreURL(ObjstoreOptions{S3URL: "http://AK:SK@127.0.0.1:9000"}, "abc")
	if err != nil || !own || cfg.Bucket != "lsbench-abc" || cfg.Prefix != "" || cfg.Endpoint != "127.0.0.1:9000" || !cfg.Insecure || cfg.AccessKey != "AK" || cfg.SecretKey != "SK" {
		t.Errorf("http form: %+v own=%v err=%v", cfg, own, err)
	}
	// LOCKSTEP_OBJECT_STORE's form: a prefix of the bench's own in the bucket.
	cfg, own, err = parseObjstoreURL(ObjstoreOptions{S3URL: "s3://bkt/some/where?endpoint=h:1&insecure=true", AccessKey: "AK", SecretKey: "SK"}, "abc")
	if err != nil || own || cfg.Bucket != "bkt" || cfg.Prefix != "some/where/lsbench-abc" || cfg.Endpoint != "h:1" || !cfg.Insecure || cfg.AccessKey != "AK" {
		t.Errorf("s3 form: %+v own=%v err=%v", cfg, own, err)
	}
	// The setting the servers get parses back to the same place and keys.
	back, err := s3packs.ParseConfig(objectStoreSetting(cfg), func(k string) string {
		return map[string]string{"AWS_ACCESS_KEY_ID": "AK", "AWS_SECRET_ACCESS_KEY": "SK"}[k]
	})
	if err != nil || back != cfg {
		t.Errorf("objectStoreSetting round trip: %+v, %v; want %+v", back, err, cfg)
	}
	for _, bad := range []string{"http://127.0.0.1:9000", "ftp://x", "s3://bkt?endpoint=h:1"} {
		if _, _, err := parseObjstoreURL(ObjstoreOptions{S3URL: bad}, "abc"); err == nil || !strings.Contains(err.Error(), "--objstore-url") {
			t.Errorf("parseObjstoreURL(%q) = %v, want an error naming --objstore-url", bad, err)
		}
	}
}

// TestObjstoreGroup runs the objstore group once, with tiny trees and one
// iteration, against the test Postgres and S3 servers and `lockstep
// serve` processes (the bench's wiring of serve lives in cmd): every row
// must have numbers; the correctness checks are the group's own (a run
// fails when a fetched tree, a ref list or a rolled-back tree differs
// from what was pushed) plus the two targets that are not timings: a
// fork writes nothing to the bucket, and a full-history push stores at
// most 1.2× what git stores. No timing is asserted.
func TestObjstoreGroup(t *testing.T) {
	if testing.Short() {
		t.Skip("starts lockstep servers, Postgres databases, an S3 bucket and runs git")
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not on PATH")
	}
	pg := testenv.PostgresURL(t)
	srv, bucket := testenv.MustS3Bucket(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute) // a hang guard, not a timing assertion
	defer cancel()
	dir := t.TempDir()
	bin := e2ekit.Binary // built by TestMain (with -race under -race)
	bundle := testBundle(t, filepath.Join(dir, "hist"))
	scheme := "http"
	if srv.Secure {
		scheme = "https"
	}
	var stdout, stderr bytes.Buffer
	o := Options{Dir: dir, Files: 40, BigFiles: 50, Iterations: 1, JSON: true, Bin: bin, Seed: 1, Only: []string{"objstore"},
		Objstore: ObjstoreOptions{
			S3URL:     fmt.Sprintf("s3://%s/t?endpoint=%s&insecure=%t", bucket, srv.Endpoint, scheme == "http"),
			AccessKey: srv.AccessKey, SecretKey: srv.SecretKey,
			PostgresURL: pg, Bundles: []string{bundle},
		},
		StartServer: func(ctx context.Context, c ServerConfig) (*Server, error) { return startServeProcess(ctx, t, bin, c) },
		Stderr:      &stderr,
	}
	if err := Run(ctx, o, &stdout); err != nil {
		t.Fatalf("bench: %v\nstderr:\n%s", err, stderr.String())
	}
	var out struct {
		Rows []struct {
			Name    string   `json:"scenario"`
			LS      *dist    `json:"lockstep"`
			Git     *dist    `json:"git"`
			Skipped string   `json:"skipped"`
			Failed  []string `json:"failed"`
			Notes   []string `json:"notes"`
		} `json:"rows"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatalf("bench --json: %v\n%s", err, stdout.String())
	}
	want := ObjstoreRowNames([]string{bundle})
	got := map[string]int{}
	for i, r := range out.Rows {
		got[r.Name] = i
	}
	if len(out.Rows) != len(want) {
		t.Errorf("%d rows, want %d (%v)", len(out.Rows), len(want), want)
	}
	for _, name := range want {
		i, ok := got[name]
		if !ok {
			t.Errorf("no row %q", name)
			continue
		}
		r := out.Rows[i]
		if r.Skipped != "" {
			t.Errorf("row %q skipped: %s", name, r.Skipped)
			continue
		}
		if r.LS == nil || r.LS.N < 1 || r.LS.Median <= 0 {
			t.Errorf("row %q: object-mode timings %+v", name, r.LS)
		}
		if name != "objstore-putpack" && name != "objstore-getpack" && (r.Git == nil || r.Git.N < 1 || r.Git.Median <= 0) {
			t.Errorf("row %q: comparison timings %+v", name, r.Git)
		}
		if len(r.Notes) == 0 {
			t.Errorf("row %q has no notes", name)
		}
		for _, f := range r.Failed {
			if strings.Contains(f, "bucket went from") || strings.Contains(f, "size ") {
				t.Errorf("row %q: %s", name, f)
			}
		}
	}
	if t.Failed() {
		t.Logf("stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	}
}

// testBundle makes a bundle of a small history: two branches, a merge,
// a lightweight and an annotated tag.
func testBundle(t *testing.T, dir string) string {
	t.Helper()
	env := append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir, "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
	git := func(args ...string) {
		t.Helper()
		c := exec.Command("git", args...)
		c.Dir, c.Env = dir, env
		if out, err := c.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	git("init", "-q", "-b", "main")
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Over git's receive.unpackLimit (100 objects): the file:// target
	// keeps the pack as Lockstep does, so the sizes compare.
	for i := 0; i < 40; i++ {
		write("a.txt", strings.Repeat(fmt.Sprintf("line %d\n", i), 50+i))
		write(fmt.Sprintf("f%02d.txt", i), fmt.Sprintf("file %d\n", i))
		git("add", "-A")
		git("commit", "-q", "-m", "c"+strconv.Itoa(i))
	}
	git("tag", "v0.1")
	git("checkout", "-q", "-b", "feature")
	write("b.txt", "feature\n")
	git("add", "-A")
	git("commit", "-q", "-m", "feature")
	git("tag", "-a", "-m", "annotated", "v0.2")
	git("checkout", "-q", "main")
	git("merge", "-q", "--no-ff", "-m", "merge", "feature")
	bundle := filepath.Join(dir, "..", "hist.bundle")
	git("bundle", "create", "-q", bundle, "--all")
	return bundle
}

// startServeProcess runs `lockstep serve` with c's settings as a child
// process and returns a Server whose Handler proxies to it; a data race
// the process reports fails the test. (e2ekit.StartServer needs an
// admin.key in the data directory, which a replica sharing another's
// database does not get.)
func startServeProcess(ctx context.Context, t *testing.T, bin string, c ServerConfig) (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	var env []string
	for _, kv := range e2ekit.CleanEnv() {
		if !strings.HasPrefix(kv, "AWS_") {
			env = append(env, kv)
		}
	}
	for k, v := range map[string]string{"LOCKSTEP_DATABASE_URL": c.DatabaseURL, "LOCKSTEP_OBJECT_STORE": c.ObjectStore, "AWS_ACCESS_KEY_ID": c.S3AccessKey,
		"AWS_SECRET_ACCESS_KEY": c.S3Secret, "LOCKSTEP_SECRET_KEY_FILE": c.SecretKeyFile, "LOCKSTEP_REDIS_URL": c.RedisURL,
		"LOCKSTEP_BRANCH_DATABASE_URL": c.BranchDatabaseURL, "LOCKSTEP_OBJECT_GC_INTERVAL": "0s"} {
		if v != "" {
			env = append(env, k+"="+v)
		}
	}
	cmd := exec.Command(bin, "serve", "--data", c.Data, "--addr", addr, "--fsync="+strconv.FormatBool(c.Fsync), "--branch-prefix", c.BranchPrefix, "--log-level", "warn")
	cmd.Env = env
	logs := &e2ekit.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	stop := func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		if strings.Contains(logs.String(), "WARNING: DATA RACE") {
			t.Errorf("lockstep serve on %s reported a data race:\n%s", c.Data, logs.String())
		}
	}
	u, _ := url.Parse("http://" + addr)
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	ready := make(chan error, 1)
	go func() { ready <- client.New(u.String(), "").WaitReady(wctx) }()
	select {
	case err := <-ready:
		if err != nil {
			stop()
			return nil, fmt.Errorf("lockstep serve: %w\n%s", err, logs.String())
		}
	case <-done:
		return nil, fmt.Errorf("lockstep serve exited: %s", logs.String())
	}
	proxy := httputil.NewSingleHostReverseProxy(u)
	proxy.FlushInterval = -1
	return &Server{Handler: proxy, Close: stop}, nil
}
