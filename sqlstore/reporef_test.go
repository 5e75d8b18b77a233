package sqlstore_test

import (
	"context"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/internal/testenv"
	"github.com/lockstep-hq/lockstep/sqlstore"
)

// TestRepoRef: the one-statement read of a repository and one of its refs
// answers what RepoByName and Ref answer, nil for a missing ref and
// not_found for a missing repository, on both dialects.
func TestRepoRef(t *testing.T) {
	for name, open := range map[string]func(t *testing.T) *sqlstore.DB{
		"sqlite":   func(t *testing.T) *sqlstore.DB { return mustOpen(t, filepath.Join(t.TempDir(), "meta.db")) },
		"postgres": func(t *testing.T) *sqlstore.DB { return mustOpen(t, testenv.MustPostgresDB(t)) },
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			db := open(t)
			oid := "0123456789abcdef0123456789abcdef01234567"
			for _, n := range []string{"app", "other"} {
				r := &lockstep.Repo{Name: n, Network: "net-" + n, DefaultBranch: "main"}
				if err := db.CreateRepo(ctx, r, []lockstep.Ref{{Name: "refs/heads/main", OID: oid}}, entry("repo.create")); err != nil {
					t.Fatal(err)
				}
			}
			want, err := db.RepoByName(ctx, "app")
			if err != nil {
				t.Fatal(err)
			}
			wantRef, err := db.Ref(ctx, want.ID, "refs/heads/main")
			if err != nil {
				t.Fatal(err)
			}
			r, ref, err := db.RepoRef(ctx, "app", "refs/heads/main")
			if err != nil || !reflect.DeepEqual(r, want) || ref == nil || !reflect.DeepEqual(*ref, wantRef) {
				t.Fatalf("RepoRef: %+v %+v %v; want %+v %+v", r, ref, err, want, wantRef)
			}
			r, ref, err = db.RepoRef(ctx, "app", "refs/heads/nope")
			if err != nil || !reflect.DeepEqual(r, want) || ref != nil {
				t.Fatalf("RepoRef of a missing ref: %+v %+v %v; want %+v and no ref", r, ref, err, want)
			}
			if _, _, err := db.RepoRef(ctx, "nope", "refs/heads/main"); lockstep.ErrorCode(err) != lockstep.ENOTFOUND {
				t.Fatalf("RepoRef of a missing repository: %v, want not_found", err)
			}
		})
	}
}
