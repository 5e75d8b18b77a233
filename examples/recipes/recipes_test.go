// Package recipes runs the agent-framework recipes of this directory
// (README.md) against a real `lockstep serve`: each loads the real
// adapter from npm (installed with `npm ci` into a temp copy, once), lists
// the MCP tools and calls two of them, with no model. The tests skip only
// when node or npm is missing.
package recipes

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep/internal/e2ekit"
)

func TestMain(m *testing.M) {
	os.Exit(e2ekit.Main(m, e2ekit.Suite{Name: "recipes", Tools: []string{"git"}}))
}

// runRecipe starts a server with a repository holding README.md, runs the
// script with an agent key (what an agent platform would hold) and returns
// its output.
func runRecipe(t *testing.T, script string) string {
	t.Helper()
	dir := e2ekit.NPMPackage(t, ".")
	srv := e2ekit.StartServer(t, e2ekit.ServerOpts{})
	srv.CreateRepo(t, "demo")
	srv.Push(t, srv.AdminKey, "demo", "", map[string]string{"README.md": "recipe readme 42\n"})
	agent := srv.CreateKey(t, "recipe-agent", "agent")

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", filepath.Join(dir, script))
	cmd.Dir = dir
	cmd.Env = append(e2ekit.CleanEnv(), "LOCKSTEP_URL="+srv.URL, "LOCKSTEP_KEY="+agent.Secret, "LOCKSTEP_REPO=demo")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node %s: %v\n%s", script, err, out)
	}
	t.Logf("%s", out)
	return string(out)
}

func checkOutput(t *testing.T, out string) {
	t.Helper()
	lines := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(l, ": "); ok {
			lines[k] = v
		}
	}
	for _, tool := range []string{"repo_list", "file_read", "workspace_create", "file_write", "merge_preflight", "promote"} {
		if !strings.Contains(" "+lines["tools"]+" ", " "+tool+" ") {
			t.Errorf("the tool list lacks %s: %q", tool, lines["tools"])
		}
	}
	if !strings.Contains(lines["repo_list"], "demo") {
		t.Errorf("repo_list did not list the repository: %q", lines["repo_list"])
	}
	if !strings.Contains(lines["file_read"], "recipe readme 42") {
		t.Errorf("file_read did not return the file: %q", lines["file_read"])
	}
}

// TestOpenAIAgentsRecipe: @openai/agents' MCPServerStreamableHttp.
func TestOpenAIAgentsRecipe(t *testing.T) {
	checkOutput(t, runRecipe(t, "openai-agents.mjs"))
}

// TestLangChainRecipe: @langchain/mcp-adapters' MultiServerMCPClient.
func TestLangChainRecipe(t *testing.T) {
	checkOutput(t, runRecipe(t, "langchain.mjs"))
}
