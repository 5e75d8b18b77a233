package bench

// The objstore group (issue #11): the same work, side by side, against a
// server in local-disk mode and one in object-storage mode (packs in an
// S3 bucket, docs/replicas.md), both with Postgres metadata in a fresh
// database of their own. The LOCKSTEP column is object mode; the GIT
// column is local-disk mode (or git over file:// for the full-history
// pushes), so RATIO is what object storage costs.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/api"
	"github.com/lockstep-hq/lockstep/client"
	"github.com/lockstep-hq/lockstep/s3packs"
)

// ObjstoreOptions configure the objstore group. Without S3URL or
// PostgresURL the group is skipped (one skipped row saying what is
// missing).
type ObjstoreOptions struct {
	// S3URL is the object store, in one of two forms:
	//
	//	s3://BUCKET[/PREFIX]?endpoint=HOST:PORT[&insecure=true…]
	//	    LOCKSTEP_OBJECT_STORE's form, keys in AccessKey and SecretKey;
	//	    the bench works under PREFIX/lsbench-<hex>/ of the existing
	//	    bucket and deletes what it wrote there;
	//	http://ACCESS:SECRET@HOST:PORT (https: for TLS)
	//	    LOCKSTEP_TEST_S3_URL's form (internal/testenv); the bench
	//	    creates a bucket lsbench-<hex> and removes it at the end.
	S3URL string
	// AccessKey and SecretKey are the keys of the s3:// form
	// (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY).
	AccessKey, SecretKey string
	// PostgresURL is an admin URL of a Postgres server on which the
	// bench creates one fresh metadata database per mode
	// (lsbench_<hex>_local, lsbench_<hex>_object), dropped at the end.
	PostgresURL string
	// RedisURL, when set, is given to both modes' servers (change
	// notifications in object mode, the gate's locks).
	RedisURL string
	// Bundles are git bundles (e.g. /work/shared/corpus/echo.bundle)
	// whose branches and tags the full-history rows push, here and in
	// the push-bulk group (pushbulk.go, which needs neither S3 nor
	// Postgres); empty: those rows are skipped. The preflight-batch
	// group (preflightbatch.go) reads them too, whether or not the
	// objstore group runs.
	Bundles []string
	// Missing is the skip message when S3URL or PostgresURL is empty
	// (the command names its flags and variables); empty: a generic one.
	Missing string
}

func (o ObjstoreOptions) configured() bool { return o.S3URL != "" && o.PostgresURL != "" }

// objstoreRowNames are the rows of the group for the given bundles.
func objstoreRowNames(bundles []string) []string {
	out := []string{"objstore-fork", "objstore-push-incremental", "objstore-push-incremental:server", "objstore-putpack",
		"objstore-rollback", "objstore-rollback-replicas", "objstore-getpack", "objstore-cold-first-read", "objstore-cold-later-reads"}
	for _, bundle := range bundles {
		for _, mode := range []string{"object", "local"} {
			out = append(out, fullPushRow(bundle, mode))
		}
	}
	return out
}

// ObjstoreRowNames are the rows the objstore group prints when it runs
// with these bundles.
func ObjstoreRowNames(bundles []string) []string { return objstoreRowNames(bundles) }

func bundleName(path string) string {
	return strings.TrimSuffix(filepath.Base(path), ".bundle")
}

func fullPushRow(bundle, mode string) string {
	return fmt.Sprintf("objstore-full-push-%s (%s)", bundleName(bundle), mode)
}

// objEnv is the group's world: the bucket, the two databases, the
// servers of both modes.
type objEnv struct {
	b         *bencher
	cfg       s3packs.Config // the bench's bucket and prefix
	storeURL  string         // LOCKSTEP_OBJECT_STORE for the servers
	store     *s3packs.Store // raw access (PutPack, GetPack, ListPacks)
	mc        *minio.Client
	ownBucket bool
	admin     string            // Postgres admin URL
	dbs       map[string]string // mode → database URL
	dbNames   []string
	secret    string // LOCKSTEP_SECRET_KEY_FILE shared by object-mode replicas
	obj, loc  *benchServer
}

// parseObjstoreURL turns ObjstoreOptions.S3URL into the bench's store
// configuration (under a fresh prefix or bucket); own says the bench
// creates the bucket.
func parseObjstoreURL(o ObjstoreOptions, tag string) (cfg s3packs.Config, own bool, err error) {
	u, err := url.Parse(o.S3URL)
	if err != nil {
		return cfg, false, lockstep.Errorf(lockstep.EINVALID, "bench: --objstore-url: not a URL: %v", err)
	}
	switch u.Scheme {
	case "s3":
		cfg, err = s3packs.ParseConfig(o.S3URL, func(k string) string {
			switch k {
			case "AWS_ACCESS_KEY_ID":
				return o.AccessKey
			case "AWS_SECRET_ACCESS_KEY":
				return o.SecretKey
			}
			return ""
		})
		if err != nil {
			return cfg, false, lockstep.Errorf(lockstep.EINVALID, "bench: --objstore-url: %v", err)
		}
		cfg.Prefix = strings.Trim(cfg.Prefix+"/lsbench-"+tag, "/")
		return cfg, false, nil
	case "http", "https":
		secret, _ := u.User.Password()
		if u.Host == "" || u.User == nil || u.User.Username() == "" || secret == "" {
			return cfg, false, lockstep.Errorf(lockstep.EINVALID, "bench: --objstore-url %s: want http://ACCESS:SECRET@host:port (the LOCKSTEP_TEST_S3_URL form) or s3://bucket/prefix?endpoint=host:port", u.Redacted())
		}
		return s3packs.Config{Bucket: "lsbench-" + tag, Endpoint: u.Host, Region: "us-east-1", Insecure: u.Scheme == "http",
			Timeout: s3packs.DefaultTimeout, AccessKey: u.User.Username(), SecretKey: secret}, true, nil
	}
	return cfg, false, lockstep.Errorf(lockstep.EINVALID, "bench: --objstore-url: scheme %q: want s3://bucket/prefix?endpoint=host:port or http://ACCESS:SECRET@host:port", u.Scheme)
}

