package sqlstore_test

import (
	"context"
	"strings"
	"testing"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/sqlstore"
)

// TestTasksAttemptNumbersOpHook: task labels with counts by status, paged;
// attempts numbered within their workspace; OnOp sees committed entries
// only.
func TestTasksAttemptNumbersOpHook(t *testing.T) {
	backends(t, func(t *testing.T, open func() *sqlstore.DB) {
		ctx := context.Background()
		db := open()
		var seen []lockstep.OpEntry
		db.OnOp(func(e lockstep.OpEntry) { seen = append(seen, e) })
		base := &lockstep.Repo{Name: "base", Network: "base", DefaultBranch: "main"}
		if err := db.CreateRepo(ctx, base, nil, entry("repo.create")); err != nil {
			t.Fatal(err)
		}
		ws := map[string]*lockstep.Repo{}
		for _, w := range []struct {
			name, task string
			status     lockstep.Status
		}{
			{"a1", "t-1", lockstep.StatusActive}, {"a2", "t-1", lockstep.StatusFailed}, {"b1", "t-2", lockstep.StatusActive}, {"c1", "", lockstep.StatusActive},
		} {
			r := &lockstep.Repo{Name: w.name, Network: "base", ForkOf: "base", DefaultBranch: "main", Task: w.task}
			if err := db.CreateRepo(ctx, r, nil, entry("fork")); err != nil {
				t.Fatal(err)
			}
			if w.status != lockstep.StatusActive {
				if err := db.SetRepoStatus(ctx, lockstep.StatusChange{RepoID: r.ID, Repo: r.Name, From: lockstep.StatusActive, To: w.status, Entry: entry("workspace." + string(w.status))}); err != nil {
					t.Fatal(err)
				}
			}
			ws[w.name] = r
		}
		tasks, err := db.Tasks(ctx, "base", "", 10)
		if err != nil || len(tasks) != 2 || tasks[0].Task != "t-1" || tasks[0].Total != 2 || tasks[0].ByStatus[string(lockstep.StatusFailed)] != 1 || tasks[1].Task != "t-2" {
			t.Fatalf("tasks %+v %v", tasks, err)
		}
		if page, err := db.Tasks(ctx, "base", "t-1", 1); err != nil || len(page) != 1 || page[0].Task != "t-2" {
			t.Fatalf("second page %+v %v", page, err)
		}

		// Attempts interleave across workspaces; numbers stay per workspace.
		oid := func(i int) string { return strings.Repeat(string("0123456789"[i%10]), 40) }
		old := map[string]string{"a1": lockstep.ZeroOID, "b1": lockstep.ZeroOID}
		for i, name := range []string{"a1", "b1", "a1", "a1", "b1"} {
			r := ws[name]
			n := oid(i + 1)
			at := []lockstep.AttemptRecord{{RepoID: r.ID, Attempt: lockstep.Attempt{Commit: n, Tree: n, Branch: "main", Op: "push", KeyName: "test"}}}
			if err := db.UpdateRefs(ctx, []lockstep.RefUpdate{{RepoID: r.ID, Repo: r.Name, Name: "refs/heads/main", Old: old[name], New: n}}, at, nil, entry("push")); err != nil {
				t.Fatal(err)
			}
			old[name] = n
		}
		got, err := db.Attempts(ctx, ws["a1"].ID, 10)
		if err != nil || len(got) != 3 || got[0].Number != 3 || got[2].Number != 1 || got[0].Seq == 3 {
			t.Fatalf("a1 attempts %+v %v", got, err)
		}
		if got, _ := db.Attempts(ctx, ws["b1"].ID, 1); len(got) != 1 || got[0].Number != 2 {
			t.Fatalf("b1 newest attempt %+v, want number 2", got)
		}

		// A refused compare-and-swap commits nothing: no event.
		before := len(seen)
		err = db.UpdateRefs(ctx, []lockstep.RefUpdate{{RepoID: ws["a1"].ID, Repo: "a1", Name: "refs/heads/main", Old: oid(9), New: oid(8)}}, nil, nil, entry("push"))
		if lockstep.ErrorCode(err) != lockstep.EREFCONFLICT {
			t.Fatalf("stale update: %v", err)
		}
		if len(seen) != before {
			t.Fatalf("OnOp saw %d entries of a rolled-back transaction", len(seen)-before)
		}
		if last := seen[len(seen)-1]; last.Op != "push" || last.Seq == 0 || last.Hash == "" {
			t.Fatalf("last entry seen %+v", last)
		}
	})
}
