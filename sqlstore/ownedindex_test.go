package sqlstore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/sqlstore"
)

// TestCountOwnedUsesIndex: the count of a key's active workspaces, which
// every bounded fork takes under the oplog head's lock (migration 0032),
// searches repos_owner_active instead of reading every repository, and
// still counts only active forks of that key.
func TestCountOwnedUsesIndex(t *testing.T) {
	backends(t, func(t *testing.T, open func() *sqlstore.DB) {
		ctx := context.Background()
		db := open()
		must := func(err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
		}
		must(db.CreateRepo(ctx, &lockstep.Repo{Name: "base", Network: "base", DefaultBranch: "main"}, nil, nil))
		for i := range 6 {
			owner := "key_a"
			if i%2 == 1 {
				owner = "key_b"
			}
			must(db.ForkRepo(ctx, "base", &lockstep.Repo{Name: fmt.Sprintf("w%d", i), OwnerKeyID: owner}, 0, entry("fork"), nil))
		}
		w0, err := db.RepoByName(ctx, "w0")
		must(err)
		must(db.SetRepoStatus(ctx, lockstep.StatusChange{RepoID: w0.ID, Repo: "w0", From: lockstep.StatusActive, To: lockstep.StatusAbandoned, Entry: entry("workspace.abandoned")}))
		if n, err := db.CountOwnedWorkspaces(ctx, "key_a"); err != nil || n != 2 {
			t.Fatalf("key_a owns %d active workspaces (%v), want 2", n, err)
		}
		var plan string
		if db.Dialect() == "postgres" {
			tx, err := db.SQL().BeginTx(ctx, nil)
			must(err)
			defer tx.Rollback()
			_, err = tx.Exec(`SET LOCAL enable_seqscan = off`)
			must(err)
			rows, err := tx.Query(`EXPLAIN `+sqlstore.CountOwnedQuery, "key_a")
			must(err)
			for rows.Next() {
				var line string
				must(rows.Scan(&line))
				plan += line + "; "
			}
			rows.Close()
		} else {
			rows, err := db.SQL().Query(`EXPLAIN QUERY PLAN `+sqlstore.CountOwnedQuery, "key_a")
			must(err)
			for rows.Next() {
				var id, parent, notused int
				var detail string
				must(rows.Scan(&id, &parent, &notused, &detail))
				plan += detail + "; "
			}
			rows.Close()
		}
		if !strings.Contains(plan, "repos_owner_active") {
			t.Fatalf("plan of the owned count: %s, want the index repos_owner_active", plan)
		}
	})
}
