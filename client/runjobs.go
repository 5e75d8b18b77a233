package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/api"
)

// Run jobs (README "Running code from an agent: runners"). None of these
// calls carries an Idempotency-Key: a job is created once per call (a
// retry could run the command twice) and a runner's calls are its own
// protocol.

func (c *Client) noIdem() *Client {
	cc := *c
	cc.NoIdempotencyKeys = true
	return &cc
}

// ExecuteRun runs req.Command on a runner, as a transactional run on a
// fresh checkout of the workspace's tip, and returns the finished job.
// onLine (may be nil) gets each output line as it arrives (server-sent
// events). Errors: no_runner (409) when no live runner takes the
// workspace; a job that ends failed (no runner took it in time, its
// runner died) is returned with an unavailable error naming why.
func (c *Client) ExecuteRun(ctx context.Context, ws string, req api.RunJobRequest, onLine func(lockstep.RunJobLine)) (*api.RunJob, error) {
	var job *api.RunJob
	var perr error
	sw := &sseWriter{on: func(event string, data []byte) {
		switch event {
		case "job", "result":
			var j api.RunJob
			if err := json.Unmarshal(data, &j); err != nil {
				perr = fmt.Errorf("decode %s event: %w", event, err)
				return
			}
			job = &j
		case "output":
			var l lockstep.RunJobLine
			if err := json.Unmarshal(data, &l); err == nil && onLine != nil {
				onLine(l)
			}
		}
	}}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	cc := c.noIdem()
	cc.HTTP = withAccept(c.HTTP, "text/event-stream")
	if _, err := cc.Request(ctx, http.MethodPost, repoPath(ws, "jobs"), nil, bytes.NewReader(body), "application/json", sw); err != nil {
		return job, err
	}
	sw.flush()
	if perr != nil {
		return job, perr
	}
	if job == nil || (job.State != lockstep.JobDone && job.State != lockstep.JobFailed) {
		return job, lockstep.Errorf(lockstep.EUNAVAILABLE, "the job's stream ended before its result (the server went away?): GET %s shows it", repoPath(ws, "jobs", jobID(job)))
	}
	if job.State == lockstep.JobFailed {
		return job, lockstep.Errorf(lockstep.EUNAVAILABLE, "run job %s failed: %s", job.ID, job.Error)
	}
	return job, nil
}

func jobID(j *api.RunJob) string {
	if j == nil {
		return "{id}"
	}
	return j.ID
}

// RunJob returns a job with its output lines after seq after.
func (c *Client) RunJob(ctx context.Context, ws, id string, after int64) (*api.RunJob, error) {
	var out api.RunJob
	q := url.Values{}
	if after > 0 {
		q.Set("after", fmt.Sprint(after))
	}
	return &out, c.get(ctx, repoPath(ws, "jobs", url.PathEscape(id)), q, &out)
}

// RegisterRunner registers (or re-registers) a runner (runner key).
func (c *Client) RegisterRunner(ctx context.Context, r api.RunnerRegistration) (*api.RunnerInfo, error) {
	var out api.RunnerInfo
	return &out, c.noIdem().post(ctx, "/api/v1/runners", r, &out)
}

// TakeRunJob waits up to wait seconds for a job; nil when none came.
func (c *Client) TakeRunJob(ctx context.Context, runnerID string, waitSeconds float64) (*api.TakenJob, error) {
	var raw []byte
	q := url.Values{"wait": {fmt.Sprint(waitSeconds)}}
	resp, err := c.noIdem().Request(ctx, http.MethodPost, "/api/v1/runners/"+url.PathEscape(runnerID)+"/jobs", q, nil, "", &raw)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode == http.StatusNoContent || len(bytes.TrimSpace(raw)) == 0 {
		return nil, nil
	}
	var out api.TakenJob
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, fmt.Errorf("decode the taken job: %w", err)
	}
	return &out, nil
}

// PostRunJobOutput sends output lines (none: only renews the lease).
// ref_conflict means the job is no longer this runner's: stop it.
func (c *Client) PostRunJobOutput(ctx context.Context, runnerID, jobID string, lines []lockstep.RunJobLine) error {
	if lines == nil {
		lines = []lockstep.RunJobLine{}
	}
	return c.noIdem().post(ctx, "/api/v1/runners/"+url.PathEscape(runnerID)+"/jobs/"+url.PathEscape(jobID)+"/output", api.RunJobOutput{Lines: lines}, nil)
}

// FinishRunJob posts a job's result.
func (c *Client) FinishRunJob(ctx context.Context, runnerID, jobID string, res api.RunJobResult) error {
	return c.noIdem().post(ctx, "/api/v1/runners/"+url.PathEscape(runnerID)+"/jobs/"+url.PathEscape(jobID)+"/result", res, nil)
}

// withAccept returns an HTTP client sending Accept: accept.
func withAccept(h *http.Client, accept string) *http.Client {
	if h == nil {
		h = http.DefaultClient
	}
	hc := *h
	base := hc.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	hc.Transport = acceptTransport{base: base, accept: accept}
	return &hc
}

type acceptTransport struct {
	base   http.RoundTripper
	accept string
}

func (t acceptTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Accept", t.accept)
	return t.base.RoundTrip(r)
}

// sseWriter parses server-sent events as they are written to it.
type sseWriter struct {
	buf   []byte
	event string
	data  []string
	on    func(event string, data []byte)
}

func (w *sseWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		line := strings.TrimSuffix(string(w.buf[:i]), "\r")
		w.buf = w.buf[i+1:]
		w.line(line)
	}
}

func (w *sseWriter) line(line string) {
	switch {
	case line == "":
		if len(w.data) > 0 {
			w.on(orMessage(w.event), []byte(strings.Join(w.data, "\n")))
		}
		w.event, w.data = "", nil
	case strings.HasPrefix(line, ":"):
	case strings.HasPrefix(line, "event:"):
		w.event = strings.TrimSpace(line[len("event:"):])
	case strings.HasPrefix(line, "data:"):
		w.data = append(w.data, strings.TrimPrefix(line[len("data:"):], " "))
	}
}

func (w *sseWriter) flush() {
	if len(w.buf) > 0 {
		sc := bufio.NewScanner(bytes.NewReader(w.buf))
		for sc.Scan() {
			w.line(sc.Text())
		}
		w.buf = nil
	}
	w.line("")
}

func orMessage(e string) string {
	if e == "" {
		return "message"
	}
	return e
}

var _ io.Writer = (*sseWriter)(nil)
