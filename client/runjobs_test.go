package client_test

import (
	"bytes"
	"context"
	"sync"
	"testing"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/api"
	"github.com/lockstep-hq/lockstep/client"
)

// TestExecuteRun: the run-job methods against a real server, with a
// runner written with the client's runner methods: no runner → no_runner
// at once; a runner of other workspaces does not count; the job reaches
// the runner with a key scoped to the workspace, its output lines stream
// to ExecuteRun's callback in order, its result comes back; a runner key
// may do nothing else; the job can be read again (RunJob).
func TestExecuteRun(t *testing.T) {
	ctx := context.Background()
	s := mustServer(t)
	admin := mustClient(t, s, s.Admin)
	agent := mustClient(t, s, s.Agent)
	must[*client.Repo](t, "CreateRepo")(admin.CreateRepo(ctx, "base", "main"))
	must[*client.PushResult](t, "PushTar")(admin.PushTar(ctx, "base", bytes.NewReader(tarOf(t, map[string]string{"a.txt": "one\n"})), client.WriteOptions{Force: true}))
	must[*client.ForkResult](t, "Fork")(agent.Fork(ctx, "base", "ws1"))

	req := api.RunJobRequest{Command: []string{"make", "test"}, PushOnSuccess: true}
	_, err := agent.ExecuteRun(ctx, "ws1", req, nil)
	wantCode(t, "ExecuteRun without a runner", err, lockstep.ENORUNNER)

	created, err := admin.CreateKey(ctx, "box", lockstep.RoleRunner)
	if err != nil {
		t.Fatal(err)
	}
	runner := mustClient(t, s, created.Secret)
	_, err = runner.Repos(ctx)
	wantCode(t, "runner key listing repositories", err, lockstep.EFORBIDDEN)
	other := must[*api.RunnerInfo](t, "RegisterRunner")(runner.RegisterRunner(ctx, api.RunnerRegistration{Name: "docs-box", Workspaces: []string{"docs-"}}))
	if other.ID == "" || other.LeaseSeconds <= 0 {
		t.Fatalf("registration: %+v", other)
	}
	_, err = agent.ExecuteRun(ctx, "ws1", req, nil)
	wantCode(t, "ExecuteRun with a runner of other workspaces", err, lockstep.ENORUNNER)
	_, err = runner.RegisterRunner(ctx, api.RunnerRegistration{Name: "bad", Workspaces: nil})
	wantCode(t, "RegisterRunner without workspaces", err, lockstep.EINVALID)

	info := must[*api.RunnerInfo](t, "RegisterRunner")(runner.RegisterRunner(ctx, api.RunnerRegistration{Name: "box", Workspaces: []string{"ws"}}))
	var wg sync.WaitGroup
	wg.Add(1)
	var runnerErr error
	var sawKey bool
	var jobKey string
	go func() {
		defer wg.Done()
		var tj *api.TakenJob
		for tj == nil && runnerErr == nil {
			tj, runnerErr = runner.TakeRunJob(ctx, info.ID, 1)
		}
		if runnerErr != nil {
			return
		}
		// The job's key acts on the workspace, and only as its owner.
		jobKey = tj.Key
		jk := mustClient(t, s, tj.Key)
		if k, err := jk.Whoami(ctx); err == nil && k.Role == lockstep.RoleAgent && k.Scope != nil && k.Scope.Workspace == "ws1" {
			sawKey = true
		}
		for _, text := range []string{"building", "ok 1", "ok 2"} {
			if runnerErr = runner.PostRunJobOutput(ctx, info.ID, tj.Job.ID, []lockstep.RunJobLine{{Stream: "stdout", Text: text}}); runnerErr != nil {
				return
			}
		}
		runnerErr = runner.FinishRunJob(ctx, info.ID, tj.Job.ID, api.RunJobResult{CheckedOut: "c0ffee", Succeeded: true, PushedCommit: "beef"})
	}()
	var got []string
	job, err := agent.ExecuteRun(ctx, "ws1", req, func(l lockstep.RunJobLine) { got = append(got, l.Text) })
	wg.Wait()
	if runnerErr != nil {
		t.Fatalf("runner: %v", runnerErr)
	}
	if err != nil {
		t.Fatalf("ExecuteRun: %v", err)
	}
	if job.State != lockstep.JobDone || job.Result == nil || !job.Result.Succeeded || job.Result.PushedCommit != "beef" || job.RunnerID != info.ID {
		t.Fatalf("job: %+v", job)
	}
	if len(got) != 3 || got[0] != "building" || got[2] != "ok 2" {
		t.Fatalf("streamed lines: %q", got)
	}
	if !sawKey {
		t.Fatal("the job's key is not an agent key scoped to ws1")
	}
	again := must[*api.RunJob](t, "RunJob")(agent.RunJob(ctx, "ws1", job.ID, 1))
	if again.State != lockstep.JobDone || len(again.Output) != 2 || again.Output[0].Text != "ok 1" {
		t.Fatalf("RunJob after 1: %+v", again)
	}
	// The finished job is no longer the runner's.
	err = runner.PostRunJobOutput(ctx, info.ID, job.ID, nil)
	wantCode(t, "output after the end", err, lockstep.EREFCONFLICT)
	// Nor is its key anyone's: revoked when the result came in.
	_, err = mustClient(t, s, jobKey).Whoami(ctx)
	wantCode(t, "the job's key after the job ended", err, lockstep.EUNAUTH)
}
