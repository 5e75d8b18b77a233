package e2e

// A minute of object GC racing a fleet on two real replicas (issue #28,
// "Done when"): two `lockstep serve` processes in object-storage mode (one
// Postgres, one versitygw bucket, one Redis) while agents fork, push (tar
// over HTTP and plain `git push`), roll back, pass the gate and promote
// through either replica, and `gc --prune now` runs continuously on both
// replicas in turn (the CLI and the API) with a short bucket-GC interval.
// Every acknowledged write is recorded; at the end nothing acknowledged is
// lost and every live ref fetched through each replica is fsck-clean.

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep/internal/e2ekit"
)

// gcRaceDuration is how long the fleet races the GC:
// LOCKSTEP_TEST_GC_RACE_DURATION (a Go duration), default a minute.
func gcRaceDuration(t *testing.T) time.Duration {
	t.Helper()
	v := os.Getenv("LOCKSTEP_TEST_GC_RACE_DURATION")
	if v == "" {
		return time.Minute
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("LOCKSTEP_TEST_GC_RACE_DURATION=%q: want a positive Go duration such as 15s", v)
	}
	return d
}

// raceWS is one live workspace of an agent and what was acknowledged on
// it, oldest first.
type raceWS struct {
	name     string
	acked    []string // every acknowledged commit of refs/heads/main
	promoted string   // the commit its promote landed on the base ("" if none)
}

func (w *raceWS) head() string { return w.acked[len(w.acked)-1] }

// raceTally counts operations by kind (acknowledged, and refused with a
// retryable answer).
type raceTally struct {
	mu      sync.Mutex
	ok      map[string]int
	refused map[string]int
}

func (c *raceTally) add(kind string, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ok {
		c.ok[kind]++
	} else {
		c.refused[kind]++
	}
}

func (c *raceTally) get(kind string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ok[kind]
}

// The kinds of operation an agent cycles through.
var raceKinds = []string{"push", "push-large", "git-push", "trash", "push-recycled", "rollback", "promote"}

// retryable reports whether an answer is one a racing GC may give a write
// (nothing moved; retry): 503 unavailable.
func retryable(r *e2ekit.Response) bool {
	return r != nil && r.Status == http.StatusServiceUnavailable
}

// raceAgent is one agent: its key, its workspaces (the last is the one it
// writes) and a clone of that workspace whose work tree is the agent's
// view of the tree (tar pushes send it, git pushes commit in it).
type raceAgent struct {
	id       int
	key      string
	ci       string // the CI key that posts the gate's check
	reps     []*server
	tally    *raceTally
	acks     *atomic.Int64
	all      []*raceWS
	ws       *raceWS
	dir      string // clone of ws
	recycled string // content last pushed to a purged workspace
	nWS      int
	errf     func(format string, args ...any)
}

// rep is the replica of the agent's k-th operation (offset by off).
func (a *raceAgent) rep(k, off int) *server { return a.reps[(a.id+k+off)%len(a.reps)] }

// other is the replica that is not s.
func (a *raceAgent) other(s *server) *server {
	if s == a.reps[0] {
		return a.reps[1]
	}
	return a.reps[0]
}

// fork makes the agent's next workspace from base's main (through s) and
// clones it.
func (a *raceAgent) fork(t *testing.T, s *server) bool {
	name := fmt.Sprintf("race-%d-%d", a.id, a.nWS)
	r, err := s.Try("POST", "/api/v1/repos/base/forks", a.key, map[string]string{"name": name}, "")
	if err != nil || r.Status != http.StatusCreated {
		if err == nil && retryable(r) {
			a.tally.add("fork", false)
			return false
		}
		a.errf("fork %s on %s: %v %v", name, s.HostPort, err, r)
		return false
	}
	var f struct {
		BaseCommit string `json:"base_commit"`
	}
	if err := json.Unmarshal(r.Body, &f); err != nil || len(f.BaseCommit) != 40 {
		a.errf("fork %s: %v %s", name, err, r)
		return false
	}
	a.nWS++
	a.tally.add("fork", true)
	ws := &raceWS{name: name, acked: []string{f.BaseCommit}}
	dir := filepath.Join(t.TempDir(), name)
	if out, err := e2ekit.GitRun("", "", "clone", "-q", s.GitURL(name, a.key), dir); err != nil {
		a.errf("clone %s on %s: %v\n%s", name, s.HostPort, err, out)
		return false
	}
	a.all = append(a.all, ws)
	a.ws, a.dir = ws, dir
	return true
}