// objectStoreSetting renders cfg as a LOCKSTEP_OBJECT_STORE value.
func objectStoreSetting(cfg s3packs.Config) string {
	q := url.Values{}
	q.Set("endpoint", cfg.Endpoint)
	if cfg.Region != "" {
		q.Set("region", cfg.Region)
	}
	if cfg.Insecure {
		q.Set("insecure", "true")
	}
	if cfg.PathStyle {
		q.Set("path_style", "true")
	}
	if cfg.Timeout > 0 {
		q.Set("timeout", cfg.Timeout.String())
	}
	u := url.URL{Scheme: "s3", Host: cfg.Bucket, Path: "/" + cfg.Prefix, RawQuery: q.Encode()}
	return u.String()
}

func randomTag() string {
	var r [5]byte
	rand.Read(r[:])
	return hex.EncodeToString(r[:])
}

func (b *bencher) benchObjstore() error {
	o := b.o.objstore
	if !o.configured() {
		msg := o.Missing
		if msg == "" {
			msg = "no object store or Postgres server given (Options.Objstore.S3URL, PostgresURL)"
		}
		b.logf("objstore: skipped: %s", msg)
		b.skip("objstore", msg)
		return nil
	}
	oe, err := b.objSetup(o)
	if oe != nil {
		defer oe.close()
	}
	if err != nil {
		return err
	}
	for _, step := range []func() error{oe.fork, oe.pushAndRollback, oe.coldReplica, oe.fullPushes} {
		if err := b.ctx.Err(); err != nil {
			return err
		}
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

// objSetup creates the bucket (or prefix), the two databases and the two
// servers. The returned objEnv, even with an error, must be closed.
func (b *bencher) objSetup(o ObjstoreOptions) (*objEnv, error) {
	tag := randomTag()
	cfg, own, err := parseObjstoreURL(o, tag)
	if err != nil {
		return nil, err
	}
	oe := &objEnv{b: b, cfg: cfg, ownBucket: own, admin: o.PostgresURL, dbs: map[string]string{}}
	oe.mc, err = minio.New(cfg.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, ""), Secure: !cfg.Insecure, Region: cfg.Region})
	if err != nil {
		return oe, fmt.Errorf("objstore: s3 client for %s: %w", cfg.Endpoint, err)
	}
	if own {
		ctx, cancel := context.WithTimeout(b.ctx, 15*time.Second)
		err := oe.mc.MakeBucket(ctx, cfg.Bucket, minio.MakeBucketOptions{Region: cfg.Region})
		cancel()
		if err != nil {
			return oe, lockstep.E("bench objstore", lockstep.EUNAVAILABLE, fmt.Sprintf("create bucket %s on the S3 server at %s: %v", cfg.Bucket, cfg.Endpoint, err), err)
		}
	}
	oe.storeURL = objectStoreSetting(cfg)
	if oe.store, err = s3packs.Open(b.ctx, cfg); err != nil {
		return oe, err
	}
	for _, mode := range []string{"local", "object"} {
		u, err := oe.createDB("lsbench_" + tag + "_" + mode)
		if err != nil {
			return oe, err
		}
		oe.dbs[mode] = u
	}
	key := make([]byte, 32)
	rand.Read(key)
	oe.secret = b.path("objstore-secret.key")
	if err := os.WriteFile(oe.secret, []byte(hex.EncodeToString(key)+"\n"), 0o600); err != nil {
		return oe, err
	}
	b.logf("  objstore: bucket %s prefix %q at %s; databases %s", cfg.Bucket, cfg.Prefix, cfg.Endpoint, strings.Join(oe.dbNames, ", "))
	if oe.loc, err = b.startServer("os-local", oe.serverConfig("local", b.path("os-local")), ""); err != nil {
		return oe, fmt.Errorf("objstore: start the local-disk server: %w", err)
	}
	if oe.obj, err = b.startServer("os-object", oe.serverConfig("object", b.path("os-object")), ""); err != nil {
		return oe, fmt.Errorf("objstore: start the object-storage server: %w", err)
	}
	return oe, nil
}

