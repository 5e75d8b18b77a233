package client

import (
	"context"

	"github.com/lockstep-hq/lockstep/api"
)

// ReportRun sends how one `lockstep run` of workspace ws went (success or
// failure); the server keeps it as a run.report oplog entry and updates
// the run metrics. The caller must be able to move the workspace's refs.
func (c *Client) ReportRun(ctx context.Context, ws string, r api.RunReport) (*api.RunReportResult, error) {
	var out api.RunReportResult
	return &out, c.post(ctx, repoPath(ws, "runs"), r, &out)
}