// git runs git in the agent's clone.
func (a *raceAgent) git(args ...string) (string, error) {
	out, err := e2ekit.GitRun(a.dir, "", args...)
	return strings.TrimSpace(out), err
}

// sync fetches main of the workspace through s and puts the clone on it:
// it must be the last acknowledged commit (the agent is the only writer).
func (a *raceAgent) sync(s *server) bool {
	if out, err := a.git("fetch", "-q", s.GitURL(a.ws.name, a.key), "main"); err != nil {
		a.errf("fetch %s through %s after %s: %v\n%s", a.ws.name, s.HostPort, a.ws.head(), err, out)
		return false
	}
	if got, _ := a.git("rev-parse", "FETCH_HEAD"); got != a.ws.head() {
		a.errf("%s through %s: main is %s, last acknowledged %s", a.ws.name, s.HostPort, got, a.ws.head())
		return false
	}
	if out, err := a.git("reset", "-q", "--hard", a.ws.head()); err != nil {
		a.errf("reset %s: %v\n%s", a.ws.name, err, out)
		return false
	}
	return true
}

// restore puts the clone back on the last acknowledged commit after a
// refused write.
func (a *raceAgent) restore() {
	if out, err := a.git("reset", "-q", "--hard", a.ws.head()); err != nil {
		a.errf("reset %s: %v\n%s", a.ws.name, err, out)
	}
}

// write puts content at path (under the agent's directory) in the clone.
func (a *raceAgent) write(path, content string) {
	p := filepath.Join(a.dir, "agents", fmt.Sprint(a.id), path)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		a.errf("%v", err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		a.errf("%v", err)
	}
}

// tree is the clone's work tree as path → content.
func (a *raceAgent) tree() map[string]string {
	files := map[string]string{}
	err := filepath.WalkDir(a.dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == ".git" {
				return filepath.SkipDir
			}
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(a.dir, p)
		files[filepath.ToSlash(rel)] = string(b)
		return nil
	})
	if err != nil {
		a.errf("walk %s: %v", a.dir, err)
	}
	return files
}

// acked records an acknowledged write of kind and syncs the clone to it
// through s (a read of what was just written, racing the GC).
func (a *raceAgent) acked(kind, commit string, s *server) {
	a.ws.acked = append(a.ws.acked, commit)
	a.acks.Add(1)
	a.tally.add(kind, true)
	a.sync(s)
}

// pushTar pushes the clone's work tree through s with compare-and-swap on
// the last acknowledged commit.
func (a *raceAgent) pushTar(t *testing.T, kind string, s *server) {
	r, err := s.Try("PUT", "/api/v1/repos/"+a.ws.name+"/worktree"+gateQuery(a.ws.head()), a.key, e2ekit.TarOf(t, a.tree()), "application/x-tar")
	switch {
	case err != nil:
		a.errf("%s to %s through %s: %v", kind, a.ws.name, s.HostPort, err)
	case r.Status == http.StatusCreated:
		var p e2ekit.PushResult
		if err := json.Unmarshal(r.Body, &p); err != nil || len(p.Commit) != 40 {
			a.errf("%s to %s: %v %s", kind, a.ws.name, err, r)
			return
		}
		a.acked(kind, p.Commit, a.other(s))
		return
	case retryable(r):
		a.tally.add(kind, false)
	default:
		a.errf("%s to %s through %s: %s", kind, a.ws.name, s.HostPort, r)
	}
	a.restore()
}