// serverConfig is a server of mode ("local" or "object") on data.
func (oe *objEnv) serverConfig(mode, data string) ServerConfig {
	c := ServerConfig{Data: data, Fsync: true, BranchPrefix: benchBranchPrefix, Logger: oe.b.logger,
		DatabaseURL: oe.dbs[mode], RedisURL: oe.b.o.objstore.RedisURL, SecretKeyFile: oe.secret}
	if mode == "object" {
		c.ObjectStore, c.S3AccessKey, c.S3Secret = oe.storeURL, oe.cfg.AccessKey, oe.cfg.SecretKey
	}
	return c
}

// createDB creates a database on the admin server and returns its URL.
func (oe *objEnv) createDB(name string) (string, error) {
	ctx, cancel := context.WithTimeout(oe.b.ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, oe.admin)
	if err != nil {
		return "", lockstep.E("bench objstore", lockstep.EUNAVAILABLE, fmt.Sprintf("cannot reach Postgres at %s (--postgres-url): %v", redactURL(oe.admin), err), err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("objstore: create database %s: %w", name, err)
	}
	oe.dbNames = append(oe.dbNames, name)
	u, err := url.Parse(oe.admin)
	if err != nil {
		return "", lockstep.Errorf(lockstep.EINVALID, "bench: --postgres-url must be a postgres:// URL: %v", err)
	}
	u.Path = "/" + name
	return u.String(), nil
}

func fmtBytes(n int64) string {
	if n < 100_000 {
		return fmt.Sprintf("%d B", n)
	}
	return fmt.Sprintf("%.2f MB", float64(n)/1e6)
}

func redactURL(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return u.Redacted()
	}
	return "(unparsable URL)"
}

// close stops the servers, then removes what the bench wrote in the
// bucket and drops the databases (both kept with --keep).
func (oe *objEnv) close() {
	for _, s := range []*benchServer{oe.obj, oe.loc} {
		if s != nil {
			s.close()
		}
	}
	if oe.b.o.keep {
		oe.b.logf("objstore: kept bucket %s prefix %q and databases %s", oe.cfg.Bucket, oe.cfg.Prefix, strings.Join(oe.dbNames, ", "))
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if oe.mc != nil {
		prefix := ""
		if oe.cfg.Prefix != "" {
			prefix = oe.cfg.Prefix + "/"
		}
		for obj := range oe.mc.ListObjects(ctx, oe.cfg.Bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
			if obj.Err != nil {
				oe.b.logf("objstore: list bucket %s for clean-up: %v", oe.cfg.Bucket, obj.Err)
				break
			}
			if err := oe.mc.RemoveObject(ctx, oe.cfg.Bucket, obj.Key, minio.RemoveObjectOptions{}); err != nil {
				oe.b.logf("objstore: clean-up: remove %s: %v", obj.Key, err)
			}
		}
		if oe.ownBucket {
			if err := oe.mc.RemoveBucket(ctx, oe.cfg.Bucket); err != nil {
				oe.b.logf("objstore: clean-up: remove bucket %s: %v", oe.cfg.Bucket, err)
			}
		}
	}
	if len(oe.dbNames) == 0 {
		return
	}
	conn, err := pgx.Connect(ctx, oe.admin)
	if err != nil {
		oe.b.logf("objstore: clean-up: connect to Postgres: %v", err)
		return
	}
	defer conn.Close(context.Background())
	for _, name := range oe.dbNames {
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			oe.b.logf("objstore: clean-up: drop database %s: %v", name, err)
		}
	}
}

// network is the fork network of repo on s.
func (oe *objEnv) network(s *benchServer, repo string) (string, error) {
	r, err := s.c.Repo(oe.b.ctx, repo)
	if err != nil {
		return "", err
	}
	if r.Network == "" {
		return "", fmt.Errorf("objstore: repository %s has no network in its answer", repo)
	}
	return r.Network, nil
}

// bucketBytes sums the packs and indexes of network in the bucket.
func (oe *objEnv) bucketBytes(network string) (packs int, bytes int64, err error) {
	ps, err := oe.store.ListPacks(oe.b.ctx, network)
	if err != nil {
		return 0, 0, err
	}
	for _, p := range ps {
		bytes += p.PackSize + p.IdxSize
	}
	return len(ps), bytes, nil
}

// dirBytes is the size of the regular files under dir.
func dirBytes(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			n += fi.Size()
		}
		return nil
	})
	return n, err
}

func (oe *objEnv) networkObjectsDir(s *benchServer, network string) string {
	return filepath.Join(s.data, "networks", network+".git", "objects")
}

// ---- fork ----

