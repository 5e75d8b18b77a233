package checkpoints_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/checkpoints"
	"github.com/lockstep-hq/lockstep/dbbranch"
	"github.com/lockstep-hq/lockstep/internal/servicetest"
	"github.com/lockstep-hq/lockstep/internal/testenv"
	"github.com/lockstep-hq/lockstep/repositories"
)

// TestRestoreCodePart: restoring a checkpoint commits the checkpoint's
// tree on top of the current tip (history kept), reports the code part
// restored and the database part skipped (the checkpoint has none), and
// links the log entry to the checkpoint.
func TestRestoreCodePart(t *testing.T) {
	ctx := context.Background()
	w := servicetest.MustWorld(t, servicetest.Options{})
	w.MustRepo(t, "app", map[string]string{"a.txt": "a\n"})
	if _, err := w.Workspaces.Fork(ctx, w.Agent, "app", "ws", ""); err != nil {
		t.Fatal(err)
	}
	ws, _ := w.Repos.Repo(ctx, "ws")
	tip, tree, _ := w.Repos.BranchTip(ctx, ws, "main")
	cp, err := w.Checkpoints.Create(ctx, w.Agent, "ws", checkpoints.CreateRequest{Label: "before", FSSnapshot: "snap-1"})
	if err != nil {
		t.Fatal(err)
	}
	if cp.Commit != tip || cp.Tree != tree || cp.DBSnapshot != "" {
		t.Fatalf("checkpoint %+v: want commit %s tree %s, no database snapshot", cp, tip, tree)
	}
	broken, err := w.Repos.PushTar(ctx, w.Agent, "ws", servicetest.Tar(t, map[string]string{"a.txt": "broken\n"}),
		repositories.WriteOptions{Branch: "main", ExpectOID: tip})
	if err != nil {
		t.Fatal(err)
	}
	res, err := w.Checkpoints.Restore(ctx, w.Agent, "ws", cp.ID, checkpoints.RestoreRequest{ExpectOID: broken.Commit})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Code.Restored || res.Code.Skipped != "" || res.Tree != tree || res.FSSnapshot != "snap-1" || res.Database.Skipped == "" || res.DBRestored {
		t.Fatalf("restore %+v", res)
	}
	now, nowTree, _ := w.Repos.BranchTip(ctx, ws, "main")
	if now != res.Commit || nowTree != tree || now == tip {
		t.Fatalf("ws main at %s (tree %s), want the new commit %s with tree %s", now, nowTree, res.Commit, tree)
	}
	ci, err := w.Repos.Commit(ctx, "ws", now)
	if err != nil || len(ci.Parents) != 1 || ci.Parents[0].String() != broken.Commit {
		t.Fatalf("restore commit %+v (%v): want parent %s (history kept)", ci, err, broken.Commit)
	}
	// A stale expectation restores nothing.
	_, err = w.Checkpoints.Restore(ctx, w.Agent, "ws", cp.ID, checkpoints.RestoreRequest{ExpectOID: broken.Commit})
	if lockstep.ErrorCode(err) != lockstep.EREFCONFLICT {
		t.Fatalf("stale restore: %v, want ref_conflict", err)
	}
}

// TestRefreshTemplateReportsLostLogEntry: when the operations-log entry
// of a template refresh cannot be appended, the refresh answers an error
// instead of succeeding with a gap in the audit chain (the error used to
// be ignored). The failure is real: a trigger makes SQLite refuse the
// insert.
func TestRefreshTemplateReportsLostLogEntry(t *testing.T) {
	ctx := context.Background()
	tplURL := testenv.MustPostgresDB(t)
	u, err := url.Parse(tplURL)
	if err != nil {
		t.Fatal(err)
	}
	var b [2]byte
	rand.Read(b[:])
	m, err := dbbranch.New(ctx, dbbranch.Config{AdminURL: testenv.PostgresURL(t), Prefix: "c" + hex.EncodeToString(b[:]), Secret: []byte("test secret")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		m.DropRepo(context.Background(), "app")
		m.Close()
	})
	w := servicetest.MustWorld(t, servicetest.Options{Brancher: dbbranch.Brancher{M: m}})
	w.MustRepo(t, "app", map[string]string{"a.txt": "a\n"})
	if _, err := w.Checkpoints.BindTemplate(ctx, w.Admin, "app", strings.TrimPrefix(u.Path, "/")); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Checkpoints.RefreshTemplate(ctx, w.Admin, "app"); err != nil {
		t.Fatalf("refresh with a working log: %v", err)
	}
	raw, err := sql.Open("sqlite", "file:"+filepath.Join(w.Dir, "m.db")+"?_pragma=busy_timeout(30000)")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.Exec(`CREATE TRIGGER refuse_refresh BEFORE INSERT ON oplog WHEN NEW.op = 'database.refresh' BEGIN SELECT RAISE(ABORT, 'log refused'); END`); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Checkpoints.RefreshTemplate(ctx, w.Admin, "app"); err == nil {
		t.Fatal("refresh answered success although its log entry was not written")
	}
}
