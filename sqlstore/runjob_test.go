package sqlstore_test

import (
	"context"
	"encoding/json"
	"io/fs"
	"path/filepath"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/internal/testenv"
	"github.com/lockstep-hq/lockstep/migrations"
)

// TestRunJobs: on both dialects, a runner registers (again: same id), takes
// only the jobs of workspaces it is given, one runner per job, appends
// output only while it holds the lease, and a lease that ends fails the
// job so that its result is refused.
func TestRunJobs(t *testing.T) {
	urls := map[string]func(t *testing.T) string{
		"sqlite":   func(t *testing.T) string { return filepath.Join(t.TempDir(), "meta.db") },
		"postgres": func(t *testing.T) string { return testenv.MustPostgresDB(t) },
	}
	for name, url := range urls {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			c := &clock{t: time.Date(2026, 12, 6, 4, 0, 0, 0, time.UTC)}
			db := openAt(t, url(t), c)
			r := &lockstep.Runner{ID: "rnr_1", KeyID: "key_r", Name: "box", Workspaces: []string{"shop-"}}
			if err := db.PutRunner(ctx, r); err != nil {
				t.Fatal(err)
			}
			again := &lockstep.Runner{ID: "rnr_2", KeyID: "key_r", Name: "box", Workspaces: []string{"shop-a"}}
			if err := db.PutRunner(ctx, again); err != nil || again.ID != "rnr_1" {
				t.Fatalf("re-register: id %s, err %v; want rnr_1", again.ID, err)
			}
			other := &lockstep.Runner{ID: "rnr_3", KeyID: "key_r", Name: "other", Workspaces: []string{"*"}}
			if err := db.PutRunner(ctx, other); err != nil {
				t.Fatal(err)
			}
			live, err := db.Runners(ctx, c.Now().Add(-time.Second))
			if err != nil || len(live) != 2 {
				t.Fatalf("runners: %d, %v; want 2", len(live), err)
			}
			for _, j := range []*lockstep.RunJob{{ID: "job_b", Workspace: "docs-b"}, {ID: "job_a", Workspace: "shop-a1"}} {
				j.KeyID, j.Spec = "key_agent", lockstep.RunJobSpec{Command: []string{"make", "test"}, PushOnSuccess: true}
				if err := db.CreateRunJob(ctx, j); err != nil {
					t.Fatal(err)
				}
				c.Set(c.Now().Add(time.Millisecond))
			}
			lease := c.Now().Add(30 * time.Second)
			j, err := db.ClaimRunJob(ctx, again, lease)
			if err != nil || j == nil || j.ID != "job_a" || j.State != lockstep.JobRunning || j.RunnerID != "rnr_1" || !j.Spec.PushOnSuccess {
				t.Fatalf("claim by shop-a runner: %+v, %v; want job_a running", j, err)
			}
			if j, err := db.ClaimRunJob(ctx, again, lease); err != nil || j != nil {
				t.Fatalf("second claim: %+v, %v; want none (docs-b is not its workspace)", j, err)
			}
			if j, err := db.ClaimRunJob(ctx, other, lease); err != nil || j == nil || j.ID != "job_b" {
				t.Fatalf("claim by * runner: %+v, %v; want job_b", j, err)
			}
			lines := []lockstep.RunJobLine{{Stream: "stdout", Text: "ok 1"}, {Stream: "stderr", Text: "warn"}}
			if err := db.AppendRunJobOutput(ctx, "job_a", "rnr_1", lines, lease, 0); err != nil {
				t.Fatal(err)
			}
			if err := db.AppendRunJobOutput(ctx, "job_a", "rnr_3", lines, lease, 0); lockstep.ErrorCode(err) != lockstep.EREFCONFLICT {
				t.Fatalf("output from another runner: %v; want ref_conflict", err)
			}
			got, err := db.RunJobOutput(ctx, "job_a", 1, 0)
			if err != nil || len(got) != 1 || got[0].Seq != 2 || got[0].Text != "warn" {
				t.Fatalf("output after 1: %+v, %v", got, err)
			}
			if err := db.FinishRunJob(ctx, "job_a", "rnr_1", json.RawMessage(`{"exit_code":0}`), ""); err != nil {
				t.Fatal(err)
			}
			if j, _ := db.RunJob(ctx, "job_a"); j.State != lockstep.JobDone || string(j.Result) != `{"exit_code":0}` {
				t.Fatalf("finished job: %+v", j)
			}
			// job_b's runner goes silent: its lease ends, the job fails, its
			// late result is refused.
			c.Set(lease.Add(time.Second))
			if n, err := db.ExpireRunJobs(ctx, c.Now()); err != nil || n != 1 {
				t.Fatalf("expire: %d, %v; want 1", n, err)
			}
			if j, _ := db.RunJob(ctx, "job_b"); j.State != lockstep.JobFailed || j.Error == "" {
				t.Fatalf("expired job: %+v", j)
			}
			if err := db.FinishRunJob(ctx, "job_b", "rnr_3", json.RawMessage(`{}`), ""); lockstep.ErrorCode(err) != lockstep.EREFCONFLICT {
				t.Fatalf("late result: %v; want ref_conflict", err)
			}
			if _, err := db.RunJob(ctx, "job_x"); lockstep.ErrorCode(err) != lockstep.ENOTFOUND {
				t.Fatalf("unknown job: %v", err)
			}
			// Minted job keys: only ended jobs' are listed, and a cleared one
			// (revoked) is not listed again.
			if err := db.SetRunJobKey(ctx, "job_a", "key_ja"); err != nil {
				t.Fatal(err)
			}
			if err := db.SetRunJobKey(ctx, "job_b", "key_jb"); err != nil {
				t.Fatal(err)
			}
			if err := db.SetRunJobKey(ctx, "job_x", "key_jx"); lockstep.ErrorCode(err) != lockstep.ENOTFOUND {
				t.Fatalf("key of an unknown job: %v; want not_found", err)
			}
			jobC := &lockstep.RunJob{ID: "job_c", Workspace: "shop-a2", KeyID: "key_agent", Spec: lockstep.RunJobSpec{Command: []string{"true"}}}
			if err := db.CreateRunJob(ctx, jobC); err != nil {
				t.Fatal(err)
			}
			if j, err := db.ClaimRunJob(ctx, again, c.Now().Add(time.Minute)); err != nil || j == nil || j.ID != "job_c" {
				t.Fatalf("claim job_c: %+v, %v", j, err)
			}
			if err := db.SetRunJobKey(ctx, "job_c", "key_jc"); err != nil {
				t.Fatal(err)
			}
			ks, err := db.EndedRunJobKeys(ctx, 10)
			if err != nil || len(ks) != 2 || ks[0] != (lockstep.RunJobKey{JobID: "job_a", KeyID: "key_ja"}) || ks[1].KeyID != "key_jb" {
				t.Fatalf("ended job keys: %+v, %v; want job_a's and job_b's, not the running job_c's", ks, err)
			}
			if err := db.ClearRunJobKey(ctx, "job_a", "key_ja"); err != nil {
				t.Fatal(err)
			}
			if ks, err := db.EndedRunJobKeys(ctx, 10); err != nil || len(ks) != 1 || ks[0].JobID != "job_b" {
				t.Fatalf("after clearing job_a's: %+v, %v", ks, err)
			}
		})
	}
}

