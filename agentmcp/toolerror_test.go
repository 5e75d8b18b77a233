package agentmcp

import (
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lockstep-hq/lockstep"
)

// TestNotConfiguredIsFinal: issue 22 item 6. A feature the server does
// not have is a tool error telling the model not to retry, unlike an
// unavailable dependency.
func TestNotConfiguredIsFinal(t *testing.T) {
	text := func(err error) string {
		r := toolError(err)
		if !r.IsError {
			t.Fatalf("%v: not an error result", err)
		}
		return r.Content[0].(*mcp.TextContent).Text
	}
	nc := text(lockstep.Errorf(lockstep.ENOTCONFIGURED, "database branching is off"))
	if !strings.Contains(nc, "error not_configured") || !strings.Contains(nc, "do not retry") {
		t.Fatalf("not_configured: %q", nc)
	}
	if un := text(lockstep.Errorf(lockstep.EUNAVAILABLE, "down")); !strings.Contains(un, "retry the same call") {
		t.Fatalf("unavailable: %q", un)
	}
}
