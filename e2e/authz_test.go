package e2e

import (
	"archive/tar"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/lockstep-hq/lockstep/internal/e2ekit"
)

// authzWorld is one server with a base repository and two agents: A is
// the attacker, B owns the workspaces under attack.
type authzWorld struct {
	*server
	a, b e2ekit.Key
	n    int
}

func newAuthzWorld(t *testing.T) *authzWorld {
	s := startGateServer(t, serverOpts{})
	s.CreateRepo(t, "shop")
	s.push(t, s.AdminKey, "shop", zeroOID, map[string]string{"README": "shop\n"})
	return &authzWorld{server: s, a: s.CreateKey(t, "agent-a", "agent"), b: s.CreateKey(t, "agent-b", "agent")}
}

// workspace forks a fresh workspace of base with key and pushes one
// commit to it; returns its name and tip.
func (w *authzWorld) workspace(t *testing.T, key, base string) (string, string) {
	t.Helper()
	w.n++
	name := fmt.Sprintf("ws-%d", w.n)
	tip := w.forkTip(t, key, base, name)
	p := w.push(t, key, name, tip, map[string]string{"README": "shop\n", "work-" + name: "x\n"})
	return name, p.Commit
}

// unchanged requires that repo's refs are exactly before.
func (w *authzWorld) unchanged(t *testing.T, repo string, before map[string]string) {
	t.Helper()
	after := w.Refs(t, w.AdminKey, repo)
	if len(after) != len(before) {
		t.Fatalf("%s refs changed: %v → %v", repo, before, after)
	}
	for k, v := range before {
		if after[k] != v {
			t.Fatalf("%s %s moved: %s → %s", repo, k, v, after[k])
		}
	}
}

func (w *authzWorld) abandon(t *testing.T, key, ws string) {
	t.Helper()
	w.MustJSON(t, "DELETE", "/api/v1/repos/"+ws, key, nil, http.StatusOK, nil)
}

