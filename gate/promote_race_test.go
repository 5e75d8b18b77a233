package gate

import (
	"context"
	"sync"
	"testing"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/repositories"
)

// beforeLanding is the real store with a step run once just before the
// first landing transaction (a ref move with the change to promoted)
// reaches it: another writer's commit lands between the moment a promote
// read the workspace and its landing.
type beforeLanding struct {
	lockstep.Store
	once   sync.Once
	before func()
}

func (s *beforeLanding) UpdateRefsAndStatus(ctx context.Context, updates []lockstep.RefUpdate, attempts []lockstep.AttemptRecord, events []lockstep.HookEvent, entry *lockstep.OpEntry, change lockstep.StatusChange) error {
	if change.To == lockstep.StatusPromoted {
		s.once.Do(s.before)
	}
	return s.Store.UpdateRefsAndStatus(ctx, updates, attempts, events, entry, change)
}

// mustLandWorldWrapped is mustLandWorldOn with wrap around the store of
// every service (the landing goes through it).
func mustLandWorldWrapped(t *testing.T, url string, wrap func(lockstep.Store) lockstep.Store) *landWorld {
	t.Helper()
	return landWorldOn(t, url, wrap, true)
}

// TestPromoteRacesAWorkspaceWrite: the workspace's owner rolls back (or
// pushes) after a promote read the workspace's tip and before it landed.
// Both used to succeed: the base got the commit the agent had just undone
// (or not the work it had just pushed) and the workspace was marked
// promoted, its acknowledged write never to land. Now the promote is
// refused (ref_conflict, nothing moved, the workspace still active) and a
// promote again lands the workspace's new tip.
func TestPromoteRacesAWorkspaceWrite(t *testing.T) {
	for _, write := range []string{"rollback", "edit"} {
		t.Run(write, func(t *testing.T) {
			statusBackends(t, func(t *testing.T, url string) {
				ctx := context.Background()
				var w *landWorld
				var wrote string
				var werr error
				w = mustLandWorldWrapped(t, url, func(s lockstep.Store) lockstep.Store {
					return &beforeLanding{Store: s, before: func() {
						opts := repositories.WriteOptions{Branch: "main", ExpectOID: w.work}
						if write == "rollback" {
							var res *repositories.PushResult
							res, werr = w.repos.Rollback(ctx, w.agent, "ws", w.base, opts)
							if werr == nil {
								wrote = res.Commit
							}
							return
						}
						var res *repositories.PushResult
						res, werr = w.repos.EditFiles(ctx, w.agent, "ws", []repositories.Edit{{Path: "c.txt", Content: []byte("c\n")}}, opts)
						if werr == nil {
							wrote = res.Commit
						}
					}}
				})
				_, err := w.gate.Promote(ctx, w.agent, "ws", PromoteRequest{})
				if werr != nil {
					t.Fatalf("the workspace's %s during the promote: %v", write, werr)
				}
				if got := w.tip(t, "ws"); got != wrote {
					t.Fatalf("workspace at %s, want the acknowledged %s %s", got, write, wrote)
				}
				if err == nil {
					t.Fatalf("promote landed %s (base at %s, workspace %s) although the workspace moved to %s meanwhile",
						w.work, w.tip(t, "app"), w.status(t, "ws"), wrote)
				}
				if lockstep.ErrorCode(err) != lockstep.EREFCONFLICT {
					t.Fatalf("promote after the workspace moved: %v, want ref_conflict", err)
				}
				if tip, st := w.tip(t, "app"), w.status(t, "ws"); tip != w.base || st != lockstep.StatusActive {
					t.Fatalf("after the refused promote: base at %s (want %s), workspace %s (want active)", tip, w.base, st)
				}
				res, err := w.gate.Promote(ctx, w.agent, "ws", PromoteRequest{})
				if err != nil {
					t.Fatalf("promote again: %v", err)
				}
				if res.Theirs != wrote {
					t.Fatalf("promote again landed %s, want the workspace's tip %s", res.Theirs, wrote)
				}
			})
		})
	}
}
