package e2e

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockstep-hq/lockstep/internal/e2ekit"
)

// TestBadTreesRefusedOverHTTP: the content rules of a tar upload hold on
// the routes a served binary offers for the same tree — POST edits, the
// MCP file_write and files_edit tools, PUT worktree and git push — with
// 400 invalid_argument (an MCP tool error; git's refusal line) and no ref
// moved. (repositories' TestEveryWritePathRefusesBadTrees enumerates the
// service's write paths; this is their HTTP face.)
func TestBadTreesRefusedOverHTTP(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOpts{})
	s.CreateRepo(t, "bt")
	s.Push(t, s.AdminKey, "bt", zeroOID, map[string]string{"a.txt": "a\n"})
	agent := s.CreateKey(t, "agent", "agent")
	s.fork(t, agent.Secret, "bt", "bt-ws")
	cs := mcpHTTP(t, s.Server, agent.Secret)

	bad := []struct{ name, path, content string }{
		{"gitmodules url", ".gitmodules", "[submodule \"x\"]\n\tpath = x\n\turl = -oProxyCommand=touch /tmp/pwned\n"},
		{"gitmodules update", ".gitmodules", "[submodule \"x\"]\n\tpath = x\n\turl = https://example.com/x.git\n\tupdate = !sh -c id\n"},
		{"gitattributes", ".gitattributes", strings.Repeat("a", 3000) + " text\n"},
		{"long name", strings.Repeat("n", 256) + "/f.txt", "x\n"},
	}
	for _, b := range bad {
		head, wsHead := s.Head(t, "bt"), s.Head(t, "bt-ws")
		e2ekit.WantError(t, s.Call(t, "POST", "/api/v1/repos/bt/edits", s.AdminKey, map[string]any{"force": true,
			"edits": []map[string]any{{"op": "write", "path": b.path, "content": b.content}}}, "application/json"), http.StatusBadRequest, "invalid_argument")
		e2ekit.WantError(t, s.PushRaw(t, s.AdminKey, "bt", e2ekit.PushQuery("main", "", "force", "true"),
			e2ekit.TarOf(t, map[string]string{"a.txt": "a\n", b.path: b.content})), http.StatusBadRequest, "invalid_argument")
		mustToolError(t, cs, "file_write", map[string]any{"workspace": "bt-ws", "path": b.path, "content": b.content, "expect_oid": wsHead}, "invalid_argument")
		mustToolError(t, cs, "files_edit", map[string]any{"workspace": "bt-ws", "force": true,
			"edits": []map[string]any{{"op": "write", "path": b.path, "content": b.content}}}, "invalid_argument")
		if got := s.Head(t, "bt"); got != head {
			t.Errorf("%s: bt's main moved from %s to %s", b.name, head, got)
		}
		if got := s.Head(t, "bt-ws"); got != wsHead {
			t.Errorf("%s: bt-ws's main moved from %s to %s", b.name, wsHead, got)
		}
	}

	// git push of a commit with a .gitmodules git fsck refuses: git
	// prints the refusal, nothing moves.
	head := s.Head(t, "bt")
	dir := s.clone(t, "bt", s.AdminKey)
	writeFile(t, filepath.Join(dir, ".gitmodules"), bad[0].content)
	e2ekit.Git(t, dir, "add", ".gitmodules")
	e2ekit.Git(t, dir, "commit", "-q", "-m", "bad submodule")
	out, err := e2ekit.GitCmd(t, dir, "push", "origin", "main")
	if err == nil {
		t.Fatalf("git push of a bad .gitmodules succeeded:\n%s", out)
	}
	if !strings.Contains(out, "disallowed submodule url") || !strings.Contains(out, "[remote rejected] main -> main") {
		t.Errorf("git push of a bad .gitmodules: git printed\n%s\nwant the reason and a [remote rejected] line", out)
	}
	if got := s.Head(t, "bt"); got != head {
		t.Errorf("git push: bt's main moved from %s to %s", head, got)
	}
}
