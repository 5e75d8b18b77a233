package web_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/internal/testenv"
	"github.com/lockstep-hq/lockstep/sqlstore"
	"github.com/lockstep-hq/lockstep/web"
)

// pushTar PUTs a one-file tar to repo's branch as key and returns the
// status, the error envelope (nil on success) and the headers.
func pushTar(t *testing.T, f *fixture, key, repo, branch, body string) (int, http.Header) {
	t.Helper()
	req, _ := http.NewRequest("PUT", f.srv.URL+"/api/v1/repos/"+repo+"/worktree?branch="+branch+"&expect_oid="+lockstep.ZeroOID,
		strings.NewReader(string(oneFileTar(t, "f.txt", body))))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/x-tar")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header
}

// TestStorageQuotaPerKey: with --quota-storage-bytes a key's write is
// refused (429 rate_limited naming the limit, with Retry-After) once
// the successful writes into its active workspaces added that many
// bytes; whoami and the keys page show the count; an admin is not bound;
// abandoning the workspace takes its bytes off the count.
func TestStorageQuotaPerKey(t *testing.T) {
	f := mustServerWith(t, web.Config{QuotaStorageBytes: 1000}, nil)
	f.want(t, "POST", "/api/v1/repos", f.admin, `{"name":"app"}`, 201)
	f.want(t, "POST", "/api/v1/repos/app/forks", f.agent, `{"name":"ws"}`, 201)
	limits := func() map[string]any {
		l, _ := f.want(t, "GET", "/api/v1/whoami", f.agent, "", 200)["limits"].(map[string]any)
		return l
	}
	if l := limits(); l["storage_bytes"] != float64(1000) || l["storage_bytes_used"] != float64(0) {
		t.Fatalf("whoami limits before any write: %v", l)
	}
	// Random-looking content so the pack does not compress below 1000.
	var big strings.Builder
	for i := 0; big.Len() < 4000; i++ {
		big.WriteString(strings.Repeat(string(rune('a'+i*7%26)), i%13+1))
		big.WriteString(time.Duration(i * 7919).String())
	}
	if code, _ := pushTar(t, f, f.agent, "ws", "b1", big.String()); code != 201 {
		t.Fatalf("first push: %d", code)
	}
	used := limits()["storage_bytes_used"].(float64)
	if used < 1000 {
		t.Fatalf("storage_bytes_used after a push of 4000 bytes: %v, want at least 1000", used)
	}
	code, h := pushTar(t, f, f.agent, "ws", "b2", "small\n")
	status, m, _ := f.do(t, "POST", "/api/v1/repos/ws/objects", f.agent, "")
	if code != 429 || h.Get("Retry-After") == "" || status != 429 || errCode(m) != lockstep.ERATELIMITED ||
		!strings.Contains(errMessage(m), "storage quota") || !strings.Contains(errMessage(m), "quota-storage-bytes") {
		t.Fatalf("writes over the storage quota: push %d %v, objects %d %v; want 429 naming quota-storage-bytes with Retry-After", code, h, status, m)
	}
	// The keys page shows the count against the quota.
	page := f.page(t, "/ui/keys", f.admin)
	if !strings.Contains(page, "storage") || !strings.Contains(page, " / 1000<") {
		t.Fatalf("keys page lacks the storage quota column:\n%s", page)
	}
	// An admin writing into the workspace is not bound (and its bytes
	// count for the owner).
	if code, _ := pushTar(t, f, f.admin, "ws", "b3", "admin\n"); code != 201 {
		t.Fatalf("admin push: %d", code)
	}
	// Abandoning the workspace frees the key's storage.
	f.want(t, "DELETE", "/api/v1/repos/ws", f.agent, "", 200)
	if l := limits(); l["storage_bytes_used"] != float64(0) {
		t.Fatalf("storage after abandoning the workspace: %v", l)
	}
	f.want(t, "POST", "/api/v1/repos/app/forks", f.agent, `{"name":"ws2"}`, 201)
	if code, _ := pushTar(t, f, f.agent, "ws2", "b1", "again\n"); code != 201 {
		t.Fatalf("push after the workspace was abandoned: %d", code)
	}
}