// step runs the agent's k-th operation (the kinds in turn).
func (a *raceAgent) step(t *testing.T, k int) {
	s := a.rep(k, 0)
	switch kind := raceKinds[k%len(raceKinds)]; kind {
	case "push":
		a.write("small.txt", fmt.Sprintf("agent %d op %d %s\n", a.id, k, randomBytes(32)))
		a.pushTar(t, kind, s)
	case "push-large":
		a.write("large.bin", randomBytes(384<<10))
		a.pushTar(t, kind, s)
	case "git-push":
		a.write("git.txt", fmt.Sprintf("git push by agent %d, op %d\n", a.id, k))
		if out, err := a.git("add", "-A"); err != nil {
			a.errf("git add: %v\n%s", err, out)
			return
		}
		if out, err := a.git("commit", "-q", "-m", fmt.Sprintf("op %d", k)); err != nil {
			a.errf("git commit: %v\n%s", err, out)
			return
		}
		c, _ := a.git("rev-parse", "HEAD")
		out, err := a.git("push", "-q", s.GitURL(a.ws.name, a.key), "HEAD:refs/heads/main")
		switch {
		case err == nil:
			a.acked(kind, c, a.rep(k, 1))
			return
		case strings.Contains(out, "503") || strings.Contains(out, "unavailable"):
			a.tally.add(kind, false)
		default:
			a.errf("git push to %s through %s: %v\n%s", a.ws.name, s.HostPort, err, out)
		}
		a.restore()
	case "trash":
		// An attempt with a large blob of its own, purged at once: cruft
		// for the GC, and content the next push uses again (found stored
		// while a GC may be dropping it).
		name := fmt.Sprintf("trash-%d-%d", a.id, k)
		blob := randomBytes(256 << 10)
		a.recycled = ""
		r, err := s.Try("POST", "/api/v1/repos/base/forks", a.key, map[string]string{"name": name}, "")
		if err != nil || r.Status != http.StatusCreated {
			if err == nil && retryable(r) {
				a.tally.add(kind, false)
				return
			}
			a.errf("fork %s: %v %v", name, err, r)
			return
		}
		var f struct {
			BaseCommit string `json:"base_commit"`
		}
		json.Unmarshal(r.Body, &f)
		o := a.rep(k, 1)
		r, err = o.Try("PUT", "/api/v1/repos/"+name+"/worktree"+gateQuery(f.BaseCommit), a.key,
			e2ekit.TarOf(t, map[string]string{"README": "trash\n", "trash.bin": blob}), "application/x-tar")
		pushed := err == nil && r.Status == http.StatusCreated
		if !pushed && !(err == nil && retryable(r)) {
			a.errf("push to %s: %v %v", name, err, r)
		}
		if r, err := s.Try("DELETE", "/api/v1/repos/"+name+"?purge=true", a.key, nil, ""); err != nil || r.Status != http.StatusOK {
			a.errf("purge %s: %v %v", name, err, r)
			return
		}
		if pushed {
			a.recycled = blob
		}
		a.tally.add(kind, pushed)
	case "push-recycled":
		if a.recycled == "" {
			a.recycled = randomBytes(256 << 10)
		}
		a.write("recycled.bin", a.recycled)
		a.pushTar(t, kind, s)
	case "rollback":
		if len(a.ws.acked) < 3 {
			a.tally.add(kind, false)
			return
		}
		to := a.ws.acked[len(a.ws.acked)-3]
		r, err := s.Try("POST", "/api/v1/repos/"+a.ws.name+"/rollback", a.key,
			map[string]any{"to": to, "expect_oid": a.ws.head(), "message": "race rollback"}, "")
		switch {
		case err != nil:
			a.errf("rollback %s: %v", a.ws.name, err)
		case r.Status == http.StatusCreated:
			var p e2ekit.PushResult
			if err := json.Unmarshal(r.Body, &p); err != nil || len(p.Commit) != 40 {
				a.errf("rollback %s: %v %s", a.ws.name, err, r)
				return
			}
			a.acked(kind, p.Commit, a.rep(k, 1))
		case retryable(r):
			a.tally.add(kind, false)
		default:
			a.errf("rollback %s to %s through %s: %s", a.ws.name, to, s.HostPort, r)
		}
	case "promote":
		if len(a.ws.acked) < 2 {
			// Nothing written since the fork (every write so far was
			// refused while a GC committed): the base already has the
			// tip, and a promote is rightly refused as empty.
			a.tally.add(kind, false)
			return
		}
		// The gate: CI posts the required check on the tip through one
		// replica, the agent evaluates and promotes through the other.
		head := a.ws.head()
		r, err := s.Try("POST", "/api/v1/repos/"+a.ws.name+"/commits/"+head+"/checks", a.ci,
			map[string]string{"name": "race", "status": "success", "summary": "race test"}, "")
		if err != nil || r.Status != http.StatusCreated {
			if err == nil && retryable(r) {
				a.tally.add(kind, false)
				return
			}
			a.errf("post check on %s@%s: %v %v", a.ws.name, head, err, r)
			return
		}
		o := a.rep(k, 1)
		r, err = o.Try("GET", "/api/v1/repos/"+a.ws.name+"/gate/evaluate", a.key, nil, "")
		var ev struct {
			Passed bool   `json:"passed"`
			Commit string `json:"commit"`
		}
		if err != nil || r.Status != http.StatusOK || json.Unmarshal(r.Body, &ev) != nil || !ev.Passed || ev.Commit != head {
			if err == nil && retryable(r) {
				a.tally.add(kind, false)
				return
			}
			a.errf("gate of %s@%s through %s: %v %v", a.ws.name, head, o.HostPort, err, r)
			return
		}
		r, err = o.Try("POST", "/api/v1/repos/"+a.ws.name+"/promote", a.key, map[string]any{"commit": head}, "")
		switch {
		case err != nil:
			a.errf("promote %s: %v", a.ws.name, err)
		case r.Status == http.StatusOK:
			var p promoteResult
			if err := json.Unmarshal(r.Body, &p); err != nil || len(p.Commit) != 40 {
				a.errf("promote %s: %v %s", a.ws.name, err, r)
				return
			}
			a.ws.promoted = p.Commit
			a.acks.Add(1)
			a.tally.add(kind, true)
			// A promoted workspace takes no more writes: the next one.
			for i := 0; i < 5 && !a.fork(t, a.rep(k, i)); i++ {
			}
		case retryable(r):
			a.tally.add(kind, false)
		default:
			a.errf("promote %s@%s through %s: %s", a.ws.name, head, o.HostPort, r)
		}
	}
}

