package gate

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/auth"
	"github.com/lockstep-hq/lockstep/gitstore"
	"github.com/lockstep-hq/lockstep/repositories"
	"github.com/lockstep-hq/lockstep/sqlstore"
	"github.com/lockstep-hq/lockstep/telemetry"
	"github.com/lockstep-hq/lockstep/workspaces"
)

type landWorld struct {
	db           *sqlstore.DB
	repos        *repositories.Service
	wss          *workspaces.Service
	gate         *Service
	admin, agent *lockstep.Key
	base, work   string // the base's first commit, the workspace's commit
}

// mustLandWorld: base "app" with one commit, workspace "ws" with one more.
func mustLandWorld(t *testing.T) *landWorld {
	t.Helper()
	return mustLandWorldOn(t, filepath.Join(t.TempDir(), "m.db"), nil)
}

// mustLandWorldOn is mustLandWorld on the store at url; wrap, if set,
// wraps the store the workspaces service uses.
func mustLandWorldOn(t *testing.T, url string, wrap func(lockstep.Store) lockstep.Store) *landWorld {
	t.Helper()
	return landWorldOn(t, url, wrap, false)
}

// landWorldOn builds the world; wrap, if set, wraps the store of the
// workspaces service, and with everywhere that of every service.
func landWorldOn(t *testing.T, url string, wrap func(lockstep.Store) lockstep.Store, everywhere bool) *landWorld {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	db, err := sqlstore.Open(ctx, url, sqlstore.Options{Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	keys := auth.New(db, nil)
	w := &landWorld{db: db}
	w.admin, _, _ = keys.Create(ctx, auth.System, "admin", lockstep.RoleAdmin)
	w.agent, _, _ = keys.Create(ctx, auth.System, "agent", lockstep.RoleAgent)
	m := telemetry.NewMetrics()
	var st, wssStore lockstep.Store = db, db
	if wrap != nil {
		wssStore = wrap(db)
		if everywhere {
			st = wssStore
		}
	}
	w.repos = repositories.New(repositories.Config{Objects: gitstore.Local{}, DataDir: dir}, st, nil, m, nil)
	t.Cleanup(func() { w.repos.Close() })
	w.wss = workspaces.New(wssStore, w.repos, nil, nil, m, nil)
	w.gate = New(Config{}, st, w.repos, nil, m, nil)
	if _, err := w.repos.CreateRepo(ctx, w.admin, "app", "main"); err != nil {
		t.Fatal(err)
	}
	edit := func(who *lockstep.Key, repoName, path, content, expect string) string {
		res, err := w.repos.EditFiles(ctx, who, repoName, []repositories.Edit{{Path: path, Content: []byte(content)}},
			repositories.WriteOptions{Branch: "main", ExpectOID: expect})
		if err != nil {
			t.Fatal(err)
		}
		return res.Commit
	}
	w.base = edit(w.admin, "app", "a.txt", "a\n", lockstep.ZeroOID)
	if _, err := w.wss.Fork(ctx, w.agent, "app", "ws", ""); err != nil {
		t.Fatal(err)
	}
	w.work = edit(w.agent, "ws", "b.txt", "b\n", w.base)
	return w
}

func (w *landWorld) tip(t *testing.T, name string) string {
	t.Helper()
	r, err := w.repos.Repo(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	c, _, err := w.repos.BranchTip(context.Background(), r, "main")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (w *landWorld) status(t *testing.T, name string) lockstep.Status {
	t.Helper()
	r, err := w.repos.Repo(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return r.Status
}

// TestPromoteLandsAndMarksPromoted: one promote moves the base branch to
// the workspace's work and marks the workspace promoted; a second one is
// refused (promoted is final).
func TestPromoteLandsAndMarksPromoted(t *testing.T) {
	ctx := context.Background()
	w := mustLandWorld(t)
	res, err := w.gate.Promote(ctx, w.agent, "ws", PromoteRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if !res.FastForward || res.Commit != w.work || w.tip(t, "app") != w.work {
		t.Fatalf("promote %+v: base at %s, want a fast-forward to %s", res.MergeResponse, w.tip(t, "app"), w.work)
	}
	if st := w.status(t, "ws"); st != lockstep.StatusPromoted {
		t.Fatalf("workspace status %s after promote, want promoted", st)
	}
	if _, err := w.gate.Promote(ctx, w.agent, "ws", PromoteRequest{}); lockstep.ErrorCode(err) != lockstep.EINVALID {
		t.Fatalf("second promote: %v, want invalid_argument", err)
	}
}

// TestLandIsAtomic: when the workspace's status cannot change (it was
// marked failed after the gate resolved the target), the base branch does
// not move either: ref and status commit in one transaction.
func TestLandIsAtomic(t *testing.T) {
	ctx := context.Background()
	w := mustLandWorld(t)
	target, err := w.gate.Target(ctx, "ws", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.wss.SetStatus(ctx, w.admin, "ws", lockstep.StatusFailed, "ci broke"); err != nil {
		t.Fatal(err)
	}
	if _, err := w.gate.land(ctx, w.agent, target, "", "", nil, nil); err == nil {
		t.Fatal("land succeeded on a workspace that is no longer active")
	}
	if got := w.tip(t, "app"); got != w.base {
		t.Fatalf("base moved to %s although the status change failed (want %s)", got, w.base)
	}
	if st := w.status(t, "ws"); st != lockstep.StatusFailed {
		t.Fatalf("workspace status %s, want failed", st)
	}
}
