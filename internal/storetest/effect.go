package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep"
)

// effectOn stages an effect on ws (class and run optional).
func effectOn(t *testing.T, s lockstep.Store, ws *lockstep.Repo, n int, class, run string) *lockstep.Effect {
	t.Helper()
	e := &lockstep.Effect{ID: fmt.Sprintf("eff_%s_%d", ws.Name, n), RepoID: ws.ID, Repo: ws.Name, Class: class, RunID: run, KeyName: "agent",
		Request: lockstep.EffectHTTP{Method: "POST", URL: fmt.Sprintf("https://example.com/hook/%d", n), Body: []byte(fmt.Sprintf(`{"n":%d}`, n)),
			Headers: map[string]string{"Authorization": "Bearer tok", "Content-Type": "application/json"}, Secret: []string{"Authorization"}},
		Compensation: &lockstep.EffectHTTP{Method: "DELETE", URL: fmt.Sprintf("https://example.com/hook/%d", n)}}
	must(t, s.StageEffect(bg, e, 0, ent("effect.stage")))
	return e
}

func effectStatus(t *testing.T, s lockstep.Store, id string) string {
	t.Helper()
	e, err := s.Effect(bg, id)
	must(t, err)
	return e.Status
}

// promoteWS moves base's main from oid(1) to newOID and marks ws
// promoted, releasing its effects (classes in hold are held).
func promoteWS(t *testing.T, s lockstep.Store, base, ws *lockstep.Repo, newOID string, hold ...string) {
	t.Helper()
	ref, err := s.Ref(bg, base.ID, "refs/heads/main")
	must(t, err)
	must(t, s.UpdateRefsAndStatus(bg, []lockstep.RefUpdate{{RepoID: base.ID, Repo: base.Name, Name: "refs/heads/main", Old: ref.OID, New: newOID}}, nil, nil, ent("merge"),
		lockstep.StatusChange{RepoID: ws.ID, Repo: ws.Name, From: lockstep.StatusActive, To: lockstep.StatusPromoted, Entry: ent("workspace.promoted"),
			Effects: &lockstep.EffectRelease{Into: base.Name, IntoID: base.ID, Hold: hold}}))
}

func claimAll(t *testing.T, s lockstep.Store, now time.Time) []lockstep.EffectDelivery {
	t.Helper()
	ds, err := s.ClaimEffectDeliveries(bg, now, time.Minute, 100)
	must(t, err)
	return ds
}

func deliverOK(t *testing.T, s lockstep.Store, d lockstep.EffectDelivery, now time.Time) {
	t.Helper()
	must(t, s.RecordEffectAttempt(bg, d, lockstep.EffectAttempt{Kind: d.Kind, Attempt: d.Attempts + 1, StatusCode: 200, At: now}, "succeeded", now))
}