func (oe *objEnv) fork() error {
	b := oe.b
	b.logf("objstore: fork …")
	type side struct {
		s  *benchServer
		st *bigState
	}
	sides := [2]side{{s: oe.obj}, {s: oe.loc}}
	for k := range sides {
		s := sides[k].s
		st := &bigState{t: b.tiny, repo: "os-fork", dir: b.path("os-fork-" + s.name), cache: b.path("statcache", "os-fork-"+s.name)}
		var err error
		if st.bytes, err = b.tiny.write(st.dir); err != nil {
			return err
		}
		if _, err := s.c.CreateRepo(b.ctx, st.repo, "main"); err != nil {
			return err
		}
		if _, err := b.pushDir(s.c, st.dir, st.repo, client.WriteOptions{Message: "initial"}, true, st.cache); err != nil {
			return err
		}
		sides[k].st = st
	}
	net, err := oe.network(oe.obj, "os-fork")
	if err != nil {
		return err
	}
	packsBefore, bytesBefore, err := oe.bucketBytes(net)
	if err != nil {
		return err
	}
	var ho, hl []float64
	fork := func(s *benchServer, h *[]float64) func(int) (time.Duration, error) {
		return func(int) (time.Duration, error) {
			ws := b.name("os-fk")
			return timed(s, h, func() error { _, err := s.c.Fork(b.ctx, "os-fork", ws); return err })
		}
	}
	od, ld, err := b.measurePair("objstore-fork", 3, b.o.iters, fork(oe.obj, &ho), fork(oe.loc, &hl))
	if err != nil {
		return fmt.Errorf("objstore-fork: %w", err)
	}
	packsAfter, bytesAfter, err := oe.bucketBytes(net)
	if err != nil {
		return err
	}
	st := sides[0].st
	r := b.add(&benchRow{Name: "objstore-fork", Size: st.t.describe(st.bytes), LS: od, Git: ld, GitCmd: "the same fork in local-disk mode (Postgres metadata)", Target: "< 2 ms; writes no object"})
	r.check("≥ 2 ms", od.Median < 2)
	r.check(fmt.Sprintf("the bucket went from %d packs (%d B) to %d (%d B)", packsBefore, bytesBefore, packsAfter, bytesAfter), packsAfter == packsBefore && bytesAfter == bytesBefore)
	r.note("POST /repos/{base}/forks, %d forks per mode; object mode %s; local mode %s", 3+b.o.iters, handlerNote(ho, 3), handlerNote(hl, 3))
	r.note("bucket of the network before and after the forks: %d packs, %d B → %d packs, %d B", packsBefore, bytesBefore, packsAfter, bytesAfter)
	return nil
}

// ---- incremental push, PutPack, rollback ----

func (oe *objEnv) pushAndRollback() error {
	b := oe.b
	b.logf("objstore: push-incremental, putpack, rollback …")
	so, err := b.newInc(oe.obj, "os-inc-object")
	if err != nil {
		return err
	}
	sl, err := b.newInc(oe.loc, "os-inc-local")
	if err != nil {
		return err
	}
	ro, rl := newPushRec(), newPushRec()
	od, ld, err := b.measurePair("objstore-push-incremental", 2, b.o.iters,
		func(i int) (time.Duration, error) { return b.lsPush(oe.obj, so, i, 2, ro) },
		func(i int) (time.Duration, error) { return b.lsPush(oe.loc, sl, i, 2, rl) })
	if err != nil {
		return fmt.Errorf("objstore-push-incremental: %w", err)
	}
	po, pl := ro.stats(od, ld), rl.stats(ld, od)
	for k, s := range []*benchServer{oe.obj, oe.loc} {
		st := []*incState{so, sl}[k]
		if err := checkHead(b, s, st); err != nil {
			return err
		}
	}
	size := b.small.describe(so.bytes)
	r := b.add(&benchRow{Name: "objstore-push-incremental", Size: size, LS: od, Git: ld, GitCmd: "the same `lockstep push` to local-disk mode", Target: "≤ 1.3× local"})
	r.check(fmt.Sprintf("%.2f× local", od.Median/ld.Median), od.Median <= 1.3*ld.Median)
	r.note("whole `lockstep push --expect-current` process, one file changed; %d files scanned, %d hashed, %d round trips", po.files, po.hashed, po.roundTrips)
	r.note("all server handlers of one push median: object %.2f ms, local %.2f ms (object mode uploads two packs: the new blob+trees, then the commit)", po.handlers.Median, pl.handlers.Median)
	r.note("server handler medians per request (ms), object: %s; local: %s", routeMedians(po), routeMedians(pl))
	sr := b.add(&benchRow{Name: "objstore-push-incremental:server", Size: size, LS: po.put, Git: pl.put, GitCmd: "the same handler in local-disk mode", Target: "≤ 1.3× local"})
	sr.check(fmt.Sprintf("%.2f× local", po.put.Median/pl.put.Median), po.put.Median <= 1.3*pl.put.Median)
	sr.note("time inside the handler of the final PUT /worktree?tree= (in-process timer): commit pack written, uploaded (PutPack), registered, ref moved")

	// One raw PutPack of a small pack (one object, like a rollback's commit).
	packs, err := oe.smallPacks(3 + b.o.iters)
	if err != nil {
		return err
	}
	put, err := b.measure("objstore-putpack", 3, b.o.iters, func(i int) (time.Duration, error) {
		p := packs[i]
		t := time.Now()
		err := oe.store.PutPack(b.ctx, "lsbench-putpack", p.hash, p.pack, p.idx)
		return time.Since(t), err
	})
	if err != nil {
		return fmt.Errorf("objstore-putpack: %w", err)
	}
	n, _, err := oe.bucketBytes("lsbench-putpack")
	if err != nil {
		return err
	}
	pr := b.add(&benchRow{Name: "objstore-putpack", Size: fmt.Sprintf("1 object, %d B pack + %d B idx", packs[0].packBytes, packs[0].idxBytes), LS: put, Target: "info"})
	pr.Pass = true
	pr.note("s3packs.Store.PutPack of a one-object pack: two PUTs (pack, then index, If-None-Match: *), from the bench process; %d packs in the bucket afterwards (want %d)", n, len(packs))
	if n != len(packs) {
		return fmt.Errorf("objstore-putpack: %d packs in the bucket after %d PutPacks", n, len(packs))
	}

	var hro, hrl []float64
	rollback := func(s *benchServer, st *incState, h *[]float64) func(int) (time.Duration, error) {
		cur, err := s.c.Ref(b.ctx, st.repo, "main")
		return func(int) (time.Duration, error) {
			if err != nil {
				return 0, err
			}
			var res *client.PushResult
			d, err := timed(s, h, func() (err error) {
				res, err = s.c.Rollback(b.ctx, st.repo, st.first, client.WriteOptions{Branch: "main", ExpectOID: cur, Message: "rollback"})
				return err
			})
			if err != nil {
				return 0, err
			}
			cur = res.Commit
			return d, nil
		}
	}
	rod, rld, err := b.measurePair("objstore-rollback", 3, b.o.iters, rollback(oe.obj, so, &hro), rollback(oe.loc, sl, &hrl))
	if err != nil {
		return fmt.Errorf("objstore-rollback: %w", err)
	}
	// The rolled-back tree is the first commit's, in both modes.
	for k, s := range []*benchServer{oe.obj, oe.loc} {
		st := []*incState{so, sl}[k]
		head, err := s.c.Commit(b.ctx, st.repo, "main")
		if err != nil {
			return err
		}
		first, err := s.c.Commit(b.ctx, st.repo, st.first)
		if err != nil {
			return err
		}
		if head.Tree != first.Tree {
			return fmt.Errorf("objstore-rollback (%s): main's tree %s, want the first commit's %s", s.name, short(head.Tree), short(first.Tree))
		}
	}
	rr := b.add(&benchRow{Name: "objstore-rollback", Size: size, LS: rod, Git: rld, GitCmd: "the same POST /rollback in local-disk mode", Target: "≤ local + one PutPack"})
	rr.check(fmt.Sprintf("%.2f ms over local, one PutPack is %.2f ms", rod.Median-rld.Median, put.Median), rod.Median <= rld.Median+put.Median)
	rr.note("POST /rollback with expect_oid; object %s; local %s; one raw PutPack median %.2f ms (objstore-putpack)", handlerNote(hro, 3), handlerNote(hrl, 3), put.Median)
	return oe.rollbackReplicas(so, sl, size)
}