// TestRunQuotaPerKey: with --quota-runs 1 a key with a queued run job is
// refused another (429 rate_limited naming quota-runs, Retry-After);
// whoami shows the count; once the job ends the count drops.
func TestRunQuotaPerKey(t *testing.T) {
	f := mustServerTweak(t, web.Config{QuotaRuns: 1}, nil, func(s *web.Server, db *sqlstore.DB) { s.Jobs = db })
	ctx := context.Background()
	f.want(t, "POST", "/api/v1/repos", f.admin, `{"name":"app"}`, 201)
	f.want(t, "POST", "/api/v1/repos/app/forks", f.agent, `{"name":"ws"}`, 201)
	who := f.want(t, "GET", "/api/v1/whoami", f.agent, "", 200)
	if l := who["limits"].(map[string]any); l["runs"] != float64(1) || l["runs_active"] != float64(0) {
		t.Fatalf("whoami limits before any job: %v", l)
	}
	if err := f.db.PutRunner(ctx, &lockstep.Runner{ID: "rnr_1", KeyID: "key_runner", Name: "box", Workspaces: []string{"*"}}); err != nil {
		t.Fatal(err)
	}
	// A job of the agent's waits in the queue (no runner polls here).
	job := &lockstep.RunJob{ID: "job_1", Workspace: "ws", KeyID: who["id"].(string), Spec: lockstep.RunJobSpec{Command: []string{"true"}}}
	if err := f.db.CreateRunJob(ctx, job); err != nil {
		t.Fatal(err)
	}
	if l := f.want(t, "GET", "/api/v1/whoami", f.agent, "", 200)["limits"].(map[string]any); l["runs_active"] != float64(1) {
		t.Fatalf("whoami limits with a queued job: %v", l)
	}
	status, m, h := f.do(t, "POST", "/api/v1/repos/ws/jobs", f.agent, `{"command":["make","test"]}`)
	if status != 429 || errCode(m) != lockstep.ERATELIMITED || h.Get("Retry-After") == "" ||
		!strings.Contains(errMessage(m), "run quota") || !strings.Contains(errMessage(m), "quota-runs") {
		t.Fatalf("a second job: %d %v %v; want 429 naming quota-runs with Retry-After", status, m, h)
	}
	page := f.page(t, "/ui/keys", f.admin)
	if !strings.Contains(page, `<td class="runs">1 / 1</td>`) {
		t.Fatalf("keys page lacks the agent's runs against its quota:\n%s", page)
	}
	if err := f.db.FinishRunJob(ctx, "job_1", "", nil, "cancelled by the test"); err != nil {
		t.Fatal(err)
	}
	if l := f.want(t, "GET", "/api/v1/whoami", f.agent, "", 200)["limits"].(map[string]any); l["runs_active"] != float64(0) {
		t.Fatalf("whoami limits after the job ended: %v", l)
	}
}

