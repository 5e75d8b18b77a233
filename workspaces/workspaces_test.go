package workspaces_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io/fs"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/dbbranch"
	"github.com/lockstep-hq/lockstep/gate"
	"github.com/lockstep-hq/lockstep/internal/servicetest"
	"github.com/lockstep-hq/lockstep/internal/testenv"
	"github.com/lockstep-hq/lockstep/repositories"
	"github.com/lockstep-hq/lockstep/workspaces"
)

// objectFiles lists the files under a network's objects directory.
func objectFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			out = append(out, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestForkWritesNoObject: a fork copies refs only; the network's object
// store is untouched and the workspace starts at the base's tip.
func TestForkWritesNoObject(t *testing.T) {
	ctx := context.Background()
	w := servicetest.MustWorld(t, servicetest.Options{})
	base := w.MustRepo(t, "app", map[string]string{"a.txt": "a\n", "b/c.txt": "c\n"})
	r, _ := w.Repos.Repo(ctx, "app")
	objects := filepath.Join(w.Dir, "networks", r.Network+".git", "objects")
	before := objectFiles(t, objects)
	if len(before) == 0 {
		t.Fatalf("no object files under %s", objects)
	}
	f, err := w.Workspaces.Fork(ctx, w.Agent, "app", "ws-1", "task-a")
	if err != nil {
		t.Fatal(err)
	}
	if f.BaseCommit != base.Commit || f.Network != r.Network || f.Owner != "agent" {
		t.Fatalf("fork %+v: want base commit %s in network %s owned by agent", f, base.Commit, r.Network)
	}
	after := objectFiles(t, objects)
	if strings.Join(after, "\n") != strings.Join(before, "\n") {
		t.Fatalf("the fork wrote objects:\nbefore %q\nafter  %q", before, after)
	}
	ws, _ := w.Repos.Repo(ctx, "ws-1")
	commit, _, err := w.Repos.BranchTip(ctx, ws, "main")
	if err != nil || commit != base.Commit {
		t.Fatalf("ws-1 main at %s (%v), want %s", commit, err, base.Commit)
	}
	list, next, err := w.Workspaces.Workspaces(ctx, "app", workspacesQuery())
	if err != nil || next != "" || len(list) != 1 || list[0].Name != "ws-1" || list[0].Tip != base.Commit || list[0].Task != "task-a" {
		t.Fatalf("workspaces %+v next %q (%v)", list, next, err)
	}
}

// TestDatabaseBranchFollowsWorkspace: with database branching on (a real
// Postgres), a fork of a base with a template gets its database branch
// from the workspaces service (no HTTP callback), and abandoning the
// workspace drops it.
func TestDatabaseBranchFollowsWorkspace(t *testing.T) {
	ctx := context.Background()
	tplURL := testenv.MustPostgresDB(t)
	u, err := url.Parse(tplURL)
	if err != nil {
		t.Fatal(err)
	}
	template := strings.TrimPrefix(u.Path, "/")
	var b [2]byte
	rand.Read(b[:])
	m, err := dbbranch.New(ctx, dbbranch.Config{AdminURL: testenv.PostgresURL(t), Prefix: "w" + hex.EncodeToString(b[:]), Secret: []byte("test secret")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		m.DropRepo(context.Background(), "app")
		m.Close()
	})
	dbs := dbbranch.Brancher{M: m}
	w := servicetest.MustWorld(t, servicetest.Options{Brancher: dbs})
	w.MustRepo(t, "app", map[string]string{"a.txt": "a\n"})
	if _, err := w.Checkpoints.BindTemplate(ctx, w.Admin, "app", template); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Workspaces.Fork(ctx, w.Agent, "app", "ws-db", ""); err != nil {
		t.Fatal(err)
	}
	w.Workspaces.Wait() // the branch is created in the background
	br, err := dbs.Branch(ctx, "ws-db")
	if err != nil {
		t.Fatalf("no database branch after the fork: %v", err)
	}
	if br.Repo != "app" || br.DSN == "" || !strings.Contains(br.DSN, br.Database) {
		t.Fatalf("branch %+v", br)
	}
	if _, err := w.Workspaces.SetStatus(ctx, w.Agent, "ws-db", lockstep.StatusAbandoned, "done"); err != nil {
		t.Fatal(err)
	}
	if _, err := dbs.Branch(ctx, "ws-db"); lockstep.ErrorCode(err) != lockstep.ENOTFOUND {
		t.Fatalf("branch of an abandoned workspace: %v, want not_found", err)
	}

	// Promoting drops the branch and its snapshots too (issue 27: they
	// stayed on the branch server). Wired as lockstep serve wires it.
	w.Gate.AfterPromote = func(ctx context.Context, base, ws *lockstep.Repo) { w.Workspaces.AfterPromote(ctx, ws.Name) }
	if _, err := w.Workspaces.Fork(ctx, w.Agent, "app", "ws-promo", ""); err != nil {
		t.Fatal(err)
	}
	w.Workspaces.Wait()
	if _, err := dbs.Branch(ctx, "ws-promo"); err != nil {
		t.Fatalf("no database branch after the fork: %v", err)
	}
	if _, err := w.Repos.PushTar(ctx, w.Agent, "ws-promo", servicetest.Tar(t, map[string]string{"a.txt": "a\n", "b.txt": "b\n"}),
		repositories.WriteOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	if err := dbs.Snapshot(ctx, "ws-promo", "snap1"); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Gate.Promote(ctx, w.Admin, "ws-promo", gate.PromoteRequest{}); err != nil {
		t.Fatal(err)
	}
	w.Workspaces.Wait()
	if _, err := dbs.Branch(ctx, "ws-promo"); lockstep.ErrorCode(err) != lockstep.ENOTFOUND {
		t.Fatalf("branch of a promoted workspace: %v, want not_found", err)
	}
	if err := dbs.Restore(ctx, "ws-promo", "snap1"); lockstep.ErrorCode(err) != lockstep.ENOTFOUND {
		t.Fatalf("snapshot of a promoted workspace: restore %v, want not_found", err)
	}
}

func workspacesQuery() workspaces.WorkspaceQuery { return workspaces.WorkspaceQuery{} }