// gcRun is one `gc --prune now` on s: through the CLI or the API.
type gcRun struct {
	res gcCLIResult
	ok  bool // ran (not refused with 503, not skipped)
	err string
}

func runGCOn(t *testing.T, s *server, cli bool) gcRun {
	var res struct {
		gcCLIResult
		Busy    []string `json:"busy"`
		Skipped bool     `json:"skipped"`
	}
	if cli {
		r := s.CLI(t, s.AdminKey, "", "gc", "--json", "--prune", "now")
		if r.Code != 0 {
			if strings.Contains(r.Stderr, "unavailable") || strings.Contains(r.Stderr, "503") {
				return gcRun{}
			}
			return gcRun{err: fmt.Sprintf("lockstep gc on %s: %s", s.HostPort, r)}
		}
		if err := json.Unmarshal([]byte(r.Stdout), &res); err != nil {
			return gcRun{err: fmt.Sprintf("lockstep gc on %s: %v: %s", s.HostPort, err, r)}
		}
	} else {
		r, err := s.Try("POST", "/api/v1/gc", s.AdminKey, map[string]any{"prune": "now"}, "")
		switch {
		case err != nil:
			return gcRun{err: fmt.Sprintf("POST /api/v1/gc on %s: %v", s.HostPort, err)}
		case retryable(r):
			return gcRun{}
		case r.Status != http.StatusOK:
			return gcRun{err: fmt.Sprintf("POST /api/v1/gc on %s: %s", s.HostPort, r)}
		}
		if err := json.Unmarshal(r.Body, &res); err != nil {
			return gcRun{err: fmt.Sprintf("POST /api/v1/gc on %s: %v: %s", s.HostPort, err, r)}
		}
	}
	return gcRun{res: res.gcCLIResult, ok: !res.Skipped}
}