// page signs in to the UI with key as a browser does and returns the
// page at path (200 expected).
func (f *fixture) page(t *testing.T, path, key string) string {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(p string) (int, string) {
		resp, err := c.Get(f.srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	_, login := get("/ui/login")
	tok := csrfRE.FindStringSubmatch(login)
	if tok == nil {
		t.Fatalf("login form has no CSRF token: %s", login)
	}
	resp, err := c.PostForm(f.srv.URL+"/ui/login", url.Values{"csrf": {tok[1]}, "key": {key}, "next": {"/ui/"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	st, body := get(path)
	if st != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, st, body)
	}
	return body
}

// TestUsageReclaimableAndCheckpoints: the usage answer counts the
// network's checkpoints and says what the object GC would free: nothing
// now (the objects of a purged workspace are younger than the
// retention), its objects once past the retention.
func TestUsageReclaimableAndCheckpoints(t *testing.T) {
	f := mustServerWith(t, web.Config{}, nil)
	f.want(t, "POST", "/api/v1/repos", f.admin, `{"name":"app"}`, 201)
	f.want(t, "POST", "/api/v1/repos/app/forks", f.agent, `{"name":"ws"}`, 201)
	if code, _ := pushTar(t, f, f.agent, "ws", "main", "only in the workspace\n"); code != 201 {
		t.Fatalf("push: %d", code)
	}
	ws, err := f.db.RepoByName(context.Background(), "ws")
	if err != nil {
		t.Fatal(err)
	}
	// The fixture has no checkpoints service: the record alone.
	if err := f.db.CreateCheckpoint(context.Background(), &lockstep.Checkpoint{ID: "ckpt_1", RepoID: ws.ID, Repo: "ws", Branch: "main",
		Commit: lockstep.ZeroOID, Tree: lockstep.ZeroOID, Label: "one"}, nil, nil); err != nil {
		t.Fatal(err)
	}
	u := f.want(t, "GET", "/api/v1/repos/app/usage", f.admin, "", 200)
	if cp := u["checkpoints"].(map[string]any); cp["checkpoints"] != float64(1) || cp["database_snapshots"] != float64(0) {
		t.Fatalf("checkpoints in the usage: %v", u["checkpoints"])
	}
	if u["databases"] != nil || u["redis"] != nil {
		t.Fatalf("branch usage without branching configured: %v %v", u["databases"], u["redis"])
	}
	f.want(t, "DELETE", "/api/v1/repos/ws?purge=true", f.agent, "", 200)
	u = f.want(t, "GET", "/api/v1/repos/app/usage", f.admin, "", 200)
	rc, _ := u["reclaimable"].(map[string]any)
	if rc == nil || rc["retention"] != "336h0m0s" || rc["objects"] != float64(0) ||
		rc["after_retention_objects"].(float64) < 1 || rc["after_retention_bytes"].(float64) <= 0 {
		t.Fatalf("reclaimable after purging the workspace: %v; want nothing now, its objects after the retention", u["reclaimable"])
	}
	if cp := u["checkpoints"].(map[string]any); cp["checkpoints"] != float64(0) {
		t.Fatalf("checkpoints after the purge: %v", u["checkpoints"])
	}
}

// TestWorkspaceQuotaConcurrentForks: forks racing at a key's workspace
// quota stop at the quota. The check before the body is read let every
// request that arrived before the first commit through (20 at once, quota
// 3: up to 20 created); the fork's transaction now counts again.
//
// On SQLite one server; on PostgreSQL two replicas on one database, the
// racers alternating between them.
func TestWorkspaceQuotaConcurrentForks(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		f := mustServerWith(t, web.Config{QuotaWorkspaces: 3}, nil)
		racingForks(t, f, f)
	})
	t.Run("postgres", func(t *testing.T) {
		dsn, dir := testenv.MustPostgresDB(t), t.TempDir()
		f := mustServerOn(t, dsn, dir, web.Config{QuotaWorkspaces: 3}, nil, nil, nil)
		racingForks(t, f, mustServerOn(t, dsn, dir, web.Config{QuotaWorkspaces: 3}, nil, nil, f))
	})
}

func racingForks(t *testing.T, f, g *fixture) {
	f.want(t, "POST", "/api/v1/repos", f.admin, `{"name":"app"}`, 201)
	const racers = 20
	statuses, retry := raceAgent(t, f, g, racers, "/api/v1/repos/app/forks", func(i int) string { return fmt.Sprintf(`{"name":"r%d"}`, i) }, false)
	created := 0
	for i, st := range statuses {
		switch st {
		case http.StatusCreated:
			created++
		case http.StatusTooManyRequests:
			if retry[i] == "" {
				t.Errorf("fork %d: 429 without Retry-After", i)
			}
		default:
			t.Errorf("fork %d: status %d, want 201 or 429", i, st)
		}
	}
	n, err := f.db.CountOwnedWorkspaces(context.Background(), keyIDOf(t, f, f.agent))
	if err != nil {
		t.Fatal(err)
	}
	if created != 3 || n != 3 {
		t.Fatalf("%d racing forks at a quota of 3: %d created, the key owns %d active workspaces; want 3 and 3 (statuses %v)", racers, created, n, statuses)
	}
}

// raceAgent POSTs n bodies to path as f's agent key at once, alternating
// between f's server and g's, and returns each answer's status and
// Retry-After. stream asks for an event stream and drops it after the
// status (a run job's answer follows the job).
func raceAgent(t *testing.T, f, g *fixture, n int, path string, body func(i int) string, stream bool) (statuses []int, retry []string) {
	statuses, retry = make([]int, n), make([]string, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			srv := f.srv
			if i%2 == 1 {
				srv = g.srv
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+path, strings.NewReader(body(i)))
			req.Header.Set("Authorization", "Bearer "+f.agent)
			req.Header.Set("Content-Type", "application/json")
			if stream {
				req.Header.Set("Accept", "text/event-stream")
			}
			<-start
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			statuses[i], retry[i] = resp.StatusCode, resp.Header.Get("Retry-After")
			resp.Body.Close()
		}()
	}
	close(start)
	wg.Wait()
	return statuses, retry
}

