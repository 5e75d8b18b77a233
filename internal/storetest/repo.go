package storetest

import (
	"fmt"
	"sync"
	"testing"

	"github.com/lockstep-hq/lockstep"
)

const mainRef = "refs/heads/main"

func upd(r *lockstep.Repo, name, old, new string) lockstep.RefUpdate {
	return lockstep.RefUpdate{RepoID: r.ID, Repo: r.Name, Name: name, Old: old, New: new}
}

func refOID(t *testing.T, s lockstep.Store, r *lockstep.Repo, name string) string {
	t.Helper()
	ref, err := s.Ref(bg, r.ID, name)
	if lockstep.ErrorCode(err) == lockstep.ENOTFOUND {
		return lockstep.ZeroOID
	}
	must(t, err)
	return ref.OID
}

func status(t *testing.T, s lockstep.Store, name string) lockstep.Status {
	t.Helper()
	r, err := s.RepoByName(bg, name)
	must(t, err)
	return r.Status
}

// setStatus moves r from its status active to st.
func setStatus(t *testing.T, s lockstep.Store, r *lockstep.Repo, st lockstep.Status, op string) {
	t.Helper()
	must(t, s.SetRepoStatus(bg, lockstep.StatusChange{RepoID: r.ID, Repo: r.Name, From: lockstep.StatusActive, To: st, Entry: ent(op)}))
}

func names(rs []*lockstep.Repo) string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Name)
	}
	return fmt.Sprint(out)
}

// hookOn creates an active hook on r for events.
func hookOn(t *testing.T, s lockstep.Store, r *lockstep.Repo, id string, events ...string) *lockstep.Hook {
	t.Helper()
	h := &lockstep.Hook{ID: id, RepoID: r.ID, Repo: r.Name, URL: "http://127.0.0.1:1/" + id, Secret: "secret-" + id, Events: events, Active: true}
	must(t, s.CreateHook(bg, h, ent("hook.create")))
	return h
}

func deliveries(t *testing.T, s lockstep.Store, hookID string) []lockstep.Delivery {
	t.Helper()
	ds, err := s.Deliveries(bg, hookID, 100)
	must(t, err)
	return ds
}

