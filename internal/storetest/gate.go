package storetest

import (
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep"
)

// outbox makes a base with one hook for every event and n pending deliveries.
func outbox(t *testing.T, s lockstep.Store, n int) (*lockstep.Repo, *lockstep.Hook) {
	t.Helper()
	base := mustRepo(t, s, "base", "")
	h := hookOn(t, s, base, "hook_all", "*")
	for i := 0; i < n; i++ {
		must(t, s.EnqueueEvents(bg, []lockstep.HookEvent{{Repos: []string{"base"}, Event: "check.completed", Payload: map[string]any{"i": i}}}))
	}
	return base, h
}

// later is a time after every delivery enqueued so far.
func later() time.Time { return time.Now().Add(time.Minute) }

func ids(ds []lockstep.Delivery) []string {
	out := []string{}
	for _, d := range ds {
		out = append(out, d.ID)
	}
	sort.Strings(out)
	return out
}

func gateTests() map[string]test {
	clean := false
	return map[string]test{
		"SetPolicy": func(t *testing.T, s lockstep.Store) {
			base := mustRepo(t, s, "base", "")
			p := lockstep.Policy{Branch: "main", RequiredChecks: []string{"ci/test", "ci/lint"}, MaxChangedFiles: 10, MaxChangedLines: 500,
				ProtectedPaths: []string{"migrations/"}, RequireCleanMerge: &clean, PromoteMode: "merge"}
			must(t, s.SetPolicy(bg, base.ID, p, ent("gate.set")))
			got, err := s.Policy(bg, base.ID, "main")
			must(t, err)
			if fmt.Sprint(got.RequiredChecks) != "[ci/test ci/lint]" || got.MaxChangedFiles != 10 || got.MaxChangedLines != 500 ||
				fmt.Sprint(got.ProtectedPaths) != "[migrations/]" || got.RequireCleanMerge == nil || *got.RequireCleanMerge || got.PromoteMode != "merge" {
				t.Fatalf("round trip: %+v", got)
			}
			// Setting again replaces it.
			p2 := lockstep.Policy{Branch: "main", RequiredChecks: []string{"ci/only"}, PromoteMode: "fast-forward"}
			must(t, s.SetPolicy(bg, base.ID, p2, ent("gate.set")))
			got, _ = s.Policy(bg, base.ID, "main")
			if fmt.Sprint(got.RequiredChecks) != "[ci/only]" || got.MaxChangedFiles != 0 || got.RequireCleanMerge != nil || !got.CleanMergeRequired() {
				t.Fatalf("after replace: %+v", got)
			}
			wantOps(t, s, "gate.set", 2)
		},
		"Policy": func(t *testing.T, s lockstep.Store) {
			base := mustRepo(t, s, "base", "")
			other := mustRepo(t, s, "other", "")
			_, err := s.Policy(bg, base.ID, "main")
			wantCode(t, err, lockstep.ENOTFOUND)
			must(t, s.SetPolicy(bg, base.ID, lockstep.Policy{Branch: "main"}, ent("gate.set")))
			_, err = s.Policy(bg, base.ID, "release")
			wantCode(t, err, lockstep.ENOTFOUND)
			_, err = s.Policy(bg, other.ID, "main")
			wantCode(t, err, lockstep.ENOTFOUND)
			got, err := s.Policy(bg, base.ID, "main")
			must(t, err)
			if got.Branch != "main" {
				t.Fatalf("got %+v", got)
			}
		},
		"AddCheck": func(t *testing.T, s lockstep.Store) {
			c := &lockstep.Check{Commit: oid(1), Name: "ci/test", Status: lockstep.CheckSuccess, Summary: "42 passed", DetailsURL: "https://ci/1", KeyName: "ci"}
			must(t, s.AddCheck(bg, "net", c, ent("check.add")))
			if c.ID == 0 || c.CreatedAt.IsZero() {
				t.Fatalf("AddCheck left %+v without id or time", c)
			}
			got, err := s.Checks(bg, "net", oid(1))
			must(t, err)
			if len(got) != 1 || got[0].ID != c.ID || got[0].Summary != "42 passed" || got[0].DetailsURL != "https://ci/1" || got[0].KeyName != "ci" || !got[0].CreatedAt.Equal(c.CreatedAt) {
				t.Fatalf("round trip %+v", got)
			}
			wantOps(t, s, "check.add", 1)
		},
		"Checks": func(t *testing.T, s lockstep.Store) {
			add := func(network, commit, name, status string) {
				must(t, s.AddCheck(bg, network, &lockstep.Check{Commit: commit, Name: name, Status: status}, ent("check.add")))
			}
			add("net", oid(1), "ci/test", lockstep.CheckPending)
			add("net", oid(2), "ci/test", lockstep.CheckSuccess)
			add("other", oid(1), "ci/test", lockstep.CheckFailure)
			add("net", oid(1), "ci/test", lockstep.CheckSuccess) // supersedes; both kept
			add("net", oid(1), "ci/lint", lockstep.CheckError)
			got, err := s.Checks(bg, "net", oid(1))
			must(t, err)
			var seen []string
			for _, c := range got {
				seen = append(seen, c.Name+"="+c.Status)
			}
			if fmt.Sprint(seen) != "[ci/test=pending ci/test=success ci/lint=error]" {
				t.Fatalf("Checks = %v, want every result of that network and commit, oldest first", seen)
			}
			if got, _ := s.Checks(bg, "net", oid(3)); len(got) != 0 {
				t.Fatalf("unknown commit: %+v", got)
			}
		},
		"CreateHook": func(t *testing.T, s lockstep.Store) {
			base := mustRepo(t, s, "base", "")
			h := hookOn(t, s, base, "hook_a", "workspace.pushed", "check.completed")
			if h.CreatedAt.IsZero() {
				t.Fatal("CreateHook set no creation time")
			}
			got, err := s.Hook(bg, "hook_a")
			must(t, err)
			if got.Repo != "base" || got.RepoID != base.ID || got.URL != h.URL || got.Secret != h.Secret || !got.Active ||
				fmt.Sprint(got.Events) != "[workspace.pushed check.completed]" || got.PrevSecret != "" || got.PrevSecretUntil != nil {
				t.Fatalf("round trip %+v", got)
			}
			wantOps(t, s, "hook.create", 1)
		},
		"Hooks": func(t *testing.T, s lockstep.Store) {
			base := mustRepo(t, s, "base", "")
			other := mustRepo(t, s, "other", "")
			hookOn(t, s, base, "hook_a", "*")
			hookOn(t, s, base, "hook_b", "*")
			hookOn(t, s, other, "hook_c", "*")
			must(t, s.DeactivateHook(bg, "hook_b", ent("hook.delete")))
			got, err := s.Hooks(bg, base.ID)
			must(t, err)
			var hs []string
			for _, h := range got {
				hs = append(hs, fmt.Sprintf("%s:%v", h.ID, h.Active))
			}
			sort.Strings(hs)
			if fmt.Sprint(hs) != "[hook_a:true hook_b:false]" {
				t.Fatalf("Hooks = %v, want both of base's hooks, inactive ones included", hs)
			}
			if got, _ := s.Hooks(bg, mustRepo(t, s, "none", "").ID); len(got) != 0 {
				t.Fatalf("a repository without hooks: %+v", got)
			}
		},
		"Hook": func(t *testing.T, s lockstep.Store) {
			_, err := s.Hook(bg, "hook_none")
			wantCode(t, err, lockstep.ENOTFOUND)
			hookOn(t, s, mustRepo(t, s, "base", ""), "hook_a", "*")
			if h, err := s.Hook(bg, "hook_a"); err != nil || h.ID != "hook_a" {
				t.Fatalf("Hook = %+v, %v", h, err)
			}
		},
		"RotateHookSecret": func(t *testing.T, s lockstep.Store) {
			hookOn(t, s, mustRepo(t, s, "base", ""), "hook_a", "*")
			wantCode(t, s.RotateHookSecret(bg, "hook_none", "new", "", time.Time{}, ent("hook.rotate")), lockstep.ENOTFOUND)
			wantOps(t, s, "hook.rotate", 0)
			until := at(3600)
			must(t, s.RotateHookSecret(bg, "hook_a", "second", "secret-hook_a", until, ent("hook.rotate")))
			h, err := s.Hook(bg, "hook_a")
			must(t, err)
			if h.Secret != "second" || h.PrevSecret != "secret-hook_a" || h.PrevSecretUntil == nil || !h.PrevSecretUntil.Equal(until) {
				t.Fatalf("after rotation with overlap: %+v", h)
			}
			// prev "" ends any overlap.
			must(t, s.RotateHookSecret(bg, "hook_a", "third", "", time.Time{}, ent("hook.rotate")))
			h, _ = s.Hook(bg, "hook_a")
			if h.Secret != "third" || h.PrevSecret != "" || h.PrevSecretUntil != nil {
				t.Fatalf("after rotation without overlap: %+v", h)
			}
			wantOps(t, s, "hook.rotate", 2)
		},
		"DeactivateHook": func(t *testing.T, s lockstep.Store) {
			_, h := outbox(t, s, 2)
			must(t, s.DeactivateHook(bg, h.ID, ent("hook.delete")))
			got, err := s.Hook(bg, h.ID)
			must(t, err)
			if got.Active {
				t.Fatal("hook still active")
			}
			// Its pending deliveries stop, none is claimed, none is added.
			if ds, err := s.ClaimDeliveries(bg, later(), time.Minute, 10); err != nil || len(ds) != 0 {
				t.Fatalf("claimed %v, %v after deactivation", ds, err)
			}
			must(t, s.EnqueueEvents(bg, []lockstep.HookEvent{{Repos: []string{"base"}, Event: "x"}}))
			ds := deliveries(t, s, h.ID)
			if len(ds) != 2 {
				t.Fatalf("%d deliveries, want the 2 of before (kept for history)", len(ds))
			}
			for _, d := range ds {
				if d.Status == lockstep.DeliveryPending {
					t.Fatalf("delivery %s still pending", d.ID)
				}
			}
			wantOps(t, s, "hook.delete", 1)
		},
		"EnqueueEvents": func(t *testing.T, s lockstep.Store) {
			base := mustRepo(t, s, "base", "")
			other := mustRepo(t, s, "other", "")
			hookOn(t, s, base, "hook_push", "workspace.pushed")
			hookOn(t, s, base, "hook_all", "*")
			hookOn(t, s, other, "hook_other", "*")
			must(t, s.EnqueueEvents(bg, []lockstep.HookEvent{
				{Repos: []string{"base"}, Event: "workspace.pushed", Payload: map[string]any{"n": 1}},
				{Repos: []string{"base"}, Event: "check.completed"},
				{Repos: []string{"base", "other"}, Event: "workspace.failed"},
				{Repos: nil, Event: "workspace.pushed"}, // no repository: nobody
			}))
			if n := len(deliveries(t, s, "hook_push")); n != 1 {
				t.Fatalf("hook_push: %d deliveries, want 1 (its one event)", n)
			}
			if n := len(deliveries(t, s, "hook_all")); n != 3 {
				t.Fatalf("hook_all: %d deliveries, want 3", n)
			}
			if n := len(deliveries(t, s, "hook_other")); n != 1 {
				t.Fatalf("hook_other: %d deliveries, want 1", n)
			}
			d := deliveries(t, s, "hook_push")[0]
			if d.Status != lockstep.DeliveryPending || d.Attempts != 0 || d.HookID != "hook_push" || d.Payload != `{"n":1}` {
				t.Fatalf("delivery %+v", d)
			}
		},
		"ClaimDeliveries": func(t *testing.T, s lockstep.Store) {
			outbox(t, s, 3)
			// Nothing is due before it was enqueued.
			if ds, err := s.ClaimDeliveries(bg, time.Now().Add(-time.Hour), time.Minute, 10); err != nil || len(ds) != 0 {
				t.Fatalf("claimed %v, %v before they were due", ds, err)
			}
			now := later()
			first, err := s.ClaimDeliveries(bg, now, time.Minute, 2)
			must(t, err)
			if len(first) != 2 {
				t.Fatalf("claimed %d, want 2 (n)", len(first))
			}
			// Leased: the next claim gets only the third.
			second, err := s.ClaimDeliveries(bg, now, time.Minute, 10)
			must(t, err)
			if len(second) != 1 || second[0].ID == first[0].ID || second[0].ID == first[1].ID {
				t.Fatalf("second claim %v (first %v)", ids(second), ids(first))
			}
			// After the lease ends they are claimable again (a dead worker).
			again, err := s.ClaimDeliveries(bg, now.Add(2*time.Minute), time.Minute, 10)
			must(t, err)
			if len(again) != 3 {
				t.Fatalf("after the leases ended: claimed %d, want 3", len(again))
			}
		},
		"ClaimDeliveries/concurrent": func(t *testing.T, s lockstep.Store) {
			outbox(t, s, 20)
			now := later()
			var mu sync.Mutex
			seen := map[string]int{}
			var wg sync.WaitGroup
			errs := make(chan error, 6)
			for w := 0; w < 6; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ds, err := s.ClaimDeliveries(bg, now, time.Minute, 20)
					errs <- err
					mu.Lock()
					for _, d := range ds {
						seen[d.ID]++
					}
					mu.Unlock()
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				must(t, err)
			}
			for id, n := range seen {
				if n != 1 {
					t.Fatalf("delivery %s held by %d workers at once", id, n)
				}
			}
			if len(seen) != 20 {
				t.Fatalf("%d deliveries claimed, want all 20", len(seen))
			}
		},
		"RecordAttempt": func(t *testing.T, s lockstep.Store) {
			_, h := outbox(t, s, 2)
			now := later()
			ds, err := s.ClaimDeliveries(bg, now, time.Minute, 10)
			must(t, err)
			if len(ds) != 2 {
				t.Fatalf("claimed %d", len(ds))
			}
			failed, ok := ds[0], ds[1]
			retry := now.Add(time.Hour)
			must(t, s.RecordAttempt(bg, failed.ID, lockstep.DeliveryAttempt{Attempt: 1, StatusCode: 502, DurationMS: 12.5, Error: "bad gateway", NextRetryAt: &retry, At: now}, lockstep.DeliveryPending, retry))
			must(t, s.RecordAttempt(bg, ok.ID, lockstep.DeliveryAttempt{Attempt: 1, StatusCode: 200, DurationMS: 3, At: now}, lockstep.DeliverySucceeded, now))
			byID := map[string]lockstep.Delivery{}
			for _, d := range deliveries(t, s, h.ID) {
				byID[d.ID] = d
			}
			f := byID[failed.ID]
			if f.Status != lockstep.DeliveryPending || f.Attempts != 1 || !f.NextAttemptAt.Equal(retry.UTC().Truncate(time.Microsecond)) || len(f.History) != 1 {
				t.Fatalf("failed delivery %+v", f)
			}
			if a := f.History[0]; a.StatusCode != 502 || a.DurationMS != 12.5 || a.Error != "bad gateway" || a.NextRetryAt == nil {
				t.Fatalf("attempt %+v", a)
			}
			if d := byID[ok.ID]; d.Status != lockstep.DeliverySucceeded || d.Attempts != 1 || len(d.History) != 1 {
				t.Fatalf("succeeded delivery %+v", d)
			}
			// The retry is not due before its time; it is after.
			if ds, _ := s.ClaimDeliveries(bg, now.Add(2*time.Minute), time.Minute, 10); len(ds) != 0 {
				t.Fatalf("claimed %v before the retry time", ids(ds))
			}
			if ds, _ := s.ClaimDeliveries(bg, retry.Add(time.Second), time.Minute, 10); len(ds) != 1 || ds[0].ID != failed.ID || ds[0].Attempts != 1 {
				t.Fatalf("at the retry time claimed %+v", ds)
			}
		},
		"Deliveries": func(t *testing.T, s lockstep.Store) {
			_, h := outbox(t, s, 0)
			for i := 0; i < 3; i++ {
				must(t, s.EnqueueEvents(bg, []lockstep.HookEvent{{Repos: []string{"base"}, Event: fmt.Sprintf("e%d", i)}}))
				time.Sleep(2 * time.Millisecond) // distinct creation times (ordering, not timing, is asserted)
			}
			ds := deliveries(t, s, h.ID)
			if len(ds) != 3 || ds[0].Event != "e2" || ds[1].Event != "e1" || ds[2].Event != "e0" {
				t.Fatalf("Deliveries = %+v, want newest first", ds)
			}
			for _, d := range ds {
				if d.History == nil || len(d.History) != 0 {
					t.Fatalf("a delivery never tried has history %v, want empty", d.History)
				}
			}
			lim, err := s.Deliveries(bg, h.ID, 2)
			must(t, err)
			if len(lim) != 2 || lim[0].Event != "e2" {
				t.Fatalf("limit 2: %+v", lim)
			}
			if none, err := s.Deliveries(bg, "hook_none", 10); err != nil || len(none) != 0 {
				t.Fatalf("unknown hook: %v %v", none, err)
			}
		},
	}
}
