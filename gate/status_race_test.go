package gate

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/internal/testenv"
	"github.com/lockstep-hq/lockstep/repositories"
)

// beforeStatus is the real store, with a step run once just before the
// first status change reaches it: it puts another writer's commit exactly
// between the moment a status change was decided and its write.
type beforeStatus struct {
	lockstep.Store
	once   sync.Once
	before func()
}

func (s *beforeStatus) SetRepoStatus(ctx context.Context, c lockstep.StatusChange) error {
	s.once.Do(s.before)
	return s.Store.SetRepoStatus(ctx, c)
}

// statusBackends runs fn on a fresh SQLite and a fresh Postgres store.
func statusBackends(t *testing.T, fn func(t *testing.T, url string)) {
	t.Run("sqlite", func(t *testing.T) { fn(t, filepath.Join(t.TempDir(), "m.db")) })
	t.Run("postgres", func(t *testing.T) { fn(t, testenv.MustPostgresDB(t)) })
}

// TestMarkFailedAfterPromoteLanded: a mark-failed decided while the
// workspace was active, whose write comes after a promote landed, does
// not overwrite promoted (the status is a compare-and-swap): the workspace
// stays promoted with its commit on the base, and the caller is told the
// status is final.
func TestMarkFailedAfterPromoteLanded(t *testing.T) {
	statusBackends(t, func(t *testing.T, url string) {
		ctx := context.Background()
		var w *landWorld
		var perr error
		w = mustLandWorldOn(t, url, func(s lockstep.Store) lockstep.Store {
			return &beforeStatus{Store: s, before: func() {
				_, perr = w.gate.Promote(ctx, w.agent, "ws", PromoteRequest{})
			}}
		})
		_, err := w.wss.SetStatus(ctx, w.admin, "ws", lockstep.StatusFailed, "ci broke")
		if perr != nil {
			t.Fatalf("promote: %v", perr)
		}
		if lockstep.ErrorCode(err) != lockstep.EINVALID {
			t.Fatalf("mark failed after the promote landed: %v, want invalid_argument (promoted is final)", err)
		}
		if st, tip := w.status(t, "ws"), w.tip(t, "app"); st != lockstep.StatusPromoted || tip != w.work {
			t.Fatalf("workspace %s, base at %s (work %s): want promoted with the work landed", st, tip, w.work)
		}
		if ops, _ := w.db.ListOps(ctx, lockstep.OpFilter{Op: "workspace.failed"}); len(ops) != 0 {
			t.Fatalf("a status change that did not happen is logged: %+v", ops[0])
		}
	})
}

// TestMarkFailedRacesPromote races a reviewer's mark-failed against the
// owner's promote of the same workspace, many rounds, and checks that no
// round ends in an impossible state: the workspace is promoted exactly
// when its commit landed on the base, a failed workspace left the base
// where it was, and exactly one of the two calls succeeded.
func TestMarkFailedRacesPromote(t *testing.T) {
	rounds := 200
	if testing.Short() {
		rounds = 40
	}
	statusBackends(t, func(t *testing.T, url string) {
		ctx := context.Background()
		w := mustLandWorldOn(t, url, nil)
		promoted, failed := 0, 0
		for i := 0; i < rounds; i++ {
			name := fmt.Sprintf("ws-%d", i)
			before := w.tip(t, "app")
			if _, err := w.wss.Fork(ctx, w.agent, "app", name, ""); err != nil {
				t.Fatal(err)
			}
			res, err := w.repos.EditFiles(ctx, w.agent, name, []repositories.Edit{{Path: fmt.Sprintf("f%d.txt", i), Content: []byte(name + "\n")}},
				repositories.WriteOptions{Branch: "main", ExpectOID: before})
			if err != nil {
				t.Fatal(err)
			}
			work := res.Commit
			var perr, ferr error
			var wg sync.WaitGroup
			start := make(chan struct{})
			wg.Add(2)
			go func() {
				defer wg.Done()
				<-start
				_, perr = w.gate.Promote(ctx, w.agent, name, PromoteRequest{})
			}()
			go func() {
				defer wg.Done()
				<-start
				_, ferr = w.wss.SetStatus(ctx, w.admin, name, lockstep.StatusFailed, "race")
			}()
			close(start)
			wg.Wait()
			for _, err := range []error{perr, ferr} {
				if err != nil && lockstep.ErrorCode(err) != lockstep.EINVALID {
					t.Fatalf("round %d: %v", i, err)
				}
			}
			st, tip := w.status(t, name), w.tip(t, "app")
			switch {
			case st == lockstep.StatusPromoted && tip != work:
				t.Fatalf("round %d: promoted, but the base is at %s, not the work %s", i, tip, work)
			case st != lockstep.StatusPromoted && tip != before:
				t.Fatalf("round %d: %s, but the base moved from %s to %s", i, st, before, tip)
			case st != lockstep.StatusPromoted && st != lockstep.StatusFailed:
				t.Fatalf("round %d: status %s", i, st)
			case (perr == nil) != (st == lockstep.StatusPromoted) || (ferr == nil) != (st == lockstep.StatusFailed):
				t.Fatalf("round %d: status %s, promote error %v, mark-failed error %v: the answers do not match the end state", i, st, perr, ferr)
			}
			if st == lockstep.StatusPromoted {
				promoted++
			} else {
				failed++
			}
		}
		t.Logf("%d rounds: %d promoted, %d failed", rounds, promoted, failed)
	})
}