func repoTests() map[string]test {
	return map[string]test{
		"CreateRepo": func(t *testing.T, s lockstep.Store) {
			r := &lockstep.Repo{Name: "base", Network: "base", DefaultBranch: "main", OwnerKeyID: "k1", OwnerName: "alice", BaseCommit: oid(1), Task: "t1"}
			must(t, s.CreateRepo(bg, r, []lockstep.Ref{{Name: mainRef, OID: oid(1)}, {Name: "refs/tags/v1", OID: oid(2)}}, ent("repo.create")))
			if r.ID == 0 || r.Status != lockstep.StatusActive || r.CreatedAt.IsZero() {
				t.Fatalf("created: %+v (want an id, status active, a creation time)", r)
			}
			got, err := s.RepoByName(bg, "base")
			must(t, err)
			if got.ID != r.ID || got.Network != "base" || got.OwnerKeyID != "k1" || got.OwnerName != "alice" || got.BaseCommit != oid(1) || got.Task != "t1" || got.DefaultBranch != "main" || !got.CreatedAt.Equal(r.CreatedAt) {
				t.Fatalf("round trip: %+v, want %+v", got, r)
			}
			if refOID(t, s, r, mainRef) != oid(1) || refOID(t, s, r, "refs/tags/v1") != oid(2) {
				t.Fatal("initial refs not stored")
			}
			wantOps(t, s, "repo.create", 1)
			// The name is unique; a refused repository writes nothing.
			err = s.CreateRepo(bg, &lockstep.Repo{Name: "base", Network: "other", DefaultBranch: "main"}, []lockstep.Ref{{Name: "refs/heads/x", OID: oid(3)}}, ent("repo.create"))
			wantCode(t, err, lockstep.ECONFLICT)
			wantOps(t, s, "repo.create", 1)
			if refOID(t, s, r, "refs/heads/x") != lockstep.ZeroOID {
				t.Fatal("a refused CreateRepo added a ref")
			}
			wantChain(t, s, 1)
		},
		"ForkRepo": func(t *testing.T, s lockstep.Store) {
			base := &lockstep.Repo{Name: "base", Network: "net", DefaultBranch: "trunk"}
			must(t, s.CreateRepo(bg, base, []lockstep.Ref{{Name: "refs/heads/trunk", OID: oid(1)}, {Name: "refs/heads/a/b", OID: oid(2)},
				{Name: "refs/tags/v1", OID: oid(3)}, {Name: "refs/heads", OID: oid(4)}, {Name: "refs/notes/x", OID: oid(5)}}, nil))
			var copied []lockstep.Ref
			e := ent("fork")
			ws := &lockstep.Repo{Name: "ws", OwnerKeyID: "k1", OwnerName: "alice", Task: "t1"}
			must(t, s.ForkRepo(bg, "base", ws, 0, e, func(refs []lockstep.Ref) {
				copied = refs
				if ws.ID == 0 || ws.Network != "net" || ws.ForkOf != "base" || ws.DefaultBranch != "trunk" || ws.BaseCommit != oid(1) {
					t.Errorf("ws when fill runs: %+v", ws)
				}
				e.Details = map[string]any{"base_commit": ws.BaseCommit}
			}))
			// Only branch refs, ordered by name.
			if len(copied) != 2 || copied[0] != (lockstep.Ref{Name: "refs/heads/a/b", OID: oid(2)}) || copied[1] != (lockstep.Ref{Name: "refs/heads/trunk", OID: oid(1)}) {
				t.Fatalf("copied %+v", copied)
			}
			got, err := s.RepoByName(bg, "ws")
			must(t, err)
			if got.ID != ws.ID || got.Network != "net" || got.ForkOf != "base" || got.DefaultBranch != "trunk" || got.BaseCommit != oid(1) ||
				got.Status != lockstep.StatusActive || got.OwnerKeyID != "k1" || got.OwnerName != "alice" || got.Task != "t1" || !got.CreatedAt.Equal(ws.CreatedAt) {
				t.Fatalf("round trip: %+v, want %+v", got, ws)
			}
			refs, err := s.Refs(bg, ws.ID)
			must(t, err)
			if len(refs) != 2 || refs[0].Name != "refs/heads/a/b" || refs[0].OID != oid(2) || refs[1].Name != "refs/heads/trunk" || refs[1].OID != oid(1) {
				t.Fatalf("refs of the fork: %+v", refs)
			}
			ops := opsOf(t, s, "fork")
			if len(ops) != 1 || ops[0].Details["base_commit"] != oid(1) {
				t.Fatalf("fork entries: %+v", ops)
			}
			// A base without its default branch: no base commit.
			must(t, s.CreateRepo(bg, &lockstep.Repo{Name: "bare", Network: "bare", DefaultBranch: "main"}, []lockstep.Ref{{Name: "refs/heads/dev", OID: oid(6)}}, nil))
			ws2 := &lockstep.Repo{Name: "ws2"}
			must(t, s.ForkRepo(bg, "bare", ws2, 0, ent("fork"), nil))
			if ws2.BaseCommit != "" || ws2.Network != "bare" || refOID(t, s, ws2, "refs/heads/dev") != oid(6) {
				t.Fatalf("fork of a base without its default branch: %+v", ws2)
			}
			// No base: not_found as RepoByName says it, nothing created;
			// fill is not called.
			called := false
			err = s.ForkRepo(bg, "nope", &lockstep.Repo{Name: "ws3"}, 0, ent("fork"), func([]lockstep.Ref) { called = true })
			wantCode(t, err, lockstep.ENOTFOUND)
			_, rerr := s.RepoByName(bg, "nope")
			if called || lockstep.ErrorMessage(err) != lockstep.ErrorMessage(rerr) {
				t.Fatalf("fork of no base: %v (fill called %v), want %v", err, called, rerr)
			}
			_, err = s.RepoByName(bg, "ws3")
			wantCode(t, err, lockstep.ENOTFOUND)
			// A taken name: already_exists, nothing written.
			err = s.ForkRepo(bg, "bare", &lockstep.Repo{Name: "ws"}, 0, ent("fork"), nil)
			wantCode(t, err, lockstep.ECONFLICT)
			if refOID(t, s, ws, "refs/heads/dev") != lockstep.ZeroOID {
				t.Fatal("a refused fork added a ref")
			}
			wantOps(t, s, "fork", 2)
			wantChain(t, s, 2)
			// A bound on the owner's active workspaces (ws is k1's only
			// one): at it, rate_limited and nothing written.
			must(t, s.ForkRepo(bg, "bare", &lockstep.Repo{Name: "ws4", OwnerKeyID: "k1"}, 2, ent("fork"), nil))
			err = s.ForkRepo(bg, "bare", &lockstep.Repo{Name: "ws5", OwnerKeyID: "k1", OwnerName: "alice"}, 2, ent("fork"), nil)
			wantCode(t, err, lockstep.ERATELIMITED)
			_, err = s.RepoByName(bg, "ws5")
			wantCode(t, err, lockstep.ENOTFOUND)
			wantOps(t, s, "fork", 3)
			wantChain(t, s, 3)
		},
		"RepoByName": func(t *testing.T, s lockstep.Store) {
			_, err := s.RepoByName(bg, "nope")
			wantCode(t, err, lockstep.ENOTFOUND)
			mustRepo(t, s, "base", "")
			ws := mustRepo(t, s, "ws", "base")
			got, err := s.RepoByName(bg, "ws")
			must(t, err)
			if got.ID != ws.ID || got.ForkOf != "base" || got.Network != "base" || got.Status != lockstep.StatusActive {
				t.Fatalf("got %+v", got)
			}
		},
		"ListRepos": func(t *testing.T, s lockstep.Store) {
			mustRepo(t, s, "b-base", "")
			mustRepo(t, s, "a-other", "")
			for _, n := range []string{"ws-3", "ws-1", "ws-2"} {
				r := &lockstep.Repo{Name: n, Network: "b-base", ForkOf: "b-base", DefaultBranch: "main", Task: map[string]string{"ws-1": "t1", "ws-2": "t2", "ws-3": "t1"}[n]}
				must(t, s.CreateRepo(bg, r, nil, ent("fork")))
			}
			ws2, _ := s.RepoByName(bg, "ws-2")
			setStatus(t, s, ws2, lockstep.StatusFailed, "workspace.failed")
			mustRepo(t, s, "ws-x", "a-other")
			list := func(f lockstep.RepoFilter) string {
				t.Helper()
				rs, err := s.ListRepos(bg, f)
				must(t, err)
				return names(rs)
			}
			for _, c := range []struct {
				f    lockstep.RepoFilter
				want string
			}{
				{lockstep.RepoFilter{}, "[a-other b-base ws-1 ws-2 ws-3 ws-x]"},
				{lockstep.RepoFilter{ForkOf: "b-base"}, "[ws-1 ws-2 ws-3]"},
				{lockstep.RepoFilter{Network: "b-base"}, "[b-base ws-1 ws-2 ws-3]"},
				{lockstep.RepoFilter{Task: "t1"}, "[ws-1 ws-3]"},
				{lockstep.RepoFilter{Status: lockstep.StatusFailed}, "[ws-2]"},
				{lockstep.RepoFilter{ForkOf: "b-base", Status: lockstep.StatusActive}, "[ws-1 ws-3]"},
				{lockstep.RepoFilter{After: "b-base"}, "[ws-1 ws-2 ws-3 ws-x]"},
				{lockstep.RepoFilter{After: "ws-1", Limit: 2}, "[ws-2 ws-3]"},
				{lockstep.RepoFilter{Limit: 1}, "[a-other]"},
				{lockstep.RepoFilter{ForkOf: "nobody"}, "[]"},
			} {
				if got := list(c.f); got != c.want {
					t.Errorf("ListRepos(%+v) = %s, want %s", c.f, got, c.want)
				}
			}
		},
		"Tasks": func(t *testing.T, s lockstep.Store) {
			mustRepo(t, s, "base", "")
			mustRepo(t, s, "other", "")
			mk := func(name, forkOf, task string) *lockstep.Repo {
				r := &lockstep.Repo{Name: name, Network: forkOf, ForkOf: forkOf, DefaultBranch: "main", Task: task}
				must(t, s.CreateRepo(bg, r, nil, ent("fork")))
				return r
			}
			mk("w1", "base", "beta")
			w2 := mk("w2", "base", "alpha")
			mk("w3", "base", "alpha")
			mk("w4", "base", "gamma")
			mk("w5", "base", "") // no label: not a task
			mk("w6", "other", "alpha")
			setStatus(t, s, w2, lockstep.StatusPromoted, "promote")
			got, err := s.Tasks(bg, "base", "", 0)
			must(t, err)
			if len(got) != 3 || got[0].Task != "alpha" || got[1].Task != "beta" || got[2].Task != "gamma" {
				t.Fatalf("Tasks = %+v, want alpha beta gamma", got)
			}
			if a := got[0]; a.Total != 2 || a.ByStatus[string(lockstep.StatusActive)] != 1 || a.ByStatus[string(lockstep.StatusPromoted)] != 1 {
				t.Fatalf("alpha counts %+v (the other base's alpha must not count)", a)
			}
			got, err = s.Tasks(bg, "base", "alpha", 1)
			must(t, err)
			if len(got) != 1 || got[0].Task != "beta" || got[0].Total != 1 {
				t.Fatalf("page after alpha, limit 1: %+v", got)
			}
			got, err = s.Tasks(bg, "nobody", "", 0)
			must(t, err)
			if len(got) != 0 {
				t.Fatalf("unknown base: %+v", got)
			}
		},
		"SetRepoStatus": func(t *testing.T, s lockstep.Store) {
			mustRepo(t, s, "base", "")
			ws := mustRepo(t, s, "ws", "base")
			setStatus(t, s, ws, lockstep.StatusAbandoned, "workspace.abandon")
			if got := status(t, s, "ws"); got != lockstep.StatusAbandoned {
				t.Fatalf("status %s", got)
			}
			if status(t, s, "base") != lockstep.StatusActive {
				t.Fatal("the base's status changed")
			}
			wantOps(t, s, "workspace.abandon", 1)
			// Unknown repository: not_found, nothing logged.
			err := s.SetRepoStatus(bg, lockstep.StatusChange{RepoID: 1 << 40, Repo: "gone", From: lockstep.StatusActive, To: lockstep.StatusFailed, Entry: ent("workspace.failed")})
			wantCode(t, err, lockstep.ENOTFOUND)
			wantOps(t, s, "workspace.failed", 0)
		},
		"SetRepoStatus/compare-and-swap": func(t *testing.T, s lockstep.Store) {
			// A change decided on a status that is no longer current loses:
			// nothing changes, nothing is logged, and the error names both.
			mustRepo(t, s, "base", "")
			ws := mustRepo(t, s, "ws", "base")
			setStatus(t, s, ws, lockstep.StatusFailed, "workspace.failed")
			err := s.SetRepoStatus(bg, lockstep.StatusChange{RepoID: ws.ID, Repo: ws.Name, From: lockstep.StatusActive, To: lockstep.StatusAbandoned, Entry: ent("workspace.abandoned")})
			wantCode(t, err, lockstep.EREFCONFLICT)
			if d := lockstep.ErrorDetails(err); d["expected"] != "active" || d["actual"] != "failed" {
				t.Fatalf("conflict details %v, want expected active, actual failed", d)
			}
			if got := status(t, s, "ws"); got != lockstep.StatusFailed {
				t.Fatalf("status %s after a lost compare-and-swap", got)
			}
			wantOps(t, s, "workspace.abandoned", 0)
			// From the current status it lands.
			must(t, s.SetRepoStatus(bg, lockstep.StatusChange{RepoID: ws.ID, Repo: ws.Name, From: lockstep.StatusFailed, To: lockstep.StatusActive, Entry: ent("workspace.active")}))
			// Racing changes from one status: exactly one wins.
			const n = 8
			var wg sync.WaitGroup
			errs := make(chan error, n)
			for i := 0; i < n; i++ {
				wg.Add(1)
				go func(i int) {
					defer wg.Done()
					to := []lockstep.Status{lockstep.StatusFailed, lockstep.StatusAbandoned}[i%2]
					errs <- s.SetRepoStatus(bg, lockstep.StatusChange{RepoID: ws.ID, Repo: ws.Name, From: lockstep.StatusActive, To: to, Entry: ent("workspace.race")})
				}(i)
			}
			wg.Wait()
			close(errs)
			wins := 0
			for err := range errs {
				switch lockstep.ErrorCode(err) {
				case "":
					wins++
				case lockstep.EREFCONFLICT:
				default:
					t.Fatalf("racing status changes: %v", err)
				}
			}
			if wins != 1 {
				t.Fatalf("%d racing status changes won, want 1", wins)
			}
			wantOps(t, s, "workspace.race", 1)
			if got := status(t, s, "ws"); got != lockstep.StatusFailed && got != lockstep.StatusAbandoned {
				t.Fatalf("status %s after the race", got)
			}
		},
		"Refs": func(t *testing.T, s lockstep.Store) {
			r := mustRepo(t, s, "base", "", lockstep.Ref{Name: "refs/heads/z", OID: oid(1)}, lockstep.Ref{Name: "refs/heads/a", OID: oid(2)}, lockstep.Ref{Name: "refs/tags/m", OID: oid(3)})
			other := mustRepo(t, s, "other", "", lockstep.Ref{Name: mainRef, OID: oid(9)})
			refs, err := s.Refs(bg, r.ID)
			must(t, err)
			if len(refs) != 3 || refs[0].Name != "refs/heads/a" || refs[1].Name != "refs/heads/z" || refs[2].Name != "refs/tags/m" || refs[0].OID != oid(2) || refs[0].UpdatedAt.IsZero() {
				t.Fatalf("Refs = %+v, want a z m by name", refs)
			}
			if refs, _ := s.Refs(bg, other.ID); len(refs) != 1 {
				t.Fatalf("other repo: %+v", refs)
			}
			empty := mustRepo(t, s, "empty", "")
			if refs, err := s.Refs(bg, empty.ID); err != nil || len(refs) != 0 {
				t.Fatalf("empty repo: %v %v", refs, err)
			}
		},
		"AllRefs": func(t *testing.T, s lockstep.Store) {
			mustRepo(t, s, "a", "", lockstep.Ref{Name: mainRef, OID: oid(1)}, lockstep.Ref{Name: "refs/heads/b", OID: oid(2)})
			mustRepo(t, s, "b", "", lockstep.Ref{Name: mainRef, OID: oid(3)})
			mustRepo(t, s, "empty", "")
			all, err := s.AllRefs(bg)
			must(t, err)
			if len(all) != 2 || len(all["a"]) != 2 || len(all["b"]) != 1 || all["b"][0].OID != oid(3) || len(all["empty"]) != 0 {
				t.Fatalf("AllRefs = %+v", all)
			}
		},
		"Ref": func(t *testing.T, s lockstep.Store) {
			r := mustRepo(t, s, "base", "", lockstep.Ref{Name: mainRef, OID: oid(1)})
			ref, err := s.Ref(bg, r.ID, mainRef)
			must(t, err)
			if ref.Name != mainRef || ref.OID != oid(1) {
				t.Fatalf("Ref = %+v", ref)
			}
			_, err = s.Ref(bg, r.ID, "refs/heads/none")
			wantCode(t, err, lockstep.ENOTFOUND)
			other := mustRepo(t, s, "other", "")
			_, err = s.Ref(bg, other.ID, mainRef)
			wantCode(t, err, lockstep.ENOTFOUND)
		},
		"UpdateRefs": func(t *testing.T, s lockstep.Store) {
			r := mustRepo(t, s, "base", "")
			up := func(updates ...lockstep.RefUpdate) error {
				return s.UpdateRefs(bg, updates, nil, nil, ent("push"))
			}
			// Create, move, delete.
			must(t, up(upd(r, mainRef, lockstep.ZeroOID, oid(1))))
			must(t, up(upd(r, mainRef, oid(1), oid(2))))
			must(t, up(upd(r, "refs/heads/tmp", lockstep.ZeroOID, oid(5))))
			must(t, up(upd(r, "refs/heads/tmp", oid(5), lockstep.ZeroOID)))
			if refOID(t, s, r, mainRef) != oid(2) || refOID(t, s, r, "refs/heads/tmp") != lockstep.ZeroOID {
				t.Fatal("create/move/delete did not apply")
			}
			wantOps(t, s, "push", 4)
			// A stale expectation: ref_conflict with expected and actual,
			// nothing changes, no entry.
			err := up(upd(r, mainRef, oid(1), oid(3)))
			wantCode(t, err, lockstep.EREFCONFLICT)
			if d := lockstep.ErrorDetails(err); d["expected"] != oid(1) || d["actual"] != oid(2) {
				t.Fatalf("details %v, want expected %s actual %s", d, oid(1), oid(2))
			}
			err = up(upd(r, mainRef, lockstep.ZeroOID, oid(3))) // create over an existing ref
			wantCode(t, err, lockstep.EREFCONFLICT)
			if d := lockstep.ErrorDetails(err); d["actual"] != oid(2) {
				t.Fatalf("details %v", d)
			}
			err = up(upd(r, "refs/heads/none", oid(1), oid(3))) // move a missing ref
			wantCode(t, err, lockstep.EREFCONFLICT)
			if d := lockstep.ErrorDetails(err); d["actual"] != lockstep.ZeroOID {
				t.Fatalf("details %v", d)
			}
			wantOps(t, s, "push", 4)
			// All or nothing: one stale update among good ones undoes them.
			err = up(upd(r, "refs/heads/new", lockstep.ZeroOID, oid(7)), upd(r, mainRef, oid(2), oid(8)), upd(r, "refs/heads/x", oid(9), oid(7)))
			wantCode(t, err, lockstep.EREFCONFLICT)
			if refOID(t, s, r, "refs/heads/new") != lockstep.ZeroOID || refOID(t, s, r, mainRef) != oid(2) {
				t.Fatal("a failed multi-ref update applied part of itself")
			}
			wantOps(t, s, "push", 4)
			// Several refs of several repositories in one call.
			r2 := mustRepo(t, s, "second", "")
			must(t, up(upd(r, mainRef, oid(2), oid(3)), upd(r2, mainRef, lockstep.ZeroOID, oid(4))))
			if refOID(t, s, r, mainRef) != oid(3) || refOID(t, s, r2, mainRef) != oid(4) {
				t.Fatal("multi-repository update did not apply")
			}
			// One transaction may replace "a" by "a/b" (deletes first).
			must(t, up(upd(r, "refs/heads/a", lockstep.ZeroOID, oid(1))))
			must(t, up(upd(r, "refs/heads/a/b", lockstep.ZeroOID, oid(1)), upd(r, "refs/heads/a", oid(1), lockstep.ZeroOID)))
			if refOID(t, s, r, "refs/heads/a/b") != oid(1) {
				t.Fatal("replacing a by a/b failed")
			}
			wantChain(t, s, int64(len(opsOf(t, s, "push"))+2))
		},
		"UpdateRefs/attempts": func(t *testing.T, s lockstep.Store) {
			mustRepo(t, s, "base", "")
			ws := mustRepo(t, s, "ws", "base")
			att := []lockstep.AttemptRecord{{RepoID: ws.ID, Attempt: lockstep.Attempt{Commit: oid(1), Tree: oid(11), Branch: "main", Op: "push", KeyName: "agent"}}}
			must(t, s.UpdateRefs(bg, []lockstep.RefUpdate{upd(ws, mainRef, lockstep.ZeroOID, oid(1))}, att, nil, ent("push")))
			// A refused update records no attempt.
			att[0].Commit = oid(2)
			wantCode(t, s.UpdateRefs(bg, []lockstep.RefUpdate{upd(ws, mainRef, oid(5), oid(2))}, att, nil, ent("push")), lockstep.EREFCONFLICT)
			got, err := s.Attempts(bg, ws.ID, 0)
			must(t, err)
			if len(got) != 1 || got[0].Commit != oid(1) || got[0].Tree != oid(11) || got[0].KeyName != "agent" || got[0].Number != 1 {
				t.Fatalf("attempts %+v", got)
			}
		},
		"UpdateRefs/outbox": func(t *testing.T, s lockstep.Store) {
			base := mustRepo(t, s, "base", "")
			ws := mustRepo(t, s, "ws", "base")
			hookOn(t, s, base, "hook_push", "workspace.pushed")
			hookOn(t, s, base, "hook_all", "*")
			hookOn(t, s, base, "hook_other", "workspace.promoted")
			ev := []lockstep.HookEvent{{Repos: []string{"base"}, Event: "workspace.pushed", Payload: map[string]any{"workspace": "ws"}}}
			// Deliveries are written with the ref move ...
			must(t, s.UpdateRefs(bg, []lockstep.RefUpdate{upd(ws, mainRef, lockstep.ZeroOID, oid(1))}, nil, ev, ent("push")))
			if len(deliveries(t, s, "hook_push")) != 1 || len(deliveries(t, s, "hook_all")) != 1 || len(deliveries(t, s, "hook_other")) != 0 {
				t.Fatal("the ref move did not write one delivery per matching hook")
			}
			d := deliveries(t, s, "hook_push")[0]
			if d.Event != "workspace.pushed" || d.Status != lockstep.DeliveryPending || d.Payload == "" {
				t.Fatalf("delivery %+v", d)
			}
			// ... and not without it.
			wantCode(t, s.UpdateRefs(bg, []lockstep.RefUpdate{upd(ws, mainRef, oid(5), oid(2))}, nil, ev, ent("push")), lockstep.EREFCONFLICT)
			if len(deliveries(t, s, "hook_push")) != 1 {
				t.Fatal("a refused ref move wrote a delivery")
			}
		},
		"UpdateRefs/inactive": func(t *testing.T, s lockstep.Store) {
			mustRepo(t, s, "base", "")
			for _, st := range []lockstep.Status{lockstep.StatusPromoted, lockstep.StatusFailed, lockstep.StatusAbandoned} {
				ws := mustRepo(t, s, "ws-"+string(st), "base", lockstep.Ref{Name: mainRef, OID: oid(1)})
				setStatus(t, s, ws, st, "status")
				err := s.UpdateRefs(bg, []lockstep.RefUpdate{upd(ws, mainRef, oid(1), oid(2))}, nil, nil, ent("push"))
				wantCode(t, err, lockstep.EINVALID)
				if refOID(t, s, ws, mainRef) != oid(1) {
					t.Fatalf("a %s workspace's ref moved", st)
				}
			}
			wantOps(t, s, "push", 0)
		},
		"UpdateRefs/concurrent": func(t *testing.T, s lockstep.Store) {
			// Racing compare-and-swaps from one value: exactly one wins.
			r := mustRepo(t, s, "base", "", lockstep.Ref{Name: mainRef, OID: oid(1)})
			const n = 12
			var wg sync.WaitGroup
			errs := make(chan error, n)
			for i := 0; i < n; i++ {
				wg.Add(1)
				go func(i int) {
					defer wg.Done()
					errs <- s.UpdateRefs(bg, []lockstep.RefUpdate{upd(r, mainRef, oid(1), oid(100+i))}, nil, nil, ent("push"))
				}(i)
			}
			wg.Wait()
			close(errs)
			wins := 0
			for err := range errs {
				switch lockstep.ErrorCode(err) {
				case "":
					wins++
				case lockstep.EREFCONFLICT:
				default:
					t.Fatalf("racing CAS: %v", err)
				}
			}
			if wins != 1 {
				t.Fatalf("%d winners, want 1", wins)
			}
			wantOps(t, s, "push", 1)
		},
		"UpdateRefsAndStatus": func(t *testing.T, s lockstep.Store) {
			base := mustRepo(t, s, "base", "", lockstep.Ref{Name: mainRef, OID: oid(1)})
			ws := mustRepo(t, s, "ws", "base", lockstep.Ref{Name: mainRef, OID: oid(2)})
			hookOn(t, s, base, "hook_all", "*")
			change := func(from lockstep.Status) lockstep.StatusChange {
				return lockstep.StatusChange{RepoID: ws.ID, Repo: ws.Name, From: from, To: lockstep.StatusPromoted, Entry: ent("workspace.promoted")}
			}
			ev := []lockstep.HookEvent{{Repos: []string{"base"}, Event: "workspace.promoted"}}
			// A stale ref: neither the ref nor the status moves.
			err := s.UpdateRefsAndStatus(bg, []lockstep.RefUpdate{upd(base, mainRef, oid(9), oid(2))}, nil, ev, ent("promote"), change(lockstep.StatusActive))
			wantCode(t, err, lockstep.EREFCONFLICT)
			if status(t, s, "ws") != lockstep.StatusActive || refOID(t, s, base, mainRef) != oid(1) {
				t.Fatal("a refused promote moved the status or the ref")
			}
			// A stale status: neither moves either.
			err = s.UpdateRefsAndStatus(bg, []lockstep.RefUpdate{upd(base, mainRef, oid(1), oid(2))}, nil, ev, ent("promote"), change(lockstep.StatusFailed))
			wantCode(t, err, lockstep.EINVALID)
			if status(t, s, "ws") != lockstep.StatusActive || refOID(t, s, base, mainRef) != oid(1) {
				t.Fatal("a status compare-and-swap that failed moved something")
			}
			wantOps(t, s, "promote", 0)
			wantOps(t, s, "workspace.promoted", 0)
			if len(deliveries(t, s, "hook_all")) != 0 {
				t.Fatal("a refused promote wrote a delivery")
			}
			// Both move, the change's entry after the update's.
			must(t, s.UpdateRefsAndStatus(bg, []lockstep.RefUpdate{upd(base, mainRef, oid(1), oid(2))}, nil, ev, ent("promote"), change(lockstep.StatusActive)))
			if status(t, s, "ws") != lockstep.StatusPromoted || refOID(t, s, base, mainRef) != oid(2) {
				t.Fatal("promote did not move both")
			}
			p, w := opsOf(t, s, "promote"), opsOf(t, s, "workspace.promoted")
			if len(p) != 1 || len(w) != 1 || w[0].Seq != p[0].Seq+1 {
				t.Fatalf("entries: promote %v, status %v (want the status entry right after)", seqs(p), seqs(w))
			}
			if len(deliveries(t, s, "hook_all")) != 1 {
				t.Fatal("promote wrote no delivery")
			}
			// A second promote of the same workspace loses the status CAS.
			err = s.UpdateRefsAndStatus(bg, []lockstep.RefUpdate{upd(base, mainRef, oid(2), oid(3))}, nil, nil, ent("promote"), change(lockstep.StatusActive))
			wantCode(t, err, lockstep.EINVALID)
			if refOID(t, s, base, mainRef) != oid(2) {
				t.Fatal("the second promote moved the ref")
			}
			wantChain(t, s, int64(5))
		},
		"UpdateRefsAndStatus/concurrent": func(t *testing.T, s lockstep.Store) {
			// Two workspaces promoted at once into the same base from the
			// same tip, and a workspace promoted twice at once: one wins each.
			base := mustRepo(t, s, "base", "", lockstep.Ref{Name: mainRef, OID: oid(1)})
			ws := mustRepo(t, s, "ws", "base")
			const n = 8
			var wg sync.WaitGroup
			errs := make(chan error, n)
			for i := 0; i < n; i++ {
				wg.Add(1)
				go func(i int) {
					defer wg.Done()
					errs <- s.UpdateRefsAndStatus(bg, []lockstep.RefUpdate{upd(base, mainRef, oid(1), oid(50+i))}, nil, nil, ent("promote"),
						lockstep.StatusChange{RepoID: ws.ID, Repo: ws.Name, From: lockstep.StatusActive, To: lockstep.StatusPromoted, Entry: ent("workspace.promoted")})
				}(i)
			}
			wg.Wait()
			close(errs)
			wins := 0
			for err := range errs {
				switch lockstep.ErrorCode(err) {
				case "":
					wins++
				case lockstep.EREFCONFLICT, lockstep.EINVALID:
				default:
					t.Fatalf("racing promotes: %v", err)
				}
			}
			if wins != 1 {
				t.Fatalf("%d winners, want 1", wins)
			}
			wantOps(t, s, "workspace.promoted", 1)
		},
		"Attempts": func(t *testing.T, s lockstep.Store) {
			mustRepo(t, s, "base", "")
			ws := mustRepo(t, s, "ws", "base")
			other := mustRepo(t, s, "other", "base")
			prev := lockstep.ZeroOID
			for i := 1; i <= 4; i++ {
				for _, r := range []*lockstep.Repo{ws, other} {
					old := prev
					if r == other {
						old = refOID(t, s, other, mainRef)
					}
					must(t, s.UpdateRefs(bg, []lockstep.RefUpdate{upd(r, mainRef, old, oid(i))},
						[]lockstep.AttemptRecord{{RepoID: r.ID, Attempt: lockstep.Attempt{Commit: oid(i), Branch: "main", Op: "push"}}}, nil, ent("push")))
				}
				prev = oid(i)
			}
			got, err := s.Attempts(bg, ws.ID, 0)
			must(t, err)
			if len(got) != 4 {
				t.Fatalf("%d attempts, want 4", len(got))
			}
			for i, a := range got { // newest first, numbered within the workspace
				if a.Commit != oid(4-i) || a.Number != int64(4-i) || (i > 0 && a.Seq >= got[i-1].Seq) {
					t.Fatalf("attempt %d: %+v", i, a)
				}
			}
			got, err = s.Attempts(bg, ws.ID, 2)
			must(t, err)
			if len(got) != 2 || got[0].Number != 4 || got[1].Number != 3 {
				t.Fatalf("limit 2: %+v", got)
			}
			base, _ := s.RepoByName(bg, "base")
			if got, _ := s.Attempts(bg, base.ID, 0); len(got) != 0 {
				t.Fatalf("a repository without attempts lists %+v", got)
			}
		},
	}
}
