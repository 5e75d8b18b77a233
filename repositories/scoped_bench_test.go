package repositories_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/auth"
	"github.com/lockstep-hq/lockstep/internal/servicetest"
	"github.com/lockstep-hq/lockstep/repositories"
)

// BenchmarkScopedPresence measures what the scoped keys' presence rule
// (scoped.go) costs: the closure of a ref tip's tree computed from the
// store (what the first scoped request after a push pays), and
// objects/missing of three ids after each push (the tip moved: its
// closure is computed once, then cached), scoped against unscoped.
func BenchmarkScopedPresence(b *testing.B) {
	for _, size := range []int{2_000, 20_000} {
		files := map[string]string{}
		for i := 0; i < size; i++ {
			files[fmt.Sprintf("d%d/e%d/f%d.txt", i%20, i%200, i)] = fmt.Sprintf("file %d\n", i)
		}
		w := servicetest.MustWorld(b, servicetest.Options{})
		first := w.MustRepo(b, "app", files)
		b.Run(fmt.Sprintf("closure-%d", size), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if _, err := w.Repos.TreeClosureLen("app", first.Tree); err != nil {
					b.Fatal(err)
				}
			}
		})
		ctx := context.Background()
		ws := fmt.Sprintf("ws%d", size)
		if _, err := w.Workspaces.Fork(ctx, w.Agent, "app", ws, ""); err != nil {
			b.Fatal(err)
		}
		scoped := *w.Agent
		scoped.Scope = &lockstep.KeyScope{Workspace: ws, Owner: w.Agent.ID}
		oids := []string{first.Tree, first.Commit, "0123456789abcdef0123456789abcdef01234567"}
		for _, mode := range []string{"unscoped", "scoped"} {
			key := w.Agent
			if mode == "scoped" {
				key = &scoped
			}
			kctx := auth.WithKey(ctx, key)
			b.Run(fmt.Sprintf("missing-after-push-%d/%s", size, mode), func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					b.StopTimer()
					if _, err := w.Repos.EditFiles(kctx, key, ws, []repositories.Edit{{Path: "d0/e0/f0.txt", Content: []byte(fmt.Sprint(mode, i))}}, repositories.WriteOptions{Force: true}); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
					if _, err := w.Repos.Missing(kctx, key, ws, oids); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
