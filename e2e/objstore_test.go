package e2e

// Object-storage mode with several replicas (issue #11, docs/replicas.md):
// real `lockstep serve` processes sharing one Postgres database, one Redis
// and one S3 bucket (versitygw), each with a data directory (its cache) of
// its own; the real git CLI as the client.

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep/internal/e2ekit"
	"github.com/lockstep-hq/lockstep/internal/testenv"
)

// objOpts configure newObjWorld.
type objOpts struct {
	// Replicas started at once (more with objWorld.add).
	Replicas int
	// Args are extra `lockstep serve` flags of every replica.
	Args []string
	// S3 is a server of the test's own (testenv.StartS3); nil: a bucket
	// of this test on the suite's S3 server.
	S3 *testenv.OwnS3
	// Timeout is the object store's per-request connection bound (the
	// URL's timeout=), default the adapter's.
	Timeout string
}

// objWorld is a set of replicas in object-storage mode.
type objWorld struct {
	dbURL    string
	s3       testenv.S3Server
	bucket   string   // the object store's bucket (its objects are under e2e/)
	env      []string // object store, AWS keys, shared secret key file, Redis
	args     []string
	adminKey string
	reps     []*server
	all      []*server // every process started, restarts included
}

// objSecretKeyFile writes a fresh hook-secret key (64 hex digits, 0600)
// that every replica shares.
func objSecretKeyFile(t testing.TB) string {
	t.Helper()
	b := make([]byte, 32)
	rand.Read(b)
	path := filepath.Join(t.TempDir(), "secret.key")
	if err := os.WriteFile(path, []byte(hex.EncodeToString(b)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// objStoreURL is LOCKSTEP_OBJECT_STORE for bucket on srv.
func objStoreURL(srv testenv.S3Server, bucket, timeout string) string {
	u := fmt.Sprintf("s3://%s/e2e?endpoint=%s&insecure=%t", bucket, srv.Endpoint, !srv.Secure)
	if timeout != "" {
		u += "&timeout=" + timeout
	}
	return u
}

// newObjWorld starts o.Replicas replicas on one new Postgres database, the
// test Redis and one bucket. The first creates the admin key; the others
// get a copy of admin.key in their data directory (the key is in the
// shared database: it works on every replica).
func newObjWorld(t *testing.T, o objOpts) *objWorld {
	t.Helper()
	var srv testenv.S3Server
	var bucket string
	if o.S3 != nil {
		srv, bucket = o.S3.S3Server, "lockstep-own"
		o.S3.MakeBucket(t, bucket)
	} else {
		srv, bucket = testenv.MustS3Bucket(t)
	}
	testenv.MustRedis(t) // reachable, or fail with instructions
	w := &objWorld{
		dbURL:  testenv.MustPostgresDB(t),
		s3:     srv,
		bucket: bucket,
		args:   o.Args,
		env: []string{
			"LOCKSTEP_OBJECT_STORE=" + objStoreURL(srv, bucket, o.Timeout),
			"AWS_ACCESS_KEY_ID=" + srv.AccessKey, "AWS_SECRET_ACCESS_KEY=" + srv.SecretKey,
			"LOCKSTEP_SECRET_KEY_FILE=" + objSecretKeyFile(t),
			"LOCKSTEP_REDIS_URL=" + testenv.RedisURL(t),
		},
	}
	for i := 0; i < o.Replicas; i++ {
		w.add(t)
	}
	return w
}

// add starts one more replica with a new, empty data directory.
func (w *objWorld) add(t *testing.T) *server {
	t.Helper()
	data := t.TempDir()
	if w.adminKey != "" {
		if err := os.WriteFile(filepath.Join(data, "admin.key"), []byte(w.adminKey+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s := startServer(t, serverOpts{DatabaseURL: w.dbURL, Data: data, Args: w.args, Env: w.env})
	if w.adminKey == "" {
		w.adminKey = s.AdminKey
	}
	w.reps = append(w.reps, s)
	w.all = append(w.all, s)
	return s
}

// logged counts the log lines of every process of w that contain msg.
func (w *objWorld) logged(msg string) int {
	n := 0
	for _, s := range w.all {
		n += strings.Count(s.Stderr.String(), `"msg":"`+msg+`"`)
	}
	return n
}

// restart SIGKILLs (kill) or stops replica i and starts it again on its
// data directory.
func (w *objWorld) restart(t *testing.T, i int, kill bool) *server {
	t.Helper()
	if kill {
		w.reps[i].Kill()
	} else {
		w.reps[i].Stop(syscall.SIGTERM)
	}
	w.reps[i] = w.reps[i].restart(t)
	w.all = append(w.all, w.reps[i])
	return w.reps[i]
}

// randomBytes is n bytes of incompressible hex-free noise.
func randomBytes(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return string(b)
}

// cloneComplete clones repo from s and checks the clone: git fsck --full
// is clean, HEAD is head (when given) and every commit of want is in it
// with all its objects (rev-list --objects walks each one's history and
// trees). It returns the clone's directory.
func cloneComplete(t *testing.T, s *server, key, repo, head string, want ...string) string {
	t.Helper()
	dir := s.clone(t, repo, key)
	if out, err := e2ekit.GitCmd(t, dir, "fsck", "--full", "--no-dangling"); err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("replica %s: git fsck of a clone of %s: %v\n%s", s.HostPort, repo, err, out)
	}
	if head != "" {
		if got := e2ekit.Git(t, dir, "rev-parse", "HEAD"); got != head {
			t.Errorf("replica %s: clone of %s has HEAD %s, want %s", s.HostPort, repo, got, head)
		}
	}
	for _, c := range want {
		if out, err := e2ekit.GitCmd(t, dir, "rev-list", "--objects", "--quiet", c); err != nil {
			t.Errorf("replica %s: clone of %s lacks commit %s (or an object of its history): %v\n%s", s.HostPort, repo, c, err, out)
		}
	}
	return dir
}

// TestObjectStoreThreeReplicas: three replicas in object-storage mode; tar
// pushes, git pushes, forks, preflights, merges and promotes go round-robin
// to them, each replica building on what the others wrote. A replica that
// never served any of it (a fourth, started at the end) clones every
// commit; every clone is fsck-clean.
func TestObjectStoreThreeReplicas(t *testing.T) {
	t.Parallel()
	w := newObjWorld(t, objOpts{Replicas: 3})
	r := w.reps
	admin := w.adminKey
	for _, s := range r {
		// One admin key, created by the first replica, works on all.
		s.MustJSON(t, "GET", "/api/v1/repos", admin, nil, http.StatusOK, nil)
	}
	agent := r[1].CreateKey(t, "agent", "agent")
	r[0].CreateRepo(t, "base")
	files := map[string]string{"README": "shared\n"}
	c1 := r[0].push(t, admin, "base", zeroOID, files).Commit
	commits := []string{c1}

	// git push on a replica that did not take the first push.
	dir := r[1].clone(t, "base", admin)
	if got := e2ekit.Git(t, dir, "rev-parse", "HEAD"); got != c1 {
		t.Fatalf("clone from replica 1 has HEAD %s, want %s (pushed on replica 0)", got, c1)
	}
	writeFile(t, filepath.Join(dir, "git.txt"), "pushed with git\n")
	e2ekit.Git(t, dir, "add", ".")
	e2ekit.Git(t, dir, "commit", "-q", "-m", "git push on replica 1")
	c2 := e2ekit.Git(t, dir, "rev-parse", "HEAD")
	e2ekit.Git(t, dir, "push", "-q", "origin", "main")
	commits = append(commits, c2)

	// A tar push on the third, on top of the git push.
	files = with(files, map[string]string{"git.txt": "pushed with git\n", "tar.txt": "tar on replica 2\n"})
	c3 := r[2].push(t, admin, "base", c2, files).Commit
	commits = append(commits, c3)
	for i, s := range r {
		if got := s.Head(t, "base"); got != c3 {
			t.Errorf("replica %d: base main %s, want %s", i, got, c3)
		}
		if got := s.Blob(t, "base", c3, "git.txt"); got != "pushed with git\n" {
			t.Errorf("replica %d: git.txt at %s = %q", i, c3, got)
		}
	}
	r[0].setGate(t, "base", map[string]any{})

	// Workspace i: forked on replica i, pushed on i+1 (ws-1 with git),
	// preflighted on i+2.
	tips := map[string]string{}
	for i := 0; i < 3; i++ {
		ws := fmt.Sprintf("ws-%d", i)
		if got := r[i].forkTip(t, agent.Secret, "base", ws); got != c3 {
			t.Fatalf("fork %s on replica %d: base commit %s, want %s", ws, i, got, c3)
		}
		on := r[(i+1)%3]
		name := fmt.Sprintf("file-%d.txt", i)
		if i == 1 {
			d := on.clone(t, ws, agent.Secret)
			writeFile(t, filepath.Join(d, name), ws+"\n")
			e2ekit.Git(t, d, "add", ".")
			e2ekit.Git(t, d, "commit", "-q", "-m", "git push to "+ws)
			e2ekit.Git(t, d, "push", "-q", "origin", "main")
			tips[ws] = e2ekit.Git(t, d, "rev-parse", "HEAD")
		} else {
			tips[ws] = on.push(t, agent.Secret, ws, c3, with(files, map[string]string{name: ws + "\n"})).Commit
		}
		commits = append(commits, tips[ws])
		var pre mergeResult
		r[(i+2)%3].MustJSON(t, "POST", "/api/v1/repos/base/merges", admin,
			map[string]any{"ours": "main", "theirs": ws + ":main", "preflight": true}, http.StatusOK, &pre)
		if !pre.Clean || pre.MergeBase != c3 || pre.Theirs != tips[ws] {
			t.Errorf("preflight of %s on replica %d: %+v, want clean, merge base %s, theirs %s", ws, (i+2)%3, pre, c3, tips[ws])
		}
	}
	// ws-0 merged by the admin on replica 0; ws-1 and ws-2 promoted by
	// their owner on replicas 1 and 2.
	var mat mergeResult
	r[0].MustJSON(t, "POST", "/api/v1/repos/base/merges", admin,
		map[string]any{"ours": "main", "theirs": "ws-0:main", "materialize": true, "expect_oid": c3}, http.StatusOK, &mat)
	if len(mat.Commit) != 40 {
		t.Fatalf("merge of ws-0: no commit: %+v", mat)
	}
	commits = append(commits, mat.Commit)
	head := mat.Commit
	for i := 1; i < 3; i++ {
		p := r[i].promote(t, agent.Secret, fmt.Sprintf("ws-%d", i))
		commits = append(commits, p.Commit)
		head = p.Commit
	}

	// Every replica, and one that never saw any of it, serves all of it.
	fresh := w.add(t)
	for i, s := range append(r[:3:3], fresh) {
		if got := s.Head(t, "base"); got != head {
			t.Errorf("replica %d: base main %s, want %s", i, got, head)
		}
		d := cloneComplete(t, s, admin, "base", head, commits...)
		for j := 0; j < 3; j++ {
			name := fmt.Sprintf("file-%d.txt", j)
			if got, err := os.ReadFile(filepath.Join(d, name)); err != nil || string(got) != fmt.Sprintf("ws-%d\n", j) {
				t.Errorf("replica %d: clone of base: %s = %q, %v", i, name, got, err)
			}
		}
	}
	for ws, tip := range tips {
		cloneComplete(t, fresh, admin, ws, tip, tip)
	}
	if v := fresh.Verify(t); !v.OK {
		t.Errorf("oplog verify: %+v", v)
	}
}

// TestObjectStoreCAS16: 16 pushes with the same expect_oid on one branch,
// spread over three replicas at once: exactly one lands, the 15 others
// get 409 ref_conflict; every replica then serves the winner's commit.
func TestObjectStoreCAS16(t *testing.T) {
	t.Parallel()
	const n = 16
	w := newObjWorld(t, objOpts{Replicas: 3})
	r, admin := w.reps, w.adminKey
	r[0].CreateRepo(t, "cas")
	c0 := r[0].push(t, admin, "cas", zeroOID, map[string]string{"README": "base\n"}).Commit
	for _, s := range r {
		s.Head(t, "cas") // every replica has the network open
	}
	bodies := make([][]byte, n)
	for i := range bodies {
		bodies[i] = e2ekit.TarOf(t, map[string]string{"README": "base\n", "who.txt": fmt.Sprintf("pusher %d\n", i)})
	}
	res := make([]*e2ekit.Response, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			res[i], errs[i] = r[i%3].Try("PUT", "/api/v1/repos/cas/worktree"+gateQuery(c0), admin, bodies[i], "application/x-tar")
		}()
	}
	close(start)
	wg.Wait()
	winner, won := "", -1
	conflicts := 0
	for i, rr := range res {
		switch {
		case errs[i] != nil:
			t.Errorf("push %d on replica %d: %v", i, i%3, errs[i])
		case rr.Status == http.StatusCreated:
			var p e2ekit.PushResult
			rr.Decode(t, &p)
			if winner != "" {
				t.Errorf("two pushes with expect_oid %s landed: %d (%s) and %d (%s)", c0, won, winner, i, p.Commit)
			}
			winner, won = p.Commit, i
		default:
			e2ekit.WantError(t, rr, http.StatusConflict, "ref_conflict")
			conflicts++
		}
	}
	if winner == "" || conflicts != n-1 {
		t.Fatalf("%d pushes: winner %q, %d ref_conflict; want one winner and %d ref_conflict", n, winner, conflicts, n-1)
	}
	for i, s := range r {
		if got := s.Head(t, "cas"); got != winner {
			t.Errorf("replica %d: head %s, want the winner %s", i, got, winner)
		}
		if got := s.Blob(t, "cas", "main", "who.txt"); got != fmt.Sprintf("pusher %d\n", won) {
			t.Errorf("replica %d: who.txt %q, want pusher %d", i, got, won)
		}
		cloneComplete(t, s, admin, "cas", winner, c0)
	}
	if v := r[2].Verify(t); !v.OK {
		t.Errorf("oplog verify: %+v", v)
	}
}

// TestObjectStoreSIGKILL: rounds of SIGKILL of one replica while it
// receives a large-ish push (4 MiB of noise) or right after a push
// that makes it compact (--compact-packs 2), then a restart; meanwhile
// another replica takes pushes. Afterwards every ref of every repository
// names a commit that every replica serves complete (git clone, fsck) and
// the operations log verifies.
func TestObjectStoreSIGKILL(t *testing.T) {
	t.Parallel()
	const rounds = 10
	w := newObjWorld(t, objOpts{Replicas: 3, Args: []string{"--compact-packs", "2", "--log-level", "info"}})
	admin := w.adminKey
	w.reps[0].CreateRepo(t, "crash")
	files := map[string]string{"README": "crash test\n"}
	w.reps[0].push(t, admin, "crash", zeroOID, files)
	w.reps[1].forkTip(t, admin, "crash", "side")
	var landed, lost, unknown int
	for round := 0; round < rounds; round++ {
		v := round % 3
		victim, other := w.reps[v], w.reps[(v+1)%3]
		head := other.Head(t, "crash")
		big := with(files, map[string]string{"big.bin": randomBytes(4 << 20), "round.txt": fmt.Sprint(round, "\n")})
		side := other.Head(t, "side")
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Another replica writes to the same network meanwhile.
			rr, err := other.Try("PUT", "/api/v1/repos/side/worktree"+gateQuery(side), admin,
				e2ekit.TarOf(t, map[string]string{"side.txt": fmt.Sprint("round ", round, "\n")}), "application/x-tar")
			if err != nil || rr.Status != http.StatusCreated {
				t.Errorf("round %d: push to side on replica %d (not killed): %v %v", round, (v+1)%3, err, rr)
			}
		}()
		if round%2 == 0 {
			// Mid-push: the kill lands while the upload, its index-pack,
			// the bucket upload or the transaction runs (or just after).
			done := make(chan *e2ekit.Response, 1)
			go func() {
				rr, _ := victim.Try("PUT", "/api/v1/repos/crash/worktree"+gateQuery(head), admin, e2ekit.TarOf(t, big), "application/x-tar")
				done <- rr
			}()
			time.Sleep(time.Duration(mrand.IntN(400)) * time.Millisecond)
			victim.Kill()
			switch rr := <-done; {
			case rr == nil:
				unknown++
			case rr.Status == http.StatusCreated:
				landed++
			default:
				lost++
			}
		} else {
			// Mid-compaction: this push takes the network over
			// --compact-packs, which starts a compaction in the
			// background; the kill follows the answer.
			victim.push(t, admin, "crash", head, with(files, map[string]string{"round.txt": fmt.Sprint(round, "\n")}))
			landed++
			time.Sleep(time.Duration(mrand.IntN(150)) * time.Millisecond)
			victim.Kill()
		}
		wg.Wait()
		w.restart(t, v, true)
	}
	t.Logf("%d rounds: %d kills during a push whose answer was lost, %d pushes answered before the kill, %d refused; %d compactions finished, %d local packs adopted at restart",
		rounds, unknown, landed, lost, w.logged("compacted network"), w.logged("object store: adopted a local pack"))

	refs := w.reps[0].Refs(t, admin, "crash")
	sideRefs := w.reps[0].Refs(t, admin, "side")
	if len(refs) == 0 || len(sideRefs) == 0 {
		t.Fatalf("refs: crash %v, side %v", refs, sideRefs)
	}
	for i, s := range append(w.reps[:3:3], w.add(t)) {
		for repo, rs := range map[string]map[string]string{"crash": refs, "side": sideRefs} {
			var want []string
			for _, oid := range rs {
				want = append(want, oid)
			}
			if got := s.Refs(t, admin, repo); fmt.Sprint(got) != fmt.Sprint(rs) {
				t.Errorf("replica %d: refs of %s %v, want %v", i, repo, got, rs)
			}
			cloneComplete(t, s, admin, repo, rs["refs/heads/main"], want...)
		}
	}
	if v := w.reps[1].Verify(t); !v.OK {
		t.Errorf("oplog verify: %+v", v)
	}
}

// TestObjectStoreOutage: with the S3 server gone, writes of packs over
// --object-inline-max answer 503 unavailable (nothing registered, no ref
// moved; a small pack is kept in the database and needs no bucket, see
// TestSmallPacksInDatabase in replica) while reads of networks
// a replica has in its cache keep working (API tree and blob, git clone);
// once it is back, writes work again and nothing is lost.
func TestObjectStoreOutage(t *testing.T) {
	t.Parallel()
	s3 := testenv.StartS3(t)
	w := newObjWorld(t, objOpts{Replicas: 3, S3: s3, Timeout: "2s"})
	r, admin := w.reps[:2], w.adminKey
	cold := w.reps[2] // never reads the network before the outage
	r[0].CreateRepo(t, "out")
	// README is 128 KiB of noise: its pack is over --object-inline-max,
	// so it is in the bucket, and a replica without a cache cannot
	// catch up while the bucket is down.
	files := map[string]string{"README": randomBytes(128 << 10)}
	c1 := r[0].push(t, admin, "out", zeroOID, files).Commit
	files = with(files, map[string]string{"b.txt": "second\n"})
	c2 := r[1].push(t, admin, "out", c1, files).Commit
	for _, s := range r {
		cloneComplete(t, s, admin, "out", c2, c1) // both caches hold everything
	}

	s3.Kill()
	for i, s := range r {
		start := time.Now()
		// 128 KiB of noise: a pack over --object-inline-max (64 KiB), so
		// it needs the bucket.
		rr := s.PushRaw(t, admin, "out", gateQuery(c2), e2ekit.TarOf(t, with(files, map[string]string{"lost.txt": randomBytes(128 << 10)})))
		took := time.Since(start)
		e := e2ekit.WantError(t, rr, http.StatusServiceUnavailable, "unavailable")
		t.Logf("replica %d: push with the object store down answered %d in %s: %s", i, rr.Status, took.Round(time.Millisecond), e.Error.Message)
		d := s.clone(t, "out", admin)
		writeFile(t, filepath.Join(d, "git.txt"), randomBytes(128<<10))
		e2ekit.Git(t, d, "add", ".")
		e2ekit.Git(t, d, "commit", "-q", "-m", "during the outage")
		if out, err := e2ekit.GitCmd(t, d, "push", "origin", "main"); err == nil {
			t.Errorf("replica %d: git push with the object store down succeeded:\n%s", i, out)
		} else {
			t.Logf("replica %d: git push with the object store down: %s", i, strings.TrimSpace(out))
		}
		if got := s.Head(t, "out"); got != c2 {
			t.Errorf("replica %d: a refused write moved main to %s (want %s)", i, got, c2)
		}
		// Reads from the cache.
		var tree struct {
			Entries []struct {
				Name string `json:"name"`
			} `json:"entries"`
		}
		s.MustJSON(t, "GET", "/api/v1/repos/out/tree/main", admin, nil, http.StatusOK, &tree)
		if len(tree.Entries) != 2 {
			t.Errorf("replica %d: tree of main during the outage: %+v", i, tree)
		}
		if got := s.Blob(t, "out", "main", "b.txt"); got != "second\n" {
			t.Errorf("replica %d: b.txt during the outage %q", i, got)
		}
		cloneComplete(t, s, admin, "out", c2, c1)
	}

	// A replica whose cache lacks the network cannot serve it without the
	// bucket: 503, not a not_found for a commit that exists.
	want503(t, "blob on a replica without the cache", cold.Call(t, "GET", "/api/v1/repos/out/blob/main/b.txt", admin, nil, ""))
	if out, err := e2ekit.GitCmd(t, "", "clone", "-q", cold.GitURL("out", admin), filepath.Join(t.TempDir(), "cold")); err == nil {
		t.Errorf("clone from a replica without the cache succeeded with the object store down:\n%s", out)
	} else if !strings.Contains(out, "503") && !strings.Contains(out, "unavailable") {
		t.Errorf("clone from a replica without the cache: want a 503 unavailable, got:\n%s", out)
	}

	port := s3.Endpoint
	s3.Restart(t)
	if s3.Endpoint != port {
		t.Fatalf("the S3 server came back on %s, not %s: the replicas point at the old address", s3.Endpoint, port)
	}
	c3 := r[0].push(t, admin, "out", c2, with(files, map[string]string{"after.txt": "after\n"})).Commit
	d := r[1].clone(t, "out", admin)
	writeFile(t, filepath.Join(d, "git.txt"), "git after the outage\n")
	e2ekit.Git(t, d, "add", ".")
	e2ekit.Git(t, d, "commit", "-q", "-m", "after the outage")
	e2ekit.Git(t, d, "push", "-q", "origin", "main")
	c4 := e2ekit.Git(t, d, "rev-parse", "HEAD")
	for i, s := range append(r[:2:2], cold, w.add(t)) {
		if got := s.Head(t, "out"); got != c4 {
			t.Errorf("replica %d: main %s after the outage, want %s", i, got, c4)
		}
		cloneComplete(t, s, admin, "out", c4, c1, c2, c3)
	}
	if v := r[0].Verify(t); !v.OK {
		t.Errorf("oplog verify: %+v", v)
	}
}

// TestObjectStoreWipedCache: a replica whose cache (networks/) was deleted
// while it was stopped rebuilds it from the bucket: clones are complete,
// and it takes writes again.
func TestObjectStoreWipedCache(t *testing.T) {
	t.Parallel()
	w := newObjWorld(t, objOpts{Replicas: 2})
	r, admin := w.reps, w.adminKey
	r[0].CreateRepo(t, "wipe")
	files := map[string]string{"README": "wipe\n"}
	var commits []string
	head := zeroOID
	for i := 0; i < 4; i++ {
		files = with(files, map[string]string{fmt.Sprintf("f%d.txt", i): fmt.Sprint(i, "\n")})
		head = r[i%2].push(t, admin, "wipe", head, files).Commit
		commits = append(commits, head)
	}
	cloneComplete(t, r[1], admin, "wipe", head, commits...)

	r[1].Stop(syscall.SIGTERM)
	nets := filepath.Join(r[1].Data, "networks")
	if _, err := os.Stat(nets); err != nil {
		t.Fatalf("replica 1 has no cache to wipe: %v", err)
	}
	if err := os.RemoveAll(nets); err != nil {
		t.Fatal(err)
	}
	if code := r[1].ExitCode(); code != 0 {
		t.Errorf("replica 1 exited with status %d on SIGTERM, want 0", code)
	}
	r[1] = r[1].restart(t)
	w.reps[1] = r[1]
	cloneComplete(t, r[1], admin, "wipe", head, commits...)
	if got := r[1].Blob(t, "wipe", "main", "f0.txt"); got != "0\n" {
		t.Errorf("f0.txt after the wipe %q", got)
	}
	next := r[1].push(t, admin, "wipe", head, with(files, map[string]string{"after.txt": "after the wipe\n"})).Commit
	cloneComplete(t, r[0], admin, "wipe", next, commits...)
}

// TestObjectStoreGCRace: a grace period of 2s, GC every 300ms and
// compaction above 2 packs, while three replicas push for about ten
// seconds and read each other's pushes: GC deletes retired packs under
// the racing writes and reads, yet every pushed commit stays fetchable
// and complete, from the replicas and from a brand-new one.
func TestObjectStoreGCRace(t *testing.T) {
	t.Parallel()
	const run = 10 * time.Second
	w := newObjWorld(t, objOpts{Replicas: 3,
		Args: []string{"--object-grace", "2s", "--object-gc-interval", "300ms", "--compact-packs", "2", "--log-level", "info"}})
	r, admin := w.reps, w.adminKey
	r[0].CreateRepo(t, "gc")
	c0 := r[0].push(t, admin, "gc", zeroOID, map[string]string{"README": "gc\n"}).Commit
	for i := range r {
		r[i].forkTip(t, admin, "gc", fmt.Sprintf("ws-%d", i))
	}
	pushed := make([][]string, 3)
	var mu sync.Mutex
	var refused, readFailures []string
	var wg sync.WaitGroup
	stop := time.Now().Add(run)
	for i := range r {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ws := fmt.Sprintf("ws-%d", i)
			head := c0
			files := map[string]string{"README": "gc\n"}
			for k := 0; time.Now().Before(stop); k++ {
				files = with(files, map[string]string{fmt.Sprintf("f-%d.txt", k): fmt.Sprintf("%s %d %s\n", ws, k, randomBytes(64))})
				rr, err := r[i].Try("PUT", "/api/v1/repos/"+ws+"/worktree"+gateQuery(head), admin, e2ekit.TarOf(t, files), "application/x-tar")
				if err != nil || rr.Status != http.StatusCreated {
					mu.Lock()
					refused = append(refused, fmt.Sprintf("push %s #%d on replica %d: %v %v", ws, k, i, err, rr))
					mu.Unlock()
					if err != nil || rr.Status != http.StatusServiceUnavailable {
						return
					}
					continue
				}
				var p e2ekit.PushResult
				rr.Decode(t, &p)
				head = p.Commit
				pushed[i] = append(pushed[i], head)
				// The next replica reads it at once (catch-up racing GC).
				next := r[(i+1)%3]
				br, err := next.Try("GET", "/api/v1/repos/"+ws+"/blob/"+head+"/"+fmt.Sprintf("f-%d.txt", k), admin, nil, "")
				if err != nil || br.Status != http.StatusOK || string(br.Body) != files[fmt.Sprintf("f-%d.txt", k)] {
					mu.Lock()
					readFailures = append(readFailures, fmt.Sprintf("read %s@%s on replica %d: %v %v", ws, head, (i+1)%3, err, br))
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	total := len(pushed[0]) + len(pushed[1]) + len(pushed[2])
	t.Logf("%d pushes landed in %s (%d, %d, %d per replica), %d refused", total, run, len(pushed[0]), len(pushed[1]), len(pushed[2]), len(refused))
	for _, f := range refused {
		// 503 is allowed (an upload over half the grace period is
		// refused); anything else is a bug.
		if !strings.Contains(f, " 503 ") {
			t.Errorf("%s", f)
		}
	}
	for _, f := range readFailures {
		t.Errorf("%s", f)
	}
	gcDeleted := func() int {
		n := 0
		for _, s := range r {
			for _, line := range strings.Split(s.Stderr.String(), "\n") {
				if strings.Contains(line, `"msg":"object store gc"`) && !strings.Contains(line, `"deleted_packs":0`) {
					n++
				}
			}
		}
		return n
	}
	// GC must have deleted something, or this test proved nothing.
	eventually(t, 60*time.Second, "a GC run that deleted packs", func() bool { return gcDeleted() > 0 })
	t.Logf("GC runs that deleted packs: %d", gcDeleted())

	fresh := w.add(t)
	for i := range r {
		ws := fmt.Sprintf("ws-%d", i)
		if len(pushed[i]) == 0 {
			t.Errorf("no push landed on %s", ws)
			continue
		}
		last := pushed[i][len(pushed[i])-1]
		for j, s := range append(r[:3:3], fresh) {
			if got := s.Head(t, ws); got != last {
				t.Errorf("replica %d: %s main %s, want the last push %s", j, ws, got, last)
			}
		}
		cloneComplete(t, fresh, admin, ws, last, pushed[i]...)
		cloneComplete(t, r[(i+2)%3], admin, ws, last, pushed[i]...)
	}
	if v := fresh.Verify(t); !v.OK {
		t.Errorf("oplog verify: %+v", v)
	}
}

// TestObjectStoreBadConfig: every wrong object-store setting stops `lockstep
// serve` before it listens, with a one-line error saying what to fix and a
// non-zero status.
func TestObjectStoreBadConfig(t *testing.T) {
	t.Parallel()
	srv, bucket := testenv.MustS3Bucket(t)
	dbURL := testenv.MustPostgresDB(t)
	keyFile := objSecretKeyFile(t)
	dead := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	good := objStoreURL(srv, bucket, "")
	keys := []string{"AWS_ACCESS_KEY_ID=" + srv.AccessKey, "AWS_SECRET_ACCESS_KEY=" + srv.SecretKey}
	cases := []struct {
		name string
		env  []string
		want string // in the error line
	}{
		{"sqlite", append([]string{"LOCKSTEP_OBJECT_STORE=" + good, "LOCKSTEP_SECRET_KEY_FILE=" + keyFile}, keys...), "LOCKSTEP_DATABASE_URL"},
		{"no-keys", []string{"LOCKSTEP_OBJECT_STORE=" + good, "LOCKSTEP_DATABASE_URL=" + dbURL, "LOCKSTEP_SECRET_KEY_FILE=" + keyFile,
			"AWS_ACCESS_KEY_ID=", "AWS_SECRET_ACCESS_KEY="}, "AWS_ACCESS_KEY_ID"},
		{"wrong-keys", []string{"LOCKSTEP_OBJECT_STORE=" + good, "LOCKSTEP_DATABASE_URL=" + dbURL, "LOCKSTEP_SECRET_KEY_FILE=" + keyFile,
			"AWS_ACCESS_KEY_ID=" + srv.AccessKey, "AWS_SECRET_ACCESS_KEY=wrong-" + srv.SecretKey}, "AWS_SECRET_ACCESS_KEY"},
		{"unreachable", append([]string{"LOCKSTEP_OBJECT_STORE=" + objStoreURL(testenv.S3Server{Endpoint: dead}, bucket, "1s"),
			"LOCKSTEP_DATABASE_URL=" + dbURL, "LOCKSTEP_SECRET_KEY_FILE=" + keyFile}, keys...), "unreachable"},
		{"no-bucket", append([]string{"LOCKSTEP_OBJECT_STORE=" + objStoreURL(srv, bucket+"-missing", ""),
			"LOCKSTEP_DATABASE_URL=" + dbURL, "LOCKSTEP_SECRET_KEY_FILE=" + keyFile}, keys...), bucket + "-missing"},
		{"no-secret-key-file", append([]string{"LOCKSTEP_OBJECT_STORE=" + good, "LOCKSTEP_DATABASE_URL=" + dbURL}, keys...), "LOCKSTEP_SECRET_KEY_FILE"},
		{"negative-inline-max", append([]string{"LOCKSTEP_OBJECT_STORE=" + good, "LOCKSTEP_DATABASE_URL=" + dbURL, "LOCKSTEP_SECRET_KEY_FILE=" + keyFile,
			"LOCKSTEP_OBJECT_INLINE_MAX=-1"}, keys...), "LOCKSTEP_OBJECT_INLINE_MAX"},
		{"huge-inline-max", append([]string{"LOCKSTEP_OBJECT_STORE=" + good, "LOCKSTEP_DATABASE_URL=" + dbURL, "LOCKSTEP_SECRET_KEY_FILE=" + keyFile,
			"LOCKSTEP_OBJECT_INLINE_MAX=1073741824"}, keys...), "LOCKSTEP_OBJECT_INLINE_MAX"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
			data := t.TempDir()
			os.Chmod(data, 0o700) // no warning about its mode: stderr is the error alone
			cmd := exec.Command(e2ekit.Binary, "serve", "--data", data, "--addr", addr)
			cmd.Env = append(e2ekit.CleanEnv(), c.env...)
			var stdout, stderr e2ekit.SyncBuffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			var err error
			select {
			case err = <-done:
			case <-time.After(60 * time.Second):
				cmd.Process.Kill()
				<-done
				t.Fatalf("lockstep serve still running after 60s with a bad object store setting:\n%s", &stderr)
			}
			if code := e2ekit.ExitCode(t, err); code == 0 {
				t.Errorf("exit status 0, want non-zero")
			}
			lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
			if len(lines) != 1 || !strings.HasPrefix(lines[0], "lockstep: ") {
				t.Errorf("stderr is not one line (%d lines):\n%s", len(lines), &stderr)
			}
			if !strings.Contains(stderr.String(), c.want) {
				t.Errorf("error does not name %q:\n%s", c.want, &stderr)
			}
			if strings.Contains(stdout.String(), "listening") {
				t.Errorf("it said it was listening:\n%s", &stdout)
			}
			if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
				conn.Close()
				t.Errorf("something listens on %s", addr)
			}
			if strings.Contains(stderr.String(), srv.SecretKey) {
				t.Errorf("the error shows the secret key")
			}
		})
	}
}
