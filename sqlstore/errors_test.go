package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/lockstep-hq/lockstep"
)

// Errors name the store operation and keep the driver's error as their
// cause, on both databases; clients' messages carry none of it.
func TestErrorsNameTheOperationAndKeepTheCause(t *testing.T) {
	for name, url := range backendURLs(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			db := mustOpen(t, url)
			_, err := db.RepoByName(ctx, "nope")
			if lockstep.ErrorCode(err) != lockstep.ENOTFOUND || lockstep.ErrorOp(err) != "sqlstore.RepoByName" || !errors.Is(err, sql.ErrNoRows) {
				t.Fatalf("not found: %v (op %q)", err, lockstep.ErrorOp(err))
			}
			if strings.Contains(lockstep.ErrorMessage(err), "sql:") {
				t.Fatalf("message %q carries driver text", lockstep.ErrorMessage(err))
			}
			r := &lockstep.Repo{Name: "a", Network: "a", DefaultBranch: "main"}
			if err := db.CreateRepo(ctx, r, nil, nil); err != nil {
				t.Fatal(err)
			}
			// A unique violation no method names itself (a hook id taken)
			// is already_exists, not internal.
			h := &lockstep.Hook{ID: "hook_x", RepoID: r.ID, URL: "http://127.0.0.1:1/", Events: []string{"*"}, Active: true}
			if err := db.CreateHook(ctx, h, nil); err != nil {
				t.Fatal(err)
			}
			err = db.CreateHook(ctx, h, nil)
			if lockstep.ErrorCode(err) != lockstep.ECONFLICT || lockstep.ErrorOp(err) != "sqlstore.CreateHook" || strings.Contains(lockstep.ErrorMessage(err), "constraint") {
				t.Fatalf("duplicate hook: %v (message %q)", err, lockstep.ErrorMessage(err))
			}
			db.Close()
			err = db.Ping(ctx)
			if lockstep.ErrorCode(err) != lockstep.EUNAVAILABLE || lockstep.ErrorOp(err) != "sqlstore.Ping" || !strings.Contains(err.Error(), "database is closed") {
				t.Fatalf("closed: %v", err)
			}
		})
	}
}