// rollbackReplicas is the issue's own set-up for object mode: three
// object-mode replicas (one database, one bucket) take the rollbacks of
// one branch round-robin, so each rollback lands on a replica that did
// not write the commit before it and must first catch up with it; the
// baseline is the same rollback on the local-disk server.
func (oe *objEnv) rollbackReplicas(so, sl *incState, size string) error {
	b := oe.b
	const replicas = 3
	servers := []*benchServer{oe.obj}
	for k := 1; k < replicas; k++ {
		data := b.path(fmt.Sprintf("os-rr-replica-%d", k))
		rs, err := b.startServer(fmt.Sprintf("os-rr-replica-%d", k), oe.serverConfig("object", data), oe.obj.key)
		if err != nil {
			return fmt.Errorf("objstore-rollback-replicas: start replica %d: %w", k, err)
		}
		defer rs.close()
		servers = append(servers, rs)
	}
	var hro, hrl []float64
	curO, errO := oe.obj.c.Ref(b.ctx, so.repo, "main")
	curL, errL := oe.loc.c.Ref(b.ctx, sl.repo, "main")
	if err := errors.Join(errO, errL); err != nil {
		return fmt.Errorf("objstore-rollback-replicas: %w", err)
	}
	var seen [replicas]int
	obj := func(i int) (time.Duration, error) {
		s := servers[i%replicas]
		seen[i%replicas]++
		var res *client.PushResult
		d, err := timed(s, &hro, func() (err error) {
			res, err = s.c.Rollback(b.ctx, so.repo, so.first, client.WriteOptions{Branch: "main", ExpectOID: curO, Message: "rollback"})
			return err
		})
		if err != nil {
			return 0, fmt.Errorf("on %s: %w", s.name, err)
		}
		curO = res.Commit
		return d, nil
	}
	loc := func(int) (time.Duration, error) {
		var res *client.PushResult
		d, err := timed(oe.loc, &hrl, func() (err error) {
			res, err = oe.loc.c.Rollback(b.ctx, sl.repo, sl.first, client.WriteOptions{Branch: "main", ExpectOID: curL, Message: "rollback"})
			return err
		})
		if err != nil {
			return 0, err
		}
		curL = res.Commit
		return d, nil
	}
	rod, rld, err := b.measurePair("objstore-rollback-replicas", 3, b.o.iters, obj, loc)
	if err != nil {
		return fmt.Errorf("objstore-rollback-replicas: %w", err)
	}
	// Every replica ends on the last rollback, whose tree is the first
	// commit's.
	for _, s := range servers {
		head, err := s.c.Ref(b.ctx, so.repo, "main")
		if err != nil {
			return fmt.Errorf("objstore-rollback-replicas: %s: %w", s.name, err)
		}
		if head != curO {
			return fmt.Errorf("objstore-rollback-replicas: %s reads main at %s, want the last rollback %s", s.name, short(head), short(curO))
		}
	}
	r := b.add(&benchRow{Name: "objstore-rollback-replicas", Size: size, LS: rod, Git: rld, GitCmd: "the same POST /rollback on the local-disk server", Target: "≤ 2× local"})
	r.check(fmt.Sprintf("%.2f× local", rod.Median/rld.Median), rod.Median <= 2*rld.Median)
	r.note("%d object-mode replicas (one Postgres database, one bucket) take the rollbacks round-robin (%v each), each on a replica that must first catch up with the commit another wrote; object %s; local %s", replicas, seen, handlerNote(hro, 3), handlerNote(hrl, 3))
	return nil
}

