package repositories_test

import (
	"context"
	"testing"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/repositories"
)

// BenchmarkRollbackLongHistory: one rollback of main to its first commit
// per iteration, on top of 200 commits and every rollback before it (the
// chain compensationOffers walks grows by one per iteration, as in
// `lockstep bench --only rollback`). no-effects: the base has no
// compensable effect; effects: one released by the second commit (so the
// undone chain is walked and matched). SQLite, local objects.
func BenchmarkRollbackLongHistory(b *testing.B) {
	for _, withEffects := range []bool{false, true} {
		name := "no-effects"
		if withEffects {
			name = "effects"
		}
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			w := newOffersWorldTB(b)
			if _, err := w.repos.CreateRepo(ctx, w.admin, "base", "main"); err != nil {
				b.Fatal(err)
			}
			c0 := w.push(b, "base", lockstep.ZeroOID, 0)
			base, err := w.repos.Repo(ctx, "base")
			if err != nil {
				b.Fatal(err)
			}
			tip := c0
			for i := 1; i <= 200; i++ {
				tip = w.push(b, "base", tip, i)
				if i == 1 && withEffects {
					w.release(b, base, "ws1", tip, true)
					w.deliverAll(b)
				}
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				rb, err := w.repos.Rollback(ctx, w.admin, "base", c0, repositories.WriteOptions{Branch: "main", ExpectOID: tip})
				if err != nil {
					b.Fatal(err)
				}
				if withEffects && len(rb.Compensations) != 1 {
					b.Fatalf("offers %+v, want 1", rb.Compensations)
				}
				tip = rb.Commit
			}
		})
	}
}
