//go:build lockstep_server

package main

import (
	"context"
	"errors"
	"io"
	"strconv"
	"strings"

	"github.com/lockstep-hq/lockstep/bench"
)

// cmdBench parses `lockstep bench`'s flags and runs package bench with
// the wiring of `serve`.
func cmdBench(ctx context.Context, e *env, args []string) error {
	var o bench.Options
	var only string
	f := newFlagger("bench", e)
	f.fs.StringVar(&o.Dir, "dir", "", "parent directory of the bench's temp dir (default $TMPDIR, else /dev/shm when it is a tmpfs)")
	f.fs.IntVar(&o.Files, "files", 2000, "files of the small tree (push, rollback, read, checkpoint, run)")
	f.fs.IntVar(&o.BigFiles, "big-files", 20000, "files of the big tree (fork-20k, preflight, materialize)")
	f.fs.IntVar(&o.Iterations, "iterations", 20, "measured iterations of the fast scenarios (slow ones use fewer)")
	f.fs.BoolVar(&o.JSON, "json", false, "print the rows as JSON")
	f.fs.BoolVar(&o.Strict, "strict", false, "exit 1 when a target is missed")
	f.fs.BoolVar(&o.Keep, "keep", false, "keep the bench directory")
	f.fs.StringVar(&only, "only", "", "comma-separated scenario groups: "+strings.Join(bench.Groups(), ","))
	f.fs.StringVar(&o.CPUProfileDir, "cpuprofile-dir", "", "write a CPU profile of each scenario's measured loop (server in-process) into this directory")
	f.fs.StringVar(&o.Bin, "bin", "", "lockstep binary for the end-to-end scenarios, with lockstep-egress and lockstep-server beside it as installed (default: this executable, or go build)")
	f.fs.Uint64Var(&o.Seed, "seed", 1, "seed of the generated trees")
	f.fs.BoolVar(&o.CompareFsync, "compare-fsync", true, "also measure push-incremental and rollback on a server with --fsync=false")
	f.bool(&o.Watch, "watch", "LOCKSTEP_BENCH_WATCH", false, "run `lockstep watch` (the --bin binary) on push-incremental's worktree while it is measured")
	fleet := f.fs.String("fleet", "0,1000,10000", "workspace counts the fleet rows are measured at (comma-separated)")
	ob := &o.Objstore
	f.url(&ob.S3URL, "objstore-url", "LOCKSTEP_BENCH_S3_URL", envOr(e.getenv, "LOCKSTEP_TEST_S3_URL", ""),
		"objstore group: the S3 server, http://ACCESS:SECRET@host:port (the bench creates and removes a bucket; default LOCKSTEP_TEST_S3_URL) or s3://bucket/prefix?endpoint=host:port[&insecure=true] (keys AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY; the bench works under prefix/lsbench-<hex>/); empty: the group is skipped")
	f.url(&ob.PostgresURL, "postgres-url", "LOCKSTEP_BENCH_POSTGRES_URL", envOr(e.getenv, "LOCKSTEP_TEST_POSTGRES_URL", ""),
		"objstore group: admin postgres:// URL where the bench creates (and drops) a fresh metadata database per mode (default LOCKSTEP_TEST_POSTGRES_URL); empty: the group is skipped")
	f.url(&ob.RedisURL, "objstore-redis-url", "LOCKSTEP_BENCH_REDIS_URL", "", "objstore group: redis:// URL given to both modes' servers (change notifications); empty: none")
	bundles := ""
	f.str(&bundles, "bundles", "LOCKSTEP_BENCH_BUNDLES", "", "objstore, push-bulk and preflight-batch groups: comma-separated git bundles; the objstore and push-bulk groups' full-history rows push their branches and tags, the preflight-batch group merges 50 branches of the first one whose default branch has at least 51 first-parent merges (e.g. /work/shared/corpus/echo.bundle); empty: those rows are skipped")
	if err := f.parse(args); err != nil {
		return err
	}
	var err error
	if o.Fleet, err = bench.ParseFleetSizes(*fleet); err != nil {
		return err
	}
	for _, p := range strings.Split(bundles, ",") {
		if p = strings.TrimSpace(p); p != "" {
			ob.Bundles = append(ob.Bundles, p)
		}
	}
	ob.AccessKey, ob.SecretKey = e.getenv("AWS_ACCESS_KEY_ID"), e.getenv("AWS_SECRET_ACCESS_KEY")
	ob.Missing = "no object store or Postgres server: give --objstore-url and --postgres-url (or LOCKSTEP_BENCH_S3_URL / LOCKSTEP_TEST_S3_URL and LOCKSTEP_BENCH_POSTGRES_URL / LOCKSTEP_TEST_POSTGRES_URL)"
	if only != "" {
		for _, s := range strings.Split(only, ",") {
			if s = strings.TrimSpace(s); s != "" {
				o.Only = append(o.Only, s)
			}
		}
	}
	o.BranchDatabaseURL = strings.TrimSpace(e.getenv("LOCKSTEP_BRANCH_DATABASE_URL"))
	o.Stderr = e.stderr
	o.StartServer = func(ctx context.Context, bc bench.ServerConfig) (*bench.Server, error) {
		return benchServer(ctx, e, bc)
	}
	err = bench.Run(ctx, o, e.stdout)
	if errors.Is(err, bench.ErrTargetMissed) {
		return exitError(1)
	}
	return err
}

// benchServer starts an in-process server with the defaults of `serve`
// (from no environment: bc's settings only, the object store's keys
// included).
func benchServer(ctx context.Context, e *env, bc bench.ServerConfig) (*bench.Server, error) {
	var c serveConfig
	settings := map[string]string{
		"LOCKSTEP_BRANCH_DATABASE_URL": bc.BranchDatabaseURL,
		"LOCKSTEP_DATABASE_URL":        bc.DatabaseURL,
		"LOCKSTEP_REDIS_URL":           bc.RedisURL,
		"LOCKSTEP_SECRET_KEY_FILE":     bc.SecretKeyFile,
		"LOCKSTEP_OBJECT_STORE":        bc.ObjectStore,
	}
	for _, k := range []string{"LOCKSTEP_MAX_FILES", "LOCKSTEP_MAX_UPLOAD_BYTES"} {
		// A bench at --files 100000 uploads more entries and bytes than
		// the default limits in its first push.
		if v := e.getenv(k); v != "" {
			settings[k] = v
		}
	}
	if bc.ObjectStore != "" {
		// The bench's background GC would only add noise.
		settings["LOCKSTEP_OBJECT_GC_INTERVAL"] = "0s"
	}
	f := newFlagger("serve", &env{getenv: func(k string) string { return settings[k] }, stdout: io.Discard, stderr: e.stderr})
	c.declare(f)
	if err := f.parse([]string{"--data", bc.Data, "--addr", "127.0.0.1:0", "--fsync=" + strconv.FormatBool(bc.Fsync), "--branch-prefix", bc.BranchPrefix}); err != nil {
		return nil, err
	}
	c.objEnv = func(k string) string {
		switch k {
		case "AWS_ACCESS_KEY_ID":
			return bc.S3AccessKey
		case "AWS_SECRET_ACCESS_KEY":
			return bc.S3Secret
		}
		return ""
	}
	a, err := startApp(ctx, &c, bc.Logger)
	if err != nil {
		return nil, err
	}
	return &bench.Server{Handler: a.handler, Close: a.close}, nil
}