// checkHead compares the server's main with the worktree the pushes
// came from: the tree of the last push must hold the last edit.
func checkHead(b *bencher, s *benchServer, st *incState) error {
	want, err := os.ReadFile(filepath.Join(st.dir, b.small.path(7)))
	if err != nil {
		return err
	}
	var got strings.Builder
	if _, err := s.c.Blob(b.ctx, st.repo, "main", b.small.path(7), &got); err != nil {
		return err
	}
	if got.String() != string(want) {
		return fmt.Errorf("objstore (%s): %s on main differs from the pushed file", s.name, b.small.path(7))
	}
	return nil
}

func routeMedians(ps *pushStats) string {
	keys := slices.Sorted(maps.Keys(ps.routes))
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %.2f", k, newDist(ps.routes[k]).Median))
	}
	return strings.Join(parts, ", ")
}

type smallPack struct {
	hash, pack, idx     string
	packBytes, idxBytes int64
}

// smallPacks builds n packs of one distinct small blob each.
func (oe *objEnv) smallPacks(n int) ([]smallPack, error) {
	b := oe.b
	dir := b.path("os-putpack.git")
	if _, err := b.git(b.root, "init", "-q", "--bare", dir); err != nil {
		return nil, err
	}
	out := make([]smallPack, 0, n)
	for i := 0; i < n; i++ {
		c := b.cmd(dir, "git", "hash-object", "-w", "--stdin")
		c.Stdin = strings.NewReader(fmt.Sprintf("tree 4b825dc642cb6eb9a060e54bf8d69288fbee4904\nauthor bench <b@example.com> 1 +0000\n\nsmall pack %d %s\n", i, randomTag()))
		oid, err := c.Output()
		if err != nil {
			return nil, fmt.Errorf("git hash-object: %w", err)
		}
		base := filepath.Join(dir, fmt.Sprintf("small-%d", i))
		c = b.cmd(dir, "git", "pack-objects", "-q", base)
		c.Stdin = strings.NewReader(string(oid))
		h, err := c.Output()
		if err != nil {
			return nil, fmt.Errorf("git pack-objects: %w", err)
		}
		p := smallPack{hash: strings.TrimSpace(string(h))}
		p.pack, p.idx = base+"-"+p.hash+".pack", base+"-"+p.hash+".idx"
		for _, f := range []struct {
			path string
			n    *int64
		}{{p.pack, &p.packBytes}, {p.idx, &p.idxBytes}} {
			fi, err := os.Stat(f.path)
			if err != nil {
				return nil, err
			}
			*f.n = fi.Size()
		}
		out = append(out, p)
	}
	return out, nil
}

// ---- cold replica ----