// TestCountActiveRunJobs: on both dialects, a key's queued jobs (within
// the queue window) and running jobs (lease not ended) count; finished,
// expired, stale queued jobs and other keys' jobs do not.
func TestCountActiveRunJobs(t *testing.T) {
	urls := map[string]func(t *testing.T) string{
		"sqlite":   func(t *testing.T) string { return filepath.Join(t.TempDir(), "meta.db") },
		"postgres": func(t *testing.T) string { return testenv.MustPostgresDB(t) },
	}
	for name, url := range urls {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			c := &clock{t: time.Date(2026, 12, 6, 4, 0, 0, 0, time.UTC)}
			db := openAt(t, url(t), c)
			r := &lockstep.Runner{ID: "rnr_1", KeyID: "key_r", Name: "box", Workspaces: []string{"*"}}
			if err := db.PutRunner(ctx, r); err != nil {
				t.Fatal(err)
			}
			mk := func(id, key string) {
				t.Helper()
				j := &lockstep.RunJob{ID: id, Workspace: "shop-a", KeyID: key, Spec: lockstep.RunJobSpec{Command: []string{"true"}}}
				if err := db.CreateRunJob(ctx, j); err != nil {
					t.Fatal(err)
				}
				c.Set(c.Now().Add(time.Millisecond))
			}
			count := func(want int, why string) {
				t.Helper()
				n, err := db.CountActiveRunJobs(ctx, "key_a", c.Now().Add(-30*time.Second), c.Now())
				if err != nil || n != want {
					t.Fatalf("%s: %d active, %v; want %d", why, n, err, want)
				}
			}
			count(0, "no jobs")
			mk("job_stale", "key_a") // queued, then outlives the queue window
			c.Set(c.Now().Add(time.Minute))
			count(0, "a queued job older than the window")
			if err := db.FinishRunJob(ctx, "job_stale", "", nil, "no runner"); err != nil {
				t.Fatal(err)
			}
			mk("job_1", "key_a")
			mk("job_2", "key_a")
			mk("job_other", "key_b")
			count(2, "two queued")
			// The runner takes job_1 (the oldest queued job).
			lease := c.Now().Add(30 * time.Second)
			if j, err := db.ClaimRunJob(ctx, r, lease); err != nil || j == nil || j.ID != "job_1" {
				t.Fatalf("claim: %+v, %v; want job_1", j, err)
			}
			count(2, "one running, one queued")
			if err := db.FinishRunJob(ctx, "job_1", "rnr_1", json.RawMessage(`{"exit_code":0}`), ""); err != nil {
				t.Fatal(err)
			}
			count(1, "one done, one queued")
			if j, err := db.ClaimRunJob(ctx, r, lease); err != nil || j == nil || j.ID != "job_2" {
				t.Fatalf("claim: %+v, %v; want job_2", j, err)
			}
			count(1, "one running")
			c.Set(lease.Add(time.Second))
			count(0, "the running job's lease ended (its runner died)")
		})
	}
}