// TestNoLandingInAnotherAgentsWorkspace is issue 9 item 2: for every
// route that moves a ref, directly or indirectly, agent A cannot move a
// ref of agent B's workspace, and nobody moves the refs of an abandoned or
// promoted workspace.
func TestNoLandingInAnotherAgentsWorkspace(t *testing.T) {
	t.Parallel()
	w := newAuthzWorld(t)

	t.Run("promote into another agent's workspace", func(t *testing.T) {
		wsB, _ := w.workspace(t, w.b.Secret, "shop")
		before := w.Refs(t, w.AdminKey, wsB)
		// A forks B's workspace, pushes to the fork and promotes it: the
		// landing would go into wsB.
		wsA, _ := w.workspace(t, w.a.Secret, wsB)
		e2ekit.RequireError(t, "A promotes into B's workspace", w.Call(t, "POST", "/api/v1/repos/"+wsA+"/promote", w.a.Secret, map[string]any{}, ""), 403, "permission_denied")
		w.unchanged(t, wsB, before)
		// B may land its own fork of its own workspace.
		wsB2, tip := w.workspace(t, w.b.Secret, wsB)
		if res := w.promote(t, w.b.Secret, wsB2); res.Commit != tip {
			t.Fatalf("B's own promote landed %s, want %s", res.Commit, tip)
		}
	})

	t.Run("promote into an abandoned workspace", func(t *testing.T) {
		wsB, _ := w.workspace(t, w.b.Secret, "shop")
		wsB2, _ := w.workspace(t, w.b.Secret, wsB)
		w.abandon(t, w.b.Secret, wsB)
		before := w.Refs(t, w.AdminKey, wsB)
		e2ekit.RequireError(t, "promote into abandoned", w.Call(t, "POST", "/api/v1/repos/"+wsB2+"/promote", w.b.Secret, map[string]any{}, ""), 400, "invalid_argument")
		e2ekit.RequireError(t, "admin promote into abandoned", w.Call(t, "POST", "/api/v1/repos/"+wsB2+"/promote", w.AdminKey, map[string]any{}, ""), 400, "invalid_argument")
		w.unchanged(t, wsB, before)
	})

	t.Run("promote into a promoted workspace", func(t *testing.T) {
		wsB, _ := w.workspace(t, w.b.Secret, "shop")
		wsB2, _ := w.workspace(t, w.b.Secret, wsB)
		w.promote(t, w.b.Secret, wsB)
		before := w.Refs(t, w.AdminKey, wsB)
		e2ekit.RequireError(t, "promote into promoted", w.Call(t, "POST", "/api/v1/repos/"+wsB2+"/promote", w.b.Secret, map[string]any{}, ""), 400, "invalid_argument")
		w.unchanged(t, wsB, before)
	})

	t.Run("PUT worktree", func(t *testing.T) {
		wsB, tip := w.workspace(t, w.b.Secret, "shop")
		before := w.Refs(t, w.AdminKey, wsB)
		tarball := e2ekit.TarOf(t, map[string]string{"evil": "x\n"})
		e2ekit.RequireError(t, "A pushes to B", w.PushRaw(t, w.a.Secret, wsB, e2ekit.PushQuery("", tip), tarball), 403, "permission_denied")
		w.abandon(t, w.b.Secret, wsB)
		e2ekit.RequireError(t, "push to abandoned", w.PushRaw(t, w.b.Secret, wsB, e2ekit.PushQuery("", tip), tarball), 400, "invalid_argument")
		w.unchanged(t, wsB, before)
	})

	t.Run("PUT worktree racing an abandon", func(t *testing.T) {
		// The push passed its checks and is reading a large body when the
		// workspace is abandoned: the ref must not move afterwards.
		wsB, tip := w.workspace(t, w.b.Secret, "shop")
		before := w.Refs(t, w.AdminKey, wsB)
		const size = 32 << 20
		pr, pw := io.Pipe()
		done := make(chan *e2ekit.Response, 1)
		go func() {
			r, err := w.Try("PUT", "/api/v1/repos/"+wsB+"/worktree"+e2ekit.PushQuery("", tip), w.b.Secret, pr, "application/x-tar")
			if err != nil {
				r = &e2ekit.Response{Status: -1, Body: []byte(err.Error())}
			}
			pr.CloseWithError(io.ErrClosedPipe)
			done <- r
		}()
		tw := tar.NewWriter(pw)
		if err := tw.WriteHeader(&tar.Header{Name: "big", Mode: 0o644, Size: size, Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		zeros := make([]byte, 1<<20)
		// 24 MiB written through the pipe: more than every socket buffer
		// between us holds, so the server has read part of the body and
		// therefore passed its permission and expect_oid checks.
		for i := 0; i < 24; i++ {
			if _, err := tw.Write(zeros); err != nil {
				t.Fatalf("body write: %v (%s)", err, <-done)
			}
		}
		w.abandon(t, w.b.Secret, wsB)
		for i := 24; i < size>>20; i++ {
			if _, err := tw.Write(zeros); err != nil {
				t.Fatalf("body write: %v (%s)", err, <-done)
			}
		}
		tw.Close()
		pw.Close()
		r := <-done
		e2ekit.RequireError(t, "push finishing after the abandon", r, 400, "invalid_argument")
		w.unchanged(t, wsB, before)
	})

	t.Run("objects push", func(t *testing.T) {
		wsB, _ := w.workspace(t, w.b.Secret, "shop")
		e2ekit.RequireError(t, "A uploads into B", w.Call(t, "POST", "/api/v1/repos/"+wsB+"/objects", w.a.Secret, []byte("PACK"), "application/x-git-packed-objects"), 403, "permission_denied")
		w.abandon(t, w.b.Secret, wsB)
		e2ekit.RequireError(t, "upload into abandoned", w.Call(t, "POST", "/api/v1/repos/"+wsB+"/objects", w.b.Secret, []byte("PACK"), "application/x-git-packed-objects"), 400, "invalid_argument")
	})

	t.Run("git receive-pack", func(t *testing.T) {
		wsB, _ := w.workspace(t, w.b.Secret, "shop")
		before := w.Refs(t, w.AdminKey, wsB)
		dir := filepath.Join(t.TempDir(), "clone")
		e2ekit.Git(t, "", "clone", "-q", w.GitURL(wsB, w.a.Secret), dir) // reading is allowed
		if err := os.WriteFile(filepath.Join(dir, "evil"), []byte("x\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		e2ekit.Git(t, dir, "add", "evil")
		e2ekit.Git(t, dir, "commit", "-q", "-m", "evil")
		if out, err := e2ekit.GitRun(dir, "", "push", "-q", "origin", "HEAD:main"); err == nil {
			t.Fatalf("A git-pushed into B's workspace:\n%s", out)
		}
		w.abandon(t, w.b.Secret, wsB)
		e2ekit.Git(t, dir, "remote", "set-url", "origin", w.GitURL(wsB, w.b.Secret))
		if out, err := e2ekit.GitRun(dir, "", "push", "-q", "origin", "HEAD:main"); err == nil {
			t.Fatalf("git push into an abandoned workspace:\n%s", out)
		}
		w.unchanged(t, wsB, before)
	})

	t.Run("rollback", func(t *testing.T) {
		wsB, tip := w.workspace(t, w.b.Secret, "shop")
		before := w.Refs(t, w.AdminKey, wsB)
		body := map[string]any{"to": "shop:main", "expect_oid": tip}
		e2ekit.RequireError(t, "A rolls back B", w.Call(t, "POST", "/api/v1/repos/"+wsB+"/rollback", w.a.Secret, body, ""), 403, "permission_denied")
		w.abandon(t, w.b.Secret, wsB)
		e2ekit.RequireError(t, "rollback of abandoned", w.Call(t, "POST", "/api/v1/repos/"+wsB+"/rollback", w.b.Secret, body, ""), 400, "invalid_argument")
		w.unchanged(t, wsB, before)
	})

	t.Run("merge materialize", func(t *testing.T) {
		wsB, tip := w.workspace(t, w.b.Secret, "shop")
		wsA, _ := w.workspace(t, w.a.Secret, "shop")
		before := w.Refs(t, w.AdminKey, wsB)
		body := map[string]any{"theirs": wsA + ":main", "materialize": true, "expect_oid": tip}
		e2ekit.RequireError(t, "A merges into B", w.Call(t, "POST", "/api/v1/repos/"+wsB+"/merges", w.a.Secret, body, ""), 403, "permission_denied")
		// A preflight writes nothing and stays open to every key.
		w.MustJSON(t, "POST", "/api/v1/repos/"+wsB+"/merges", w.a.Secret, map[string]any{"theirs": wsA + ":main", "preflight": true}, http.StatusOK, nil)
		w.abandon(t, w.b.Secret, wsB)
		e2ekit.RequireError(t, "merge into abandoned", w.Call(t, "POST", "/api/v1/repos/"+wsB+"/merges", w.b.Secret, body, ""), 400, "invalid_argument")
		w.unchanged(t, wsB, before)
	})

	t.Run("sync", func(t *testing.T) {
		wsB, _ := w.workspace(t, w.b.Secret, "shop")
		w.push(t, w.AdminKey, "shop", w.Head(t, "shop"), map[string]string{"README": "shop\n", "news": "y\n"})
		before := w.Refs(t, w.AdminKey, wsB)
		e2ekit.RequireError(t, "A syncs B", w.Call(t, "POST", "/api/v1/repos/"+wsB+"/sync", w.a.Secret, map[string]any{}, ""), 403, "permission_denied")
		w.abandon(t, w.b.Secret, wsB)
		e2ekit.RequireError(t, "sync of abandoned", w.Call(t, "POST", "/api/v1/repos/"+wsB+"/sync", w.b.Secret, map[string]any{}, ""), 400, "invalid_argument")
		w.unchanged(t, wsB, before)
	})

	t.Run("checkpoint restore", func(t *testing.T) {
		wsB, _ := w.workspace(t, w.b.Secret, "shop")
		var cp struct {
			ID string `json:"id"`
		}
		w.MustJSON(t, "POST", "/api/v1/repos/"+wsB+"/checkpoints", w.b.Secret, map[string]any{"label": "b"}, http.StatusCreated, &cp)
		e2ekit.RequireError(t, "A restores B", w.Call(t, "POST", "/api/v1/repos/"+wsB+"/checkpoints/"+cp.ID+"/restore", w.a.Secret, map[string]any{}, ""), 403, "permission_denied")
		w.promote(t, w.b.Secret, wsB)
		before := w.Refs(t, w.AdminKey, wsB)
		// The branch still has the checkpoint's tree: no ref would move,
		// but a restore (of code and database) is still refused.
		e2ekit.RequireError(t, "restore of promoted", w.Call(t, "POST", "/api/v1/repos/"+wsB+"/checkpoints/"+cp.ID+"/restore", w.b.Secret, map[string]any{}, ""), 400, "invalid_argument")
		w.unchanged(t, wsB, before)
	})

	t.Run("status changes", func(t *testing.T) {
		wsB, _ := w.workspace(t, w.b.Secret, "shop")
		e2ekit.RequireError(t, "A abandons B", w.Call(t, "DELETE", "/api/v1/repos/"+wsB, w.a.Secret, nil, ""), 403, "permission_denied")
		e2ekit.RequireError(t, "A reopens B", w.Call(t, "POST", "/api/v1/repos/"+wsB+"/status", w.a.Secret, map[string]any{"status": "active"}, ""), 403, "permission_denied")
		w.abandon(t, w.b.Secret, wsB)
		// Abandoned is final: reopening it would let its refs move again.
		e2ekit.RequireError(t, "admin reopens abandoned", w.Call(t, "POST", "/api/v1/repos/"+wsB+"/status", w.AdminKey, map[string]any{"status": "active"}, ""), 400, "invalid_argument")
		wsP, _ := w.workspace(t, w.b.Secret, "shop")
		w.promote(t, w.b.Secret, wsP)
		e2ekit.RequireError(t, "admin reopens promoted", w.Call(t, "POST", "/api/v1/repos/"+wsP+"/status", w.AdminKey, map[string]any{"status": "active"}, ""), 400, "invalid_argument")
	})

	t.Run("database bind and refresh", func(t *testing.T) {
		// Branching is off here: the permission check still comes first.
		e2ekit.RequireError(t, "agent binds", w.Call(t, "PUT", "/api/v1/repos/shop/database", w.a.Secret, map[string]any{"template": "x"}, ""), 403, "permission_denied")
		e2ekit.RequireError(t, "agent refreshes", w.Call(t, "POST", "/api/v1/repos/shop/database/refresh", w.a.Secret, nil, ""), 403, "permission_denied")
		e2ekit.RequireError(t, "admin binds", w.Call(t, "PUT", "/api/v1/repos/shop/database", w.AdminKey, map[string]any{"template": "x"}, ""), 501, "not_configured")
	})
}
