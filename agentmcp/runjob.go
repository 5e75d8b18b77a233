package agentmcp

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/api"
)

// runJobIn is run_command over HTTP: the command runs on a runner (a
// `lockstep runner --jobs` machine), not on the caller's machine.
type runJobIn struct {
	Workspace      string   `json:"workspace" jsonschema:"the workspace to run the command on (a fresh checkout of its tip)"`
	Command        []string `json:"command" jsonschema:"the command and its arguments, e.g. [\"make\", \"test\"]"`
	PushOnSuccess  bool     `json:"push_on_success,omitempty" jsonschema:"push the result when the command succeeds (compare-and-swap on the tip the runner checked out)"`
	TimeoutSeconds int      `json:"timeout_seconds,omitempty" jsonschema:"kill the command after this long (0: the server's run-job timeout)"`
}

// runJobSchema is run_command's output schema: the finished job.
func runJobSchema() *jsonschema.Schema { return outputSchema[api.RunJob]() }

// outputSchema is a tool's output schema inferred from the API type its
// structured content has; fields the server may add later are allowed.
func outputSchema[T any]() *jsonschema.Schema {
	s, err := jsonschema.For[T](nil)
	if err != nil {
		panic(fmt.Sprintf("output schema of %T: %v", *new(T), err)) // a static type: a bug if it fails
	}
	s.AdditionalProperties = nil
	return s
}

// registerRunJob adds run_command to a server without a local machine
// (the HTTP server at /mcp): it dispatches to a runner through POST
// /repos/{ws}/jobs, sends each output line as a progress notification
// (when the client asked for progress) and returns the job, with its
// result, as structured content.
func (t *tools) registerRunJob(s *mcp.Server) {
	mcp.AddTool(s, &mcp.Tool{Name: "run_command", OutputSchema: runJobSchema(), Description: "Run a command (e.g. the tests) on the workspace through a runner, as a transaction: " +
		"a fresh checkout of the workspace's tip is checkpointed, the command runs; if it fails everything is rolled back (the failed state kept as evidence); " +
		"if it succeeds and push_on_success is set, the result is pushed. Output lines arrive as progress notifications; returns exit code, rolled back, pushed commit and output tails. " +
		"Error no_runner: no runner serves this workspace (ask the operator to start `lockstep runner --jobs`)."},
		func(ctx context.Context, req *mcp.CallToolRequest, in runJobIn) (*mcp.CallToolResult, any, error) {
			c, err := t.client(ctx, req.Extra)
			if err != nil {
				return nil, nil, err
			}
			if len(in.Command) == 0 {
				return toolError(lockstep.Errorf(lockstep.EINVALID, "command: give the program and its arguments")), nil, nil
			}
			token := req.Params.GetProgressToken()
			n := 0
			onLine := func(l lockstep.RunJobLine) {
				if token == nil || req.Session == nil {
					return
				}
				n++
				_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token, Progress: float64(n), Message: l.Stream + ": " + l.Text})
			}
			job, err := c.ExecuteRun(ctx, in.Workspace, api.RunJobRequest{Command: in.Command, PushOnSuccess: in.PushOnSuccess, TimeoutSeconds: in.TimeoutSeconds}, onLine)
			if err != nil {
				return toolError(err), nil, nil
			}
			b, err := json.Marshal(job)
			if err != nil {
				return nil, nil, err
			}
			res := jsonResult(b)
			res.StructuredContent = nil // the SDK sets it from the job, checked against the output schema
			return res, job, nil
		})
}