// TestRunJobOutputCut: on both dialects, a job's stored output stops at
// its byte limit: the post that crosses it keeps the lines that fit and
// one stderr line saying it was cut, later posts store nothing (they
// still renew the lease), and another job is not affected. Without the
// limit a command printing without end filled the metadata database.
func TestRunJobOutputCut(t *testing.T) {
	urls := map[string]func(t *testing.T) string{
		"sqlite":   func(t *testing.T) string { return filepath.Join(t.TempDir(), "meta.db") },
		"postgres": func(t *testing.T) string { return testenv.MustPostgresDB(t) },
	}
	for name, url := range urls {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			c := &clock{t: time.Date(2026, 12, 7, 1, 0, 0, 0, time.UTC)}
			db := openAt(t, url(t), c)
			r := &lockstep.Runner{ID: "rnr_1", KeyID: "key_r", Name: "box", Workspaces: []string{"*"}}
			if err := db.PutRunner(ctx, r); err != nil {
				t.Fatal(err)
			}
			for _, id := range []string{"job_a", "job_b"} {
				if err := db.CreateRunJob(ctx, &lockstep.RunJob{ID: id, Workspace: "ws-" + id, KeyID: "key_agent", Spec: lockstep.RunJobSpec{Command: []string{"yes"}}}); err != nil {
					t.Fatal(err)
				}
				c.Set(c.Now().Add(time.Millisecond))
				if j, err := db.ClaimRunJob(ctx, r, c.Now().Add(time.Minute)); err != nil || j == nil || j.ID != id {
					t.Fatalf("claim %s: %+v, %v", id, j, err)
				}
			}
			ten := []lockstep.RunJobLine{}
			for range 4 {
				ten = append(ten, lockstep.RunJobLine{Stream: "stdout", Text: "0123456789"})
			}
			const limit = 25
			for i := 0; i < 3; i++ {
				c.Set(c.Now().Add(time.Second))
				if err := db.AppendRunJobOutput(ctx, "job_a", "rnr_1", append([]lockstep.RunJobLine(nil), ten...), c.Now().Add(time.Minute), limit); err != nil {
					t.Fatalf("post %d: %v", i, err)
				}
			}
			got, err := db.RunJobOutput(ctx, "job_a", 0, 0)
			if err != nil || len(got) != 3 || got[0].Text != "0123456789" || got[1].Text != "0123456789" ||
				got[2].Stream != "stderr" || got[2].Text != lockstep.RunJobOutputCut(limit) || got[2].Seq != 3 {
				t.Fatalf("job_a's output: %+v, %v; want two lines of 10 bytes and the cut line", got, err)
			}
			if j, err := db.RunJob(ctx, "job_a"); err != nil || j.LeaseUntil == nil || !j.LeaseUntil.Equal(c.Now().Add(time.Minute)) {
				t.Fatalf("job_a after its cut output: %+v, %v; want its lease renewed by the last post", j, err)
			}
			if err := db.AppendRunJobOutput(ctx, "job_b", "rnr_1", append([]lockstep.RunJobLine(nil), ten[:2]...), c.Now().Add(time.Minute), limit); err != nil {
				t.Fatal(err)
			}
			if got, err := db.RunJobOutput(ctx, "job_b", 0, 0); err != nil || len(got) != 2 {
				t.Fatalf("job_b's output: %+v, %v; want its 2 lines", got, err)
			}
			// Migration 0033 goes down and up again (the count starts over).
			files, err := migrations.FS(db.Dialect())
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range []string{"0033_run_job_output_bytes.down.sql", "0033_run_job_output_bytes.up.sql"} {
				b, err := fs.ReadFile(files, f)
				if err == nil {
					_, err = db.SQL().ExecContext(ctx, string(b))
				}
				if err != nil {
					t.Fatalf("%s: %v", f, err)
				}
			}
			if err := db.AppendRunJobOutput(ctx, "job_b", "rnr_1", append([]lockstep.RunJobLine(nil), ten[:2]...), c.Now().Add(time.Minute), limit); err != nil {
				t.Fatal(err)
			}
			if got, err := db.RunJobOutput(ctx, "job_b", 0, 0); err != nil || len(got) != 4 {
				t.Fatalf("job_b's output after 0033 down and up: %d lines, %v; want 4", len(got), err)
			}
		})
	}
}
