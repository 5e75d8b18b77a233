package sqlstore_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/sqlstore"
)

// TestRefsOfAFinishedWorkspaceNeverMove: UpdateRefs refuses, inside its
// transaction, to move a ref of a workspace that is no longer active, and
// changes nothing.
func TestRefsOfAFinishedWorkspaceNeverMove(t *testing.T) {
	backends(t, func(t *testing.T, open func() *sqlstore.DB) {
		ctx := context.Background()
		db := open()
		base := &lockstep.Repo{Name: "base", Network: "base", DefaultBranch: "main"}
		db.CreateRepo(ctx, base, nil, entry("repo.create"))
		old := fmt.Sprintf("%040x", 1)
		ws := &lockstep.Repo{Name: "ws", Network: "base", ForkOf: "base", DefaultBranch: "main"}
		if err := db.CreateRepo(ctx, ws, []lockstep.Ref{{Name: "refs/heads/main", OID: old}}, entry("fork")); err != nil {
			t.Fatal(err)
		}
		if err := db.SetRepoStatus(ctx, lockstep.StatusChange{RepoID: ws.ID, Repo: ws.Name, From: lockstep.StatusActive, To: lockstep.StatusAbandoned, Entry: entry("workspace.abandoned")}); err != nil {
			t.Fatal(err)
		}
		err := db.UpdateRefs(ctx, []lockstep.RefUpdate{{RepoID: ws.ID, Repo: ws.Name, Name: "refs/heads/main", Old: old, New: fmt.Sprintf("%040x", 2)}}, nil, nil, entry("push"))
		if lockstep.ErrorCode(err) != lockstep.EINVALID {
			t.Fatalf("push to an abandoned workspace: %v, want invalid_argument", err)
		}
		if ref, _ := db.Ref(ctx, ws.ID, "refs/heads/main"); ref.OID != old {
			t.Fatalf("ref moved to %s", ref.OID)
		}
		if ops, _ := db.ListOps(ctx, lockstep.OpFilter{Op: "push"}); len(ops) != 0 {
			t.Fatalf("refused push logged as done: %+v", ops[0])
		}
	})
}

// TestPromoteIsOneTransaction: the base's ref and the workspace's status
// change together or not at all (issue 10: they were two transactions).
func TestPromoteIsOneTransaction(t *testing.T) {
	backends(t, func(t *testing.T, open func() *sqlstore.DB) {
		ctx := context.Background()
		db := open()
		tip := fmt.Sprintf("%040x", 1)
		base := &lockstep.Repo{Name: "base", Network: "base", DefaultBranch: "main"}
		if err := db.CreateRepo(ctx, base, []lockstep.Ref{{Name: "refs/heads/main", OID: tip}}, entry("repo.create")); err != nil {
			t.Fatal(err)
		}
		mk := func(name string) *lockstep.Repo {
			ws := &lockstep.Repo{Name: name, Network: "base", ForkOf: "base", DefaultBranch: "main"}
			if err := db.CreateRepo(ctx, ws, nil, entry("fork")); err != nil {
				t.Fatal(err)
			}
			return ws
		}
		land := func(ws *lockstep.Repo, old, new string) error {
			return db.UpdateRefsAndStatus(ctx, []lockstep.RefUpdate{{RepoID: base.ID, Repo: base.Name, Name: "refs/heads/main", Old: old, New: new}}, nil, nil,
				entry("promote"), lockstep.StatusChange{RepoID: ws.ID, Repo: ws.Name, From: lockstep.StatusActive, To: lockstep.StatusPromoted, Entry: entry("workspace.promoted")})
		}
		status := func(name string) lockstep.Status {
			r, err := db.RepoByName(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			return r.Status
		}
		head := func() string {
			ref, _ := db.Ref(ctx, base.ID, "refs/heads/main")
			return ref.OID
		}

		// A lost compare-and-swap on the ref: the status stays active.
		a := mk("ws-a")
		if err := land(a, fmt.Sprintf("%040x", 9), fmt.Sprintf("%040x", 2)); lockstep.ErrorCode(err) != lockstep.EREFCONFLICT {
			t.Fatalf("stale landing: %v", err)
		}
		if s := status("ws-a"); s != lockstep.StatusActive {
			t.Fatalf("ws-a is %s after a landing that did not happen", s)
		}
		// The workspace was abandoned meanwhile: the ref does not move.
		b := mk("ws-b")
		if err := db.SetRepoStatus(ctx, lockstep.StatusChange{RepoID: b.ID, Repo: b.Name, From: lockstep.StatusActive, To: lockstep.StatusAbandoned, Entry: entry("workspace.abandoned")}); err != nil {
			t.Fatal(err)
		}
		if err := land(b, tip, fmt.Sprintf("%040x", 3)); lockstep.ErrorCode(err) != lockstep.EINVALID {
			t.Fatalf("landing an abandoned workspace: %v", err)
		}
		if h := head(); h != tip {
			t.Fatalf("base moved to %s for an abandoned workspace", h)
		}
		// Both, with both entries in order.
		if err := land(a, tip, fmt.Sprintf("%040x", 4)); err != nil {
			t.Fatal(err)
		}
		if h, s := head(), status("ws-a"); h != fmt.Sprintf("%040x", 4) || s != lockstep.StatusPromoted {
			t.Fatalf("after landing: head %s, ws-a %s", h, s)
		}
		ops, err := db.ListOps(ctx, lockstep.OpFilter{})
		if err != nil {
			t.Fatal(err)
		}
		last := ops[len(ops)-2:]
		if last[0].Op != "promote" || last[1].Op != "workspace.promoted" || last[1].Seq != last[0].Seq+1 {
			t.Fatalf("last entries %s #%d, %s #%d", last[0].Op, last[0].Seq, last[1].Op, last[1].Seq)
		}
		// Twice is refused: a promoted workspace lands once.
		if err := land(a, fmt.Sprintf("%040x", 4), fmt.Sprintf("%040x", 5)); lockstep.ErrorCode(err) != lockstep.EINVALID {
			t.Fatalf("second landing: %v", err)
		}
		if res, err := db.VerifyOps(ctx); err != nil || !res.OK {
			t.Fatalf("chain: %+v %v", res, err)
		}
	})
}
