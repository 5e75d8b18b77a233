package web_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/internal/testenv"
	"github.com/lockstep-hq/lockstep/sqlstore"
	"github.com/lockstep-hq/lockstep/web"
)

// TestFollowedJobEndsWhenKeyRevoked: following a run job (POST /jobs, its event
// stream) checks the key again; once the key is revoked the stream ends,
// where it went on until the job ended.
func TestFollowedJobEndsWhenKeyRevoked(t *testing.T) {
	f := mustServerTweak(t, web.Config{RunJobQueueTimeout: time.Hour}, nil, func(s *web.Server, db *sqlstore.DB) { s.Jobs = db })
	ctx := context.Background()
	f.want(t, "POST", "/api/v1/repos", f.admin, `{"name":"app"}`, 201)
	f.want(t, "POST", "/api/v1/repos/app/forks", f.agent, `{"name":"ws"}`, 201)
	sub := f.want(t, "POST", "/api/v1/keys", f.agent, `{"name":"sub","role":"agent","ttl":"1h","scope":{"workspace":"ws"}}`, 201)
	if err := f.db.PutRunner(ctx, &lockstep.Runner{ID: "rnr_1", KeyID: "key_runner", Name: "box", Workspaces: []string{"*"}}); err != nil {
		t.Fatal(err)
	}
	// The job waits in the queue (no runner polls here) while its
	// creator follows it.
	req, _ := http.NewRequest("POST", f.srv.URL+"/api/v1/repos/ws/jobs", strings.NewReader(`{"command":["true"]}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+sub["secret"].(string))
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "event: job") {
		t.Fatalf("%d: first line %q (%v), want the job event", resp.StatusCode, line, err)
	}
	f.want(t, "DELETE", "/api/v1/keys/"+sub["id"].(string), f.agent, "", 204)
	done := make(chan error, 1)
	go func() { _, err := io.Copy(io.Discard, br); done <- err }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("stream ended with %v, want a clean end", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the job stream of a revoked key was still open 2 minutes after the revocation")
	}
}

// TestRunJobKeyDiesWithItsCreator: the key a runner gets for a job is
// minted by the key that created the job, so revoking that key (or a key
// above it) revokes the job's key too, and a job whose creator was revoked
// before a runner took it is failed, not handed out. The job's key was
// minted by the server itself and kept acting on the workspace (a push on
// success) after its creator was revoked.
func TestRunJobKeyDiesWithItsCreator(t *testing.T) {
	f := mustServerTweak(t, web.Config{RunJobQueueTimeout: time.Hour}, nil, func(s *web.Server, db *sqlstore.DB) { s.Jobs = db })
	ctx := context.Background()
	f.want(t, "POST", "/api/v1/repos", f.admin, `{"name":"app"}`, 201)
	f.want(t, "POST", "/api/v1/repos/app/forks", f.agent, `{"name":"ws"}`, 201)
	runner := f.want(t, "POST", "/api/v1/keys", f.admin, `{"name":"box","role":"runner"}`, 201)["secret"].(string)
	rid := f.want(t, "POST", "/api/v1/runners", runner, `{"name":"box","workspaces":["*"]}`, 200)["id"].(string)
	for i, revokeFirst := range []bool{false, true} {
		sub := f.want(t, "POST", "/api/v1/keys", f.agent, `{"name":"sub","role":"agent","ttl":"1h","scope":{"workspace":"ws"}}`, 201)
		job := &lockstep.RunJob{ID: "job_" + strings.Repeat(string(rune('a'+i)), 4), Workspace: "ws", KeyID: sub["id"].(string), Spec: lockstep.RunJobSpec{Command: []string{"true"}}}
		if err := f.db.CreateRunJob(ctx, job); err != nil {
			t.Fatal(err)
		}
		if revokeFirst {
			f.want(t, "DELETE", "/api/v1/keys/"+sub["id"].(string), f.agent, "", 204)
			code, m, _ := f.do(t, "POST", "/api/v1/runners/"+rid+"/jobs?wait=0", runner, "")
			if code != http.StatusNoContent {
				t.Fatalf("take after the creator's revocation: %d %v, want 204 (no job handed out)", code, m)
			}
			if j, err := f.db.RunJob(ctx, job.ID); err != nil || j.State != lockstep.JobFailed || !strings.Contains(j.Error, "revoked") {
				t.Fatalf("the job of a revoked creator: %+v, %v; want failed saying so", j, err)
			}
			continue
		}
		taken := f.want(t, "POST", "/api/v1/runners/"+rid+"/jobs?wait=0", runner, "", 200)
		jobKey := taken["key"].(string)
		f.want(t, "GET", "/api/v1/repos/ws/refs", jobKey, "", 200)
		f.want(t, "DELETE", "/api/v1/keys/"+sub["id"].(string), f.agent, "", 204)
		f.want(t, "GET", "/api/v1/repos/ws/refs", jobKey, "", 401)
	}
}

// TestRevokedRunnerTakesNoJob: a runner's long poll checks its key again
// before each claim, so a runner key revoked while its poll waits gets 401
// and no job (the poll claimed the next job and was handed a key for it).
func TestRevokedRunnerTakesNoJob(t *testing.T) {
	f := mustServerTweak(t, web.Config{RunJobQueueTimeout: time.Hour, RunnerPollWait: time.Minute}, nil, func(s *web.Server, db *sqlstore.DB) { s.Jobs = db })
	ctx := context.Background()
	f.want(t, "POST", "/api/v1/repos", f.admin, `{"name":"app"}`, 201)
	f.want(t, "POST", "/api/v1/repos/app/forks", f.agent, `{"name":"ws"}`, 201)
	rk := f.want(t, "POST", "/api/v1/keys", f.admin, `{"name":"box","role":"runner"}`, 201)
	runner := rk["secret"].(string)
	rid := f.want(t, "POST", "/api/v1/runners", runner, `{"name":"box","workspaces":["*"]}`, 200)["id"].(string)
	registered := time.Now()
	type answer struct {
		code int
		m    map[string]any
	}
	got := make(chan answer, 1)
	go func() {
		code, m, _ := f.do(t, "POST", "/api/v1/runners/"+rid+"/jobs?wait=60", runner, "")
		got <- answer{code, m}
	}()
	// The poll is waiting once it has touched the runner.
	for {
		rs, err := f.db.Runners(ctx, registered)
		if err != nil {
			t.Fatal(err)
		}
		if len(rs) == 1 && rs[0].LastSeen.After(registered) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	sub := f.want(t, "POST", "/api/v1/keys", f.agent, `{"name":"sub","role":"agent","ttl":"1h","scope":{"workspace":"ws"}}`, 201)["id"].(string)
	f.want(t, "DELETE", "/api/v1/keys/"+rk["id"].(string), f.admin, "", 204)
	if err := f.db.CreateRunJob(ctx, &lockstep.RunJob{ID: "job_late", Workspace: "ws", KeyID: sub, Spec: lockstep.RunJobSpec{Command: []string{"true"}}}); err != nil {
		t.Fatal(err)
	}
	a := <-got
	if a.code != http.StatusUnauthorized {
		t.Fatalf("the poll of a revoked runner key: %d %v, want 401", a.code, a.m)
	}
	if j, err := f.db.RunJob(ctx, "job_late"); err != nil || j.State != lockstep.JobQueued {
		t.Fatalf("job after the revoked runner's poll: %+v, %v; want still queued", j, err)
	}
}

// TestRunJobOutputNULOnPostgres: a command's output line holding a NUL
// byte (PostgreSQL's text refuses it) is stored with U+FFFD in its place;
// the runner's post failed with a 500 and the job lost its output.
func TestRunJobOutputNULOnPostgres(t *testing.T) {
	f := mustServerOn(t, testenv.MustPostgresDB(t), t.TempDir(), web.Config{RunJobQueueTimeout: time.Hour}, nil, func(s *web.Server, db *sqlstore.DB) { s.Jobs = db }, nil)
	ctx := context.Background()
	f.want(t, "POST", "/api/v1/repos", f.admin, `{"name":"app"}`, 201)
	f.want(t, "POST", "/api/v1/repos/app/forks", f.agent, `{"name":"ws"}`, 201)
	runner := f.want(t, "POST", "/api/v1/keys", f.admin, `{"name":"box","role":"runner"}`, 201)["secret"].(string)
	rid := f.want(t, "POST", "/api/v1/runners", runner, `{"name":"box","workspaces":["*"]}`, 200)["id"].(string)
	sub := f.want(t, "POST", "/api/v1/keys", f.agent, `{"name":"sub","role":"agent","ttl":"1h","scope":{"workspace":"ws"}}`, 201)["id"].(string)
	if err := f.db.CreateRunJob(ctx, &lockstep.RunJob{ID: "job_nul", Workspace: "ws", KeyID: sub, Spec: lockstep.RunJobSpec{Command: []string{"true"}}}); err != nil {
		t.Fatal(err)
	}
	f.want(t, "POST", "/api/v1/runners/"+rid+"/jobs?wait=0", runner, "", 200)
	f.want(t, "POST", "/api/v1/runners/"+rid+"/jobs/job_nul/output", runner, `{"lines":[{"stream":"stdout","text":"a\u0000b"}]}`, 200)
	got, err := f.db.RunJobOutput(ctx, "job_nul", 0, 0)
	if err != nil || len(got) != 1 || got[0].Text != "a\uFFFDb" {
		t.Fatalf("stored output: %+v, %v; want a\\uFFFDb", got, err)
	}
}
