package agentmcp

import (
	"context"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type effectStageIn struct {
	Workspace  string            `json:"workspace" jsonschema:"the workspace the effect belongs to"`
	Method     string            `json:"method" jsonschema:"POST, PUT, PATCH or DELETE"`
	URL        string            `json:"url" jsonschema:"the target URL (public, or allowed by the server's --effect-allow-hosts); its query is stored encrypted and shown with its values redacted (credentials belong in a header)"`
	Headers    map[string]string `json:"headers,omitempty" jsonschema:"request headers; Authorization, Cookie and X-Api-Key are stored encrypted and shown redacted"`
	Body       string            `json:"body,omitempty" jsonschema:"the request body (text)"`
	Label      string            `json:"label,omitempty" jsonschema:"a note for reviewers"`
	Class      string            `json:"class,omitempty" jsonschema:"a class such as payment; the gate may hold a class for a reviewer"`
	Consuming  bool              `json:"consuming,omitempty" jsonschema:"true when it spends something that does not come back (paid quota, messages to people)"`
	CompMethod string            `json:"compensate_method,omitempty" jsonschema:"method of the request that undoes it after release (e.g. DELETE)"`
	CompURL    string            `json:"compensate_url,omitempty" jsonschema:"URL of the request that undoes it"`
}

// registerEffects adds the effects outbox tools (effect_stage,
// effect_list).
func (t *tools) registerEffects(s *mcp.Server) {
	mcp.AddTool(s, &mcp.Tool{Name: "effect_stage", Description: "Stage an outward HTTP request (a webhook, an API call that changes something) on your workspace instead of sending it: " +
		"Lockstep sends it only when the workspace is promoted, exactly once (a stable Idempotency-Key). Restoring a checkpoint discards what was staged after it; a failed workspace discards everything staged."},
		func(ctx context.Context, req *mcp.CallToolRequest, in effectStageIn) (*mcp.CallToolResult, any, error) {
			body := map[string]any{"method": in.Method, "url": in.URL, "body": in.Body, "label": in.Label, "class": in.Class, "consuming": in.Consuming}
			if len(in.Headers) > 0 {
				body["headers"] = in.Headers
			}
			if in.CompMethod != "" || in.CompURL != "" {
				body["compensation"] = map[string]string{"method": in.CompMethod, "url": in.CompURL}
			}
			return t.call(ctx, req, http.MethodPost, repoPath(in.Workspace, "effects"), body)
		})
	mcp.AddTool(s, &mcp.Tool{Name: "effect_list", Description: "List a workspace's staged effects in staging order with their status (staged, held, releasing, released, failed, discarded) and delivery attempts.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, req *mcp.CallToolRequest, in workspaceIn) (*mcp.CallToolResult, any, error) {
			return t.call(ctx, req, http.MethodGet, repoPath(in.Workspace, "effects"), nil)
		})
}