// keyIDOf is the id of the key whose secret is key.
func keyIDOf(t *testing.T, f *fixture, key string) string {
	t.Helper()
	id, _ := f.want(t, "GET", "/api/v1/whoami", key, "", 200)["id"].(string)
	if id == "" {
		t.Fatal("whoami names no id")
	}
	return id
}

// TestRunQuotaConcurrentCreates: run jobs created at once stop at the run
// quota. The count before the create let every racer through (the count
// and the insert were two statements); the store now counts inside the
// create's transaction, under a per-key lock.
func TestRunQuotaConcurrentCreates(t *testing.T) {
	jobs := func(s *web.Server, db *sqlstore.DB) { s.Jobs = db }
	t.Run("sqlite", func(t *testing.T) {
		f := mustServerTweak(t, web.Config{QuotaRuns: 2}, nil, jobs)
		racingRuns(t, f, f)
	})
	t.Run("postgres", func(t *testing.T) {
		dsn, dir := testenv.MustPostgresDB(t), t.TempDir()
		f := mustServerOn(t, dsn, dir, web.Config{QuotaRuns: 2}, nil, jobs, nil)
		racingRuns(t, f, mustServerOn(t, dsn, dir, web.Config{QuotaRuns: 2}, nil, jobs, f))
	})
}

func racingRuns(t *testing.T, f, g *fixture) {
	ctx := context.Background()
	f.want(t, "POST", "/api/v1/repos", f.admin, `{"name":"app"}`, 201)
	f.want(t, "POST", "/api/v1/repos/app/forks", f.agent, `{"name":"ws"}`, 201)
	if err := f.db.PutRunner(ctx, &lockstep.Runner{ID: "rnr_1", KeyID: "key_runner", Name: "box", Workspaces: []string{"*"}}); err != nil {
		t.Fatal(err)
	}
	const racers = 40
	// Streamed: the answer's status comes at once (no runner takes the
	// job here).
	statuses, _ := raceAgent(t, f, g, racers, "/api/v1/repos/ws/jobs", func(int) string { return `{"command":["make","test"]}` }, true)
	ok := 0
	for i, st := range statuses {
		switch st {
		case http.StatusOK:
			ok++
		case http.StatusTooManyRequests:
		default:
			t.Errorf("run job %d: status %d, want 200 or 429", i, st)
		}
	}
	now := time.Now()
	n, err := f.db.CountActiveRunJobs(ctx, keyIDOf(t, f, f.agent), now.Add(-time.Hour), now)
	if err != nil {
		t.Fatal(err)
	}
	if ok != 2 || n != 2 {
		t.Fatalf("%d racing run jobs at a quota of 2: %d accepted, %d queued; want 2 and 2 (statuses %v)", racers, ok, n, statuses)
	}
}