// coldReplica pushes the big tree to both modes, then, several times,
// starts a second object-mode server on an empty cache directory sharing
// the database and the bucket, and times its first read of the big
// network (the packs are downloaded then) and later reads, beside the
// raw download of the network's packs and the same read in local mode.
func (oe *objEnv) coldReplica() error {
	b := oe.b
	b.logf("objstore: cold replica (%d-file network in both modes) …", b.big.n)
	const repo = "os-big"
	dir := b.path("os-big-wt")
	nbytes, err := b.big.write(dir)
	if err != nil {
		return err
	}
	for _, s := range []*benchServer{oe.obj, oe.loc} {
		t0 := time.Now()
		if _, err := s.c.CreateRepo(b.ctx, repo, "main"); err != nil {
			return err
		}
		if _, err := b.pushDir(s.c, dir, repo, client.WriteOptions{Message: "initial"}, true, b.path("statcache", "os-big-"+s.name)); err != nil {
			return err
		}
		b.logf("  objstore: %s pushed to %s in %s", b.big.describe(nbytes), s.name, time.Since(t0).Round(time.Millisecond))
	}
	want, err := oe.obj.c.Tree(b.ctx, repo, "main", "")
	if err != nil {
		return err
	}
	net, err := oe.network(oe.obj, repo)
	if err != nil {
		return err
	}
	infos, err := oe.store.ListPacks(b.ctx, net)
	if err != nil {
		return err
	}
	var packBytes int64
	for _, p := range infos {
		packBytes += p.PackSize + p.IdxSize
	}
	sameTree := func(got []api.TreeEntry) bool {
		if len(got) != len(want) {
			return false
		}
		for i := range got {
			if got[i] != want[i] {
				return false
			}
		}
		return true
	}

	// The raw download: GetPack of each pack, four at a time (as a
	// replica's catch-up does).
	download := func(k int) (time.Duration, error) {
		d := b.path(fmt.Sprintf("os-download-%d", k))
		if err := os.MkdirAll(d, 0o755); err != nil {
			return 0, err
		}
		defer os.RemoveAll(d)
		t := time.Now()
		var wg sync.WaitGroup
		var mu sync.Mutex
		var first error
		sem := make(chan struct{}, 4)
		for _, p := range infos {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				err := oe.store.GetPack(b.ctx, net, p.Hash, filepath.Join(d, "pack-"+p.Hash+".pack"), filepath.Join(d, "pack-"+p.Hash+".idx"))
				if err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		return time.Since(t), first
	}

	n := b.slow()
	const later = 5
	var firsts, raws, laters, locals, starts []float64
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	for k := 0; k < n; k++ {
		replica := func() error {
			data := b.path(fmt.Sprintf("os-replica-%d", k))
			t0 := time.Now()
			rs, err := b.startServer(fmt.Sprintf("os-replica-%d", k), oe.serverConfig("object", data), oe.obj.key)
			if err != nil {
				return fmt.Errorf("start replica: %w", err)
			}
			defer func() { rs.close(); os.RemoveAll(data) }()
			starts = append(starts, ms(time.Since(t0)))
			t := time.Now()
			got, err := rs.c.Tree(b.ctx, repo, "main", "")
			d := time.Since(t)
			if err != nil {
				return fmt.Errorf("first read on a cold replica: %w", err)
			}
			if !sameTree(got) {
				return fmt.Errorf("cold replica: the tree of main (%d entries) differs from the one pushed (%d entries)", len(got), len(want))
			}
			firsts = append(firsts, ms(d))
			for j := 0; j < later; j++ {
				for _, x := range []struct {
					s   *benchServer
					out *[]float64
				}{{rs, &laters}, {oe.loc, &locals}} {
					t := time.Now()
					got, err := x.s.c.Tree(b.ctx, repo, "main", "")
					d := time.Since(t)
					if err != nil {
						return err
					}
					if !sameTree(got) {
						return fmt.Errorf("%s: the tree of main differs from the one pushed", x.s.name)
					}
					*x.out = append(*x.out, ms(d))
				}
			}
			return nil
		}
		raw := func() error {
			d, err := download(k)
			if err != nil {
				return fmt.Errorf("raw download: %w", err)
			}
			raws = append(raws, ms(d))
			return nil
		}
		steps := []func() error{replica, raw}
		if k%2 == 1 {
			steps[0], steps[1] = raw, replica
		}
		for _, f := range steps {
			if err := f(); err != nil {
				return fmt.Errorf("objstore cold replica: %w", err)
			}
		}
	}
	size := fmt.Sprintf("%s; %d packs, %.1f MB in the bucket", b.big.describe(nbytes), len(infos), float64(packBytes)/1e6)
	fd, rd := newDist(firsts), newDist(raws)
	gr := b.add(&benchRow{Name: "objstore-getpack", Size: size, LS: rd, Target: "info"})
	gr.Pass = true
	gr.note("s3packs.Store.GetPack of each of the network's %d packs, 4 at a time (as a replica's catch-up), into a fresh directory: streamed, checked against the name, fsynced", len(infos))
	fr := b.add(&benchRow{Name: "objstore-cold-first-read", Size: size, LS: fd, Git: rd, GitCmd: "raw download of the network's packs (objstore-getpack)", Target: "≈ download (≤ 1.5×)"})
	fr.check(fmt.Sprintf("%.2f× the download", fd.Median/rd.Median), fd.Median <= 1.5*rd.Median)
	fr.note("GET /repos/{repo}/tree/main on a second object-mode server just started on an empty cache directory (same database and bucket): opens the network, downloads its packs, answers; %d replicas started (start-up median %.0f ms, not counted)", n, newDist(starts).Median)
	ld, lcd := newDist(laters), newDist(locals)
	lr := b.add(&benchRow{Name: "objstore-cold-later-reads", Size: size, LS: ld, Git: lcd, GitCmd: "the same GET in local-disk mode", Target: "≈ local (≤ local + 1 ms)"})
	lr.check(fmt.Sprintf("%.2f ms over local", ld.Median-lcd.Median), ld.Median <= lcd.Median+1)
	lr.note("the %d reads after the first on each replica, alternating with the same read in local mode; each checks the network's generation (one indexed SELECT) before serving; every tree equals the pushed one (%d entries)", later, len(want))
	return nil
}

// ---- full-history push ----

// fullPushes pushes the branches and tags of each bundle (a --mirror
// clone of it) to a fresh repository of each mode over HTTP and to a
// fresh bare repository over file://, in rotating order, and compares
// wall time and stored size.
func (oe *objEnv) fullPushes() error {
	b := oe.b
	bundles := b.o.objstore.Bundles
	if len(bundles) == 0 {
		b.skip("objstore-full-push", "no bundles given (--bundles, LOCKSTEP_BENCH_BUNDLES; e.g. /work/shared/corpus/echo.bundle)")
		return nil
	}
	for _, bundle := range bundles {
		if err := oe.fullPush(bundle); err != nil {
			return fmt.Errorf("objstore full-history push of %s: %w", bundleName(bundle), err)
		}
	}
	return nil
}

// fullPushSpecs are the refspecs of the full-history push: every branch
// and tag (a --mirror clone also holds refs/pull/*, which Lockstep
// refuses by design: only branches and tags can be pushed).
var fullPushSpecs = []string{"refs/heads/*:refs/heads/*", "refs/tags/*:refs/tags/*"}

func (oe *objEnv) fullPush(bundle string) error {
	b := oe.b
	base := bundleName(bundle)
	b.logf("objstore: full-history push of %s …", base)
	m, err := b.mirrorBundle(bundle, "os-src-"+base)
	if err != nil {
		return err
	}
	src, defBranch := m.src, m.defBranch

	type result struct {
		ms    []float64
		size  int64
		cache int64 // object mode: the pushing replica's cache
	}
	res := map[string]*result{"object": {}, "local": {}, "git": {}, "sqlite": {}}
	lsPush := func(mode string, s *benchServer, round int) error {
		name := b.name("os-full-" + base)
		if _, err := s.c.CreateRepo(b.ctx, name, defBranch); err != nil {
			return err
		}
		u, _ := url.Parse(s.url + "/git/" + name + ".git")
		u.User = url.UserPassword("x", s.key)
		t := time.Now()
		if _, err := b.git(src, append([]string{"push", "-q", u.String()}, fullPushSpecs...)...); err != nil {
			return fmt.Errorf("%s mode: %w", mode, err)
		}
		res[mode].ms = append(res[mode].ms, float64(time.Since(t).Microseconds())/1000)
		net, err := oe.network(s, name)
		if err != nil {
			return err
		}
		r := res[mode]
		if mode == "sqlite" {
			return nil // timing only (a note)
		}
		if mode == "object" {
			if _, r.size, err = oe.bucketBytes(net); err != nil {
				return err
			}
			if r.cache, err = dirBytes(oe.networkObjectsDir(s, net)); err != nil {
				return err
			}
		} else if r.size, err = dirBytes(oe.networkObjectsDir(s, net)); err != nil {
			return err
		}
		if round > 0 {
			return nil
		}
		// Every branch and tag arrived, at the pushed commit.
		return m.verify(b, mode+" mode", u.String())
	}
	gitPush := func(round int) error {
		dst := b.path(b.name("os-full-git-"+base) + ".git")
		if _, err := b.git(b.root, "init", "-q", "--bare", dst); err != nil {
			return err
		}
		t := time.Now()
		if _, err := b.git(src, append([]string{"push", "-q", "file://" + dst}, fullPushSpecs...)...); err != nil {
			return err
		}
		res["git"].ms = append(res["git"].ms, float64(time.Since(t).Microseconds())/1000)
		var err error
		res["git"].size, err = dirBytes(filepath.Join(dst, "objects"))
		os.RemoveAll(dst)
		return err
	}
	// The bench's main server (local-disk mode, embedded SQLite) for
	// comparison: what the Postgres metadata costs.
	sq, err := b.server(true)
	if err != nil {
		return err
	}
	rounds := max(2, b.o.iters/4)
	for r := 0; r < rounds; r++ {
		steps := []func() error{
			func() error { return lsPush("object", oe.obj, r) },
			func() error { return lsPush("local", oe.loc, r) },
			func() error { return gitPush(r) },
			func() error { return lsPush("sqlite", sq, r) },
		}
		for k := range steps {
			if err := steps[(k+r)%len(steps)](); err != nil {
				return err
			}
		}
	}
	gd := newDist(res["git"].ms)
	size := m.describe()
	for _, mode := range []string{"object", "local"} {
		r := res[mode]
		d := newDist(r.ms)
		row := b.add(&benchRow{Name: fullPushRow(bundle, mode), Size: size, LS: d, Git: gd, GitCmd: "git push of the same refs to a fresh bare repository over file://",
			Target: "≤ 1.5× file:// time; size ≤ 1.2× git's"})
		ratio := float64(r.size) / float64(res["git"].size)
		row.check(fmt.Sprintf("%.2f× file:// time", d.Median/gd.Median), d.Median <= 1.5*gd.Median)
		row.check(fmt.Sprintf("size %.2f× git's", ratio), ratio <= 1.2)
		where := "objects/ of the network's repository in the data directory"
		if mode == "object" {
			where = fmt.Sprintf("bytes in the bucket for the network; the pushing replica's cache holds %s more on its disk", fmtBytes(r.cache))
		}
		row.note("`git push -q URL %s` from a --mirror clone of %s to a fresh repository over HTTP, %d rounds rotating object/local/file:///SQLite; every branch and tag checked with ls-remote", strings.Join(fullPushSpecs, " "), filepath.Base(bundle), rounds)
		if mode == "local" {
			row.note("the same push to local-disk mode on the embedded SQLite (the bench's main server), same rounds: median %.0f ms (p90 %.0f)", newDist(res["sqlite"].ms).Median, newDist(res["sqlite"].ms).P90)
		}
		row.note("stored %s (%s) vs git's %s (objects/ of the file:// target): %.2f×", fmtBytes(r.size), where, fmtBytes(res["git"].size), ratio)
	}
	return nil
}