// TestObjectStoreGCRaceFleet: a fleet of agents against two replicas in
// object-storage mode while `gc --prune now` runs continuously on both
// (alternately, the CLI and the API) and the bucket GC every 500ms with a
// 6s grace, for LOCKSTEP_TEST_GC_RACE_DURATION (a minute by default).
// Writes a GC refuses (503) are retried; every acknowledged one is kept:
// each workspace's main is its last acknowledged commit and every commit
// acknowledged on it is in its history (a rollback is a new commit), every
// promoted commit is on the base's main, and every live ref fetched
// through each replica — and through a third one started at the end —
// passes git fsck --strict.
func TestObjectStoreGCRaceFleet(t *testing.T) {
	t.Parallel()
	run := gcRaceDuration(t)
	const agents = 3
	w := newObjWorld(t, objOpts{Replicas: 2, Args: []string{"--object-grace", "6s", "--object-gc-interval", "500ms",
		"--gc-interval", "0", "--compact-packs", "4", "--log-level", "info"}})
	reps, admin := w.reps, w.adminKey
	reps[0].CreateRepo(t, "base")
	reps[0].push(t, admin, "base", zeroOID, map[string]string{"README": "gc race\n"})
	reps[1].setGate(t, "base", map[string]any{"required_checks": []string{"race"}})
	ci := reps[1].CreateKey(t, "ci", "ci")

	tally := &raceTally{ok: map[string]int{}, refused: map[string]int{}}
	var acks atomic.Int64
	var errMu sync.Mutex
	var errs []string
	errf := func(format string, args ...any) {
		errMu.Lock()
		defer errMu.Unlock()
		errs = append(errs, fmt.Sprintf(format, args...))
	}
	fleet := make([]*raceAgent, agents)
	for i := range fleet {
		key := reps[i%2].CreateKey(t, fmt.Sprintf("agent-%d", i), "agent")
		fleet[i] = &raceAgent{id: i, key: key.Secret, ci: ci.Secret, reps: reps, tally: tally, acks: &acks, errf: errf}
		if !fleet[i].fork(t, reps[i%2]) {
			t.Fatalf("first fork of agent %d: %v", i, errs)
		}
	}

	// The GC loop: replicas in turn, CLI and API in turn. A write is
	// refused when a GC committed within a second of its start (replicas'
	// clock skew), so back-to-back runs would refuse every write: the gap
	// grows while no write gets through, and returns to its minimum when
	// one does.
	stop := make(chan struct{})
	var gcWG sync.WaitGroup
	gcCount := map[string]int{}
	var gcObjects, gcRefused int
	gcWG.Add(1)
	go func() {
		defer gcWG.Done()
		const pause = 300 * time.Millisecond
		gap, seen := pause, int64(-1)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			s, cli := reps[i%2], i/2%2 == 0
			g := runGCOn(t, s, cli)
			switch {
			case g.err != "":
				errf("%s", g.err)
			case g.ok:
				gcCount[fmt.Sprintf("replica %d %s", i%2, map[bool]string{true: "cli", false: "api"}[cli])]++
				gcObjects += g.res.Objects
			default:
				gcRefused++
			}
			if n := acks.Load(); n == seen {
				gap = min(2*gap, 3*time.Second)
			} else {
				gap, seen = pause, n
			}
			select {
			case <-stop:
				return
			case <-time.After(gap):
			}
		}
	}()

	// The fleet. Past the deadline an agent goes on (bounded) until each
	// kind of operation was acknowledged at least once for it, so the
	// minimums below hold whatever the machine's speed.
	start := time.Now()
	deadline := start.Add(run)
	var wg sync.WaitGroup
	done := make([]map[string]bool, agents)
	for i, a := range fleet {
		done[i] = map[string]bool{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; ; k++ {
				now := time.Now()
				if now.After(deadline.Add(2*time.Minute)) || now.After(deadline) && len(done[i]) == len(raceKinds) {
					return
				}
				errMu.Lock()
				failed := len(errs) > 0
				errMu.Unlock()
				if failed {
					return
				}
				kind := raceKinds[k%len(raceKinds)]
				before := tally.get(kind)
				a.step(t, k)
				if tally.get(kind) > before {
					done[i][kind] = true
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	gcWG.Wait()
	raced := time.Since(start)
	for _, e := range errs {
		t.Error(e)
	}
	if t.Failed() {
		t.FailNow()
	}

	// One more GC on each replica now that the writers stopped: it must
	// leave everything whole as well.
	for i, s := range reps {
		g := runGCOn(t, s, i == 0)
		if g.err != "" || !g.ok {
			t.Fatalf("final gc on replica %d: %+v", i, g)
		}
		gcObjects += g.res.Objects
	}
	// The bucket GC deleted retired packs (those of the runs above that
	// are older than the grace period): clones below read past it.
	bucketDeleted := func() int {
		n := 0
		for _, s := range w.all {
			for _, line := range strings.Split(s.Stderr.String(), "\n") {
				if strings.Contains(line, `"msg":"object store gc"`) && !strings.Contains(line, `"deleted_packs":0`) {
					n++
				}
			}
		}
		return n
	}
	eventually(t, 90*time.Second, "a bucket GC run that deleted packs", func() bool { return bucketDeleted() > 0 })

	// What raced.
	var kinds []string
	for _, k := range append([]string{"fork"}, raceKinds...) {
		kinds = append(kinds, fmt.Sprintf("%s %d (+%d refused)", k, tally.ok[k], tally.refused[k]))
	}
	var gcs []string
	gcTotal := 0
	for k, n := range gcCount {
		gcs = append(gcs, fmt.Sprintf("%s %d", k, n))
		gcTotal += n
	}
	sort.Strings(gcs)
	var nws int
	for _, a := range fleet {
		nws += len(a.all)
	}
	t.Logf("%s of racing (asked for %s), %d agents, %d workspaces: %s", raced.Round(time.Millisecond), run, agents, nws, strings.Join(kinds, ", "))
	t.Logf("gc --prune now: %d runs (%s), %d refused or skipped, %d objects dropped; bucket GC runs that deleted packs: %d; compactions: %d",
		gcTotal, strings.Join(gcs, ", "), gcRefused, gcObjects, bucketDeleted(), w.logged("compacted network"))
	// It raced: every kind happened for every agent, GC ran on both
	// replicas through both the CLI and the API, and dropped objects.
	for _, k := range append([]string{"fork"}, raceKinds...) {
		want := agents // each agent acknowledged each kind at least once
		if k == "fork" {
			want = 2 * agents // its first workspace and one after a promote
		}
		if tally.ok[k] < want {
			t.Errorf("%d acknowledged %s, want at least %d", tally.ok[k], k, want)
		}
	}
	for _, k := range []string{"replica 0 cli", "replica 0 api", "replica 1 cli", "replica 1 api"} {
		if gcCount[k] == 0 && raced > 10*time.Second {
			t.Errorf("no gc run on %s while racing", k)
		}
	}
	if gcTotal < 2 {
		t.Errorf("%d gc runs while racing, want at least 2", gcTotal)
	}
	if gcObjects == 0 {
		t.Errorf("the gc runs dropped nothing: the race was not exercised")
	}

	// Nothing acknowledged is lost, through each replica and a new one.
	fresh := w.add(t)
	for i, s := range append(reps[:2:2], fresh) {
		checkRaceReplica(t, i, s, admin, fleet)
	}
	if v := fresh.Verify(t); !v.OK {
		t.Errorf("oplog verify: %+v", v)
	}
}

// checkRaceReplica checks, through replica s: each workspace's main (API)
// is its last acknowledged commit; a fetch of every live ref (base and
// every workspace) into one new repository passes git fsck --strict; every
// acknowledged commit is in its workspace's history and every promoted
// commit in the base's.
func checkRaceReplica(t *testing.T, i int, s *server, admin string, fleet []*raceAgent) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), fmt.Sprintf("replica-%d.git", i))
	e2ekit.Git(t, "", "init", "-q", "--bare", dir)
	e2ekit.Git(t, dir, "fetch", "-q", s.GitURL("base", admin), "+refs/*:refs/base/*", "+refs/heads/main:refs/heads/main")
	history := func(ref string) map[string]bool {
		m := map[string]bool{}
		for _, c := range strings.Fields(e2ekit.Git(t, dir, "rev-list", ref)) {
			m[c] = true
		}
		return m
	}
	checked, promoted := 0, 0
	for _, a := range fleet {
		for _, ws := range a.all {
			if got := s.Refs(t, admin, ws.name)["refs/heads/main"]; got != ws.head() {
				t.Errorf("replica %d: %s main %s, last acknowledged %s", i, ws.name, got, ws.head())
			}
			e2ekit.Git(t, dir, "fetch", "-q", s.GitURL(ws.name, admin), "+refs/*:refs/ws/"+ws.name+"/*")
			h := history("refs/ws/" + ws.name + "/heads/main")
			for _, c := range ws.acked {
				if !h[c] {
					t.Errorf("replica %d: acknowledged commit %s is not in the history of %s", i, c, ws.name)
				}
				checked++
			}
		}
	}
	mainHistory := history("refs/base/heads/main")
	for _, a := range fleet {
		for _, ws := range a.all {
			if ws.promoted != "" {
				if !mainHistory[ws.promoted] {
					t.Errorf("replica %d: promoted commit %s (of %s) is not on base's main", i, ws.promoted, ws.name)
				}
				promoted++
			}
		}
	}
	if out, err := e2ekit.GitCmd(t, dir, "fsck", "--strict", "--no-dangling"); err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("replica %d: git fsck --strict of every live ref: %v\n%s", i, err, out)
	}
	t.Logf("replica %d (%s): %d acknowledged commits and %d promotes checked", i, s.HostPort, checked, promoted)
}