func effectTests() map[string]test {
	main := []lockstep.Ref{{Name: "refs/heads/main", OID: oid(1)}}
	return map[string]test{
		"StageEffect": func(t *testing.T, s lockstep.Store) {
			mustRepo(t, s, "base", "", main...)
			ws := mustRepo(t, s, "ws", "base", main...)
			e := effectOn(t, s, ws, 1, "payment", "run_1")
			// The effect's seq is its entry's.
			ops := opsOf(t, s, "effect.stage")
			if len(ops) != 1 || e.Seq != ops[0].Seq || e.Status != lockstep.EffectStaged || e.CreatedAt.IsZero() {
				t.Fatalf("staged %+v, entries %v", e, ops)
			}
			// The cap counts staged effects: the third is refused, nothing written.
			e2 := &lockstep.Effect{ID: "eff_2", RepoID: ws.ID, Repo: ws.Name, Request: lockstep.EffectHTTP{Method: "POST", URL: "https://example.com/"}}
			must(t, s.StageEffect(bg, e2, 2, ent("effect.stage")))
			e3 := &lockstep.Effect{ID: "eff_3", RepoID: ws.ID, Repo: ws.Name, Request: lockstep.EffectHTTP{Method: "POST", URL: "https://example.com/"}}
			wantCode(t, s.StageEffect(bg, e3, 2, ent("effect.stage")), lockstep.ETOOLARGE)
			wantOps(t, s, "effect.stage", 2)
			// A duplicate id is refused.
			wantCode(t, s.StageEffect(bg, e2, 0, ent("effect.stage")), lockstep.ECONFLICT)
			// A workspace that is not active takes none.
			must(t, s.SetRepoStatus(bg, lockstep.StatusChange{RepoID: ws.ID, Repo: ws.Name, From: lockstep.StatusActive, To: lockstep.StatusFailed, Entry: ent("workspace.failed")}))
			wantCode(t, s.StageEffect(bg, e3, 0, ent("effect.stage")), lockstep.EINVALID)
			wantOps(t, s, "effect.stage", 2)
		},
		"Effect": func(t *testing.T, s lockstep.Store) {
			mustRepo(t, s, "base", "", main...)
			ws := mustRepo(t, s, "ws", "base", main...)
			e := effectOn(t, s, ws, 1, "mail", "run_1")
			got, err := s.Effect(bg, e.ID)
			must(t, err)
			// Round trip, secrets opened.
			if got.Repo != "ws" || got.Seq != e.Seq || got.Request.Method != "POST" || got.Request.URL != e.Request.URL || string(got.Request.Body) != `{"n":1}` ||
				got.Request.Headers["Authorization"] != "Bearer tok" || got.Request.Headers["Content-Type"] != "application/json" ||
				got.Compensation == nil || got.Compensation.Method != "DELETE" || got.Class != "mail" || got.RunID != "run_1" || got.KeyName != "agent" ||
				len(got.History) != 0 {
				t.Fatalf("round trip %+v", got)
			}
			_, err = s.Effect(bg, "eff_none")
			wantCode(t, err, lockstep.ENOTFOUND)
		},
		"Effects": func(t *testing.T, s lockstep.Store) {
			mustRepo(t, s, "base", "", main...)
			ws := mustRepo(t, s, "ws", "base", main...)
			other := mustRepo(t, s, "other", "base", main...)
			var list []*lockstep.Effect
			for i := 1; i <= 3; i++ {
				list = append(list, effectOn(t, s, ws, i, "", ""))
				effectOn(t, s, other, i, "", "")
			}
			page, err := s.Effects(bg, ws.ID, 0, 2)
			must(t, err)
			if len(page) != 2 || page[0].ID != list[0].ID || page[1].ID != list[1].ID {
				t.Fatalf("first page %v", page)
			}
			page, err = s.Effects(bg, ws.ID, page[1].Seq, 2)
			must(t, err)
			if len(page) != 1 || page[0].ID != list[2].ID {
				t.Fatalf("second page %v", page)
			}
		},
		"DiscardEffects": func(t *testing.T, s lockstep.Store) {
			mustRepo(t, s, "base", "", main...)
			ws := mustRepo(t, s, "ws", "base", main...)
			e1 := effectOn(t, s, ws, 1, "", "run_a")
			cp := &lockstep.Checkpoint{ID: "ckpt_1", RepoID: ws.ID, Repo: ws.Name, Branch: "main", Commit: oid(1), Tree: oid(2)}
			must(t, s.CreateCheckpoint(bg, cp, nil, ent("checkpoint.create")))
			e2 := effectOn(t, s, ws, 2, "", "run_a")
			e3 := effectOn(t, s, ws, 3, "", "run_b")
			// By run: only that run's, after the seq.
			ids, err := s.DiscardEffects(bg, lockstep.EffectFilter{RepoID: ws.ID, RunID: "run_a", AfterSeq: e1.Seq, Reason: "run failed"}, ent("effect.discard"))
			must(t, err)
			if len(ids) != 1 || ids[0] != e2.ID || effectStatus(t, s, e1.ID) != lockstep.EffectStaged || effectStatus(t, s, e2.ID) != lockstep.EffectDiscarded {
				t.Fatalf("discarded %v", ids)
			}
			ops := opsOf(t, s, "effect.discard")
			if len(ops) != 1 || ops[0].Details["count"] == nil {
				t.Fatalf("discard entries %+v", ops)
			}
			// Nothing matching: no entry.
			ids, err = s.DiscardEffects(bg, lockstep.EffectFilter{RepoID: ws.ID, RunID: "run_none"}, ent("effect.discard"))
			must(t, err)
			if len(ids) != 0 {
				t.Fatalf("discarded %v", ids)
			}
			wantOps(t, s, "effect.discard", 1)
			_, err = s.DiscardEffects(bg, lockstep.EffectFilter{RepoID: ws.ID, AfterOp: "op_none"}, ent("effect.discard"))
			wantCode(t, err, lockstep.ENOTFOUND)
			// After a checkpoint, carried by the ref move of its restore:
			// discarded with the move, in its transaction.
			e4 := effectOn(t, s, ws, 4, "", "")
			ctx := lockstep.WithEffectDiscard(bg, lockstep.EffectFilter{RepoID: ws.ID, AfterOp: cp.OpID, Reason: "restored"}, ent("effect.discard"))
			// A refused move discards nothing.
			err = s.UpdateRefs(ctx, []lockstep.RefUpdate{{RepoID: ws.ID, Repo: ws.Name, Name: "refs/heads/main", Old: oid(9), New: oid(3)}}, nil, nil, ent("checkpoint.restore"))
			wantCode(t, err, lockstep.EREFCONFLICT)
			if effectStatus(t, s, e3.ID) != lockstep.EffectStaged {
				t.Fatal("a refused restore discarded effects")
			}
			must(t, s.UpdateRefs(ctx, []lockstep.RefUpdate{{RepoID: ws.ID, Repo: ws.Name, Name: "refs/heads/main", Old: oid(1), New: oid(3)}}, nil, nil, ent("checkpoint.restore")))
			if d := lockstep.EffectDiscardFrom(ctx); len(d.Discarded) != 2 || effectStatus(t, s, e1.ID) != lockstep.EffectStaged ||
				effectStatus(t, s, e3.ID) != lockstep.EffectDiscarded || effectStatus(t, s, e4.ID) != lockstep.EffectDiscarded {
				t.Fatalf("restore discarded %v", d.Discarded)
			}
			// A workspace marked failed discards what is left.
			must(t, s.SetRepoStatus(bg, lockstep.StatusChange{RepoID: ws.ID, Repo: ws.Name, From: lockstep.StatusActive, To: lockstep.StatusFailed, Entry: ent("workspace.failed")}))
			if effectStatus(t, s, e1.ID) != lockstep.EffectDiscarded {
				t.Fatal("a failed workspace kept a staged effect")
			}
			wantOps(t, s, "effect.discard", 3)
		},
		"DecideEffect": func(t *testing.T, s lockstep.Store) {
			base := mustRepo(t, s, "base", "", main...)
			ws := mustRepo(t, s, "ws", "base", main...)
			a := effectOn(t, s, ws, 1, "payment", "")
			b := effectOn(t, s, ws, 2, "payment", "")
			_, err := s.DecideEffect(bg, a.ID, true, ent("effect.approve"))
			wantCode(t, err, lockstep.EINVALID) // staged, not held
			promoteWS(t, s, base, ws, oid(5), "payment")
			if effectStatus(t, s, a.ID) != lockstep.EffectHeld {
				t.Fatal("a held class was released")
			}
			// Held rows are not due.
			if ds := claimAll(t, s, time.Now()); len(ds) != 0 {
				t.Fatalf("claimed held effects %v", ds)
			}
			got, err := s.DecideEffect(bg, a.ID, true, ent("effect.approve"))
			must(t, err)
			if got.Status != lockstep.EffectReleasing {
				t.Fatalf("approved: %s", got.Status)
			}
			got, err = s.DecideEffect(bg, b.ID, false, ent("effect.reject"))
			must(t, err)
			if got.Status != lockstep.EffectDiscarded {
				t.Fatalf("rejected: %s", got.Status)
			}
			_, err = s.DecideEffect(bg, b.ID, true, ent("effect.approve"))
			wantCode(t, err, lockstep.EINVALID)
			_, err = s.DecideEffect(bg, "eff_none", true, ent("effect.approve"))
			wantCode(t, err, lockstep.ENOTFOUND)
			if ds := claimAll(t, s, time.Now()); len(ds) != 1 || ds[0].Effect.ID != a.ID {
				t.Fatalf("after approve/reject claimed %v", ds)
			}
			wantOps(t, s, "effect.approve", 1)
			wantOps(t, s, "effect.reject", 1)
		},
		"EffectsReleasedBy": func(t *testing.T, s lockstep.Store) {
			base := mustRepo(t, s, "base", "", main...)
			ws := mustRepo(t, s, "ws", "base", main...)
			a := effectOn(t, s, ws, 1, "", "")
			b := effectOn(t, s, ws, 2, "", "")
			promoteWS(t, s, base, ws, oid(7))
			list, err := s.EffectsReleasedBy(bg, base.ID, oid(7))
			must(t, err)
			if len(list) != 2 || list[0].ID != a.ID || list[1].ID != b.ID || list[0].ReleasedInto != "base" || list[0].ReleasedCommit != oid(7) {
				t.Fatalf("released by %v", list)
			}
			if list, _ := s.EffectsReleasedBy(bg, base.ID, oid(8)); len(list) != 0 {
				t.Fatalf("another commit released %v", list)
			}
		},
		"CompensableEffects": func(t *testing.T, s lockstep.Store) {
			base := mustRepo(t, s, "base", "", main...)
			other := mustRepo(t, s, "other", "", main...)
			ws1 := mustRepo(t, s, "ws1", "base", main...)
			ws2 := mustRepo(t, s, "ws2", "base", main...)
			a := effectOn(t, s, ws1, 1, "", "")
			b := effectOn(t, s, ws1, 2, "", "")
			c := effectOn(t, s, ws2, 3, "", "")
			d := &lockstep.Effect{ID: "eff_ws2_nocomp", RepoID: ws2.ID, Repo: ws2.Name, KeyName: "agent", Request: lockstep.EffectHTTP{Method: "POST", URL: "https://example.com/x"}}
			must(t, s.StageEffect(bg, d, 0, ent("effect.stage")))
			ids := func(list []lockstep.Effect, err error) string {
				t.Helper()
				must(t, err)
				out := ""
				for _, e := range list {
					out += e.ID + " "
				}
				return out
			}
			deliverAll := func() {
				for now := time.Now(); ; now = time.Now() {
					ds := claimAll(t, s, now)
					if len(ds) == 0 {
						return
					}
					for _, dl := range ds {
						deliverOK(t, s, dl, now)
					}
				}
			}
			promoteWS(t, s, base, ws1, oid(7))
			if got := ids(s.CompensableEffects(bg, base.ID, nil, 0)); got != "" {
				t.Fatalf("undelivered effects offered: %s", got)
			}
			deliverAll()
			promoteWS(t, s, base, ws2, oid(8))
			deliverAll()
			abc := a.ID + " " + b.ID + " " + c.ID + " "
			if got := ids(s.CompensableEffects(bg, base.ID, nil, 0)); got != abc {
				t.Fatalf("compensable %s, want %s (by seq, none without a compensation)", got, abc)
			}
			if got := ids(s.CompensableEffects(bg, base.ID, nil, 1)); got != a.ID+" " {
				t.Fatalf("limit 1: %s", got)
			}
			if got := ids(s.CompensableEffects(bg, base.ID, []string{oid(9), oid(8)}, 0)); got != c.ID+" " {
				t.Fatalf("released by oid(8): %s", got)
			}
			if got := ids(s.CompensableEffects(bg, base.ID, []string{oid(8), oid(7)}, 0)); got != abc {
				t.Fatalf("released by both: %s", got)
			}
			if list, err := s.CompensableEffects(bg, base.ID, []string{}, 0); err != nil || len(list) != 0 {
				t.Fatalf("no commits: %v %v", list, err)
			}
			if got := ids(s.CompensableEffects(bg, other.ID, nil, 0)); got != "" {
				t.Fatalf("another base: %s", got)
			}
			_, err := s.QueueCompensations(bg, []string{b.ID}, ent("effect.compensate"))
			must(t, err)
			if got := ids(s.CompensableEffects(bg, base.ID, nil, 0)); got != a.ID+" "+c.ID+" " {
				t.Fatalf("after compensating %s: %s", b.ID, got)
			}
			_, err = s.CompensableEffects(bg, base.ID, make([]string, lockstep.MaxCompensableCommits+1), 0)
			wantCode(t, err, lockstep.EINVALID)
		},
		"ClaimEffectDeliveries": func(t *testing.T, s lockstep.Store) {
			base := mustRepo(t, s, "base", "", main...)
			ws := mustRepo(t, s, "ws", "base", main...)
			a := effectOn(t, s, ws, 1, "", "")
			b := effectOn(t, s, ws, 2, "", "")
			if ds := claimAll(t, s, time.Now()); len(ds) != 0 {
				t.Fatalf("staged effects claimed before the promote: %v", ds)
			}
			promoteWS(t, s, base, ws, oid(7))
			now := time.Now()
			// Staging order: only the first of the lane is due.
			ds := claimAll(t, s, now)
			if len(ds) != 1 || ds[0].Effect.ID != a.ID || ds[0].Kind != lockstep.EffectKindRequest || ds[0].Effect.Request.Headers["Authorization"] != "Bearer tok" {
				t.Fatalf("claimed %+v", ds)
			}
			// Leased: a second worker gets nothing.
			if again := claimAll(t, s, now); len(again) != 0 {
				t.Fatalf("claimed twice: %v", again)
			}
			// An expired lease (a worker that died) is taken over.
			later := now.Add(2 * time.Minute)
			ds = claimAll(t, s, later)
			if len(ds) != 1 || ds[0].Effect.ID != a.ID {
				t.Fatalf("after the lease %v", ds)
			}
			deliverOK(t, s, ds[0], later)
			ds = claimAll(t, s, later)
			if len(ds) != 1 || ds[0].Effect.ID != b.ID {
				t.Fatalf("next in order %v", ds)
			}
		},
		"RecordEffectAttempt": func(t *testing.T, s lockstep.Store) {
			base := mustRepo(t, s, "base", "", main...)
			ws := mustRepo(t, s, "ws", "base", main...)
			a := effectOn(t, s, ws, 1, "", "")
			promoteWS(t, s, base, ws, oid(7))
			now := time.Now()
			ds := claimAll(t, s, now)
			must(t, s.RecordEffectAttempt(bg, ds[0], lockstep.EffectAttempt{Kind: ds[0].Kind, Attempt: 1, StatusCode: 500, Error: "receiver answered 500", At: now}, "pending", now.Add(time.Second)))
			e, err := s.Effect(bg, a.ID)
			must(t, err)
			if e.Status != lockstep.EffectReleasing || e.Attempts != 1 || e.LastStatusCode != 500 || len(e.History) != 1 {
				t.Fatalf("after a failed attempt %+v", e)
			}
			if ds := claimAll(t, s, now); len(ds) != 0 {
				t.Fatal("claimed before its backoff")
			}
			ds = claimAll(t, s, now.Add(2*time.Second))
			if len(ds) != 1 || ds[0].Attempts != 1 {
				t.Fatalf("retry claim %+v", ds)
			}
			deliverOK(t, s, ds[0], now.Add(2*time.Second))
			e, err = s.Effect(bg, a.ID)
			must(t, err)
			if e.Status != lockstep.EffectReleased || e.Attempts != 2 || e.LastStatusCode != 200 || len(e.History) != 2 {
				t.Fatalf("after success %+v", e)
			}
			// A stale claim's attempt (the row is no longer pending) is
			// history only.
			must(t, s.RecordEffectAttempt(bg, ds[0], lockstep.EffectAttempt{Kind: ds[0].Kind, Attempt: 2, StatusCode: 500, At: now}, "failed", now))
			if effectStatus(t, s, a.ID) != lockstep.EffectReleased {
				t.Fatal("a stale attempt changed a released effect")
			}
			wantCode(t, s.RecordEffectAttempt(bg, ds[0], lockstep.EffectAttempt{Attempt: 3}, "bogus", now), lockstep.EINVALID)
		},
		"QueueCompensations": func(t *testing.T, s lockstep.Store) {
			base := mustRepo(t, s, "base", "", main...)
			ws := mustRepo(t, s, "ws", "base", main...)
			a := effectOn(t, s, ws, 1, "", "")
			b := effectOn(t, s, ws, 2, "", "")
			// Not released: skipped.
			q, err := s.QueueCompensations(bg, []string{a.ID}, ent("effect.compensate"))
			must(t, err)
			if len(q) != 0 {
				t.Fatalf("queued %v", q)
			}
			promoteWS(t, s, base, ws, oid(7))
			now := time.Now()
			for i := 0; i < 2; i++ {
				ds := claimAll(t, s, now)
				deliverOK(t, s, ds[0], now)
			}
			q, err = s.QueueCompensations(bg, []string{b.ID, a.ID, a.ID}, ent("effect.compensate"))
			must(t, err)
			now = time.Now()
			if len(q) != 2 || q[0] != b.ID || q[1] != a.ID {
				t.Fatalf("queued %v", q)
			}
			wantOps(t, s, "effect.compensate", 1)
			// Newest first.
			ds := claimAll(t, s, now)
			if len(ds) != 1 || ds[0].Effect.ID != b.ID || ds[0].Kind != lockstep.EffectKindCompensation {
				t.Fatalf("claimed %+v", ds)
			}
			deliverOK(t, s, ds[0], now)
			e, err := s.Effect(bg, b.ID)
			must(t, err)
			if e.CompensationStatus != lockstep.CompensationDone || e.Status != lockstep.EffectReleased {
				t.Fatalf("compensated %+v", e)
			}
		},
	}
}
