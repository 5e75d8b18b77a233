package sqlstore_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/internal/testenv"
)

// BenchmarkQuotaCheck measures the storage-quota query run before every
// write of a non-admin key (KeyStorageBytes) beside the workspace-quota
// query run before every fork (CountOwnedWorkspaces), on a store where
// the key owns 20 active workspaces with 50 write entries each among
// 10,000 entries of other repositories. go test -bench QuotaCheck ./sqlstore/
func BenchmarkQuotaCheck(b *testing.B) {
	for _, dialect := range []string{"sqlite", "postgres"} {
		b.Run(dialect, func(b *testing.B) {
			url := filepath.Join(b.TempDir(), "meta.db")
			if dialect == "postgres" {
				url = testenv.MustPostgresDB(b)
			}
			db := mustOpen(b, url)
			ctx := context.Background()
			base := &lockstep.Repo{Name: "app", Network: "app", DefaultBranch: "main", Status: lockstep.StatusActive}
			if err := db.CreateRepo(ctx, base, nil, nil); err != nil {
				b.Fatal(err)
			}
			for w := 0; w < 40; w++ {
				owner := "key_a"
				if w >= 20 {
					owner = "key_b"
				}
				name := fmt.Sprintf("ws%d", w)
				r := &lockstep.Repo{Name: name, Network: "app", ForkOf: "app", DefaultBranch: "main", Status: lockstep.StatusActive, OwnerKeyID: owner, OwnerName: owner}
				if err := db.CreateRepo(ctx, r, nil, nil); err != nil {
					b.Fatal(err)
				}
				n := 50
				if w >= 20 {
					n = 500
				}
				for i := 0; i < n; i++ {
					if err := db.AppendOp(ctx, &lockstep.OpEntry{KeyID: owner, KeyName: owner, Op: "push", Repo: name, Objects: 3, Bytes: 4096}); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.Run("KeyStorageBytes", func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					if n, err := db.KeyStorageBytes(ctx, "key_a"); err != nil || n != 20*50*4096 {
						b.Fatalf("%d, %v", n, err)
					}
				}
			})
			b.Run("CountOwnedWorkspaces", func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					if n, err := db.CountOwnedWorkspaces(ctx, "key_a"); err != nil || n != 20 {
						b.Fatalf("%d, %v", n, err)
					}
				}
			})
		})
	}
}
