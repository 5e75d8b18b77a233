package repositories_test

import (
	"context"
	"testing"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/internal/servicetest"
	"github.com/lockstep-hq/lockstep/repositories"
)

// TestGitPushWholeThenRefByRef: a non-atomic git push whose commands all
// apply is one transaction and one operations-log entry with every move;
// when one command loses its compare-and-swap, the others still apply,
// one entry each, and only the loser is refused.
func TestGitPushWholeThenRefByRef(t *testing.T) {
	ctx := context.Background()
	w := servicetest.MustWorld(t, servicetest.Options{})
	first := w.MustRepo(t, "app", map[string]string{"a.txt": "one\n"})
	second, err := w.Repos.PushTar(ctx, w.Admin, "app", servicetest.Tar(t, map[string]string{"a.txt": "two\n"}),
		repositories.WriteOptions{Branch: "main", ExpectOID: first.Commit})
	if err != nil {
		t.Fatal(err)
	}
	gitPushes := func() []*lockstep.OpEntry {
		t.Helper()
		es, err := w.Store.ListOps(ctx, lockstep.OpFilter{Repo: "app", Op: "git.push"})
		if err != nil {
			t.Fatal(err)
		}
		return es
	}
	var cmds []repositories.RefCommand
	for _, b := range []string{"x", "y", "z"} {
		cmds = append(cmds, repositories.RefCommand{Ref: "refs/heads/" + b, Old: lockstep.ZeroOID, New: first.Commit})
	}
	unpackErr, res, err := w.Repos.GitPush(ctx, w.Admin, "app", cmds, false, nil)
	if err != nil || unpackErr != nil {
		t.Fatal(err, unpackErr)
	}
	for _, r := range res {
		if r.Err != nil {
			t.Fatalf("%s refused: %v", r.Ref, r.Err)
		}
	}
	es := gitPushes()
	if len(es) != 1 || len(es[0].Refs) != 3 || es[0].Result != "ok" {
		t.Fatalf("a whole non-atomic push of 3 refs: %d git.push entries %+v, want one ok entry with 3 moves", len(es), es)
	}

	// y's old value is stale: x and z move, y is refused.
	cmds = []repositories.RefCommand{
		{Ref: "refs/heads/x", Old: first.Commit, New: second.Commit},
		{Ref: "refs/heads/y", Old: second.Commit, New: first.Commit},
		{Ref: "refs/heads/z", Old: first.Commit, New: second.Commit},
	}
	if _, res, err = w.Repos.GitPush(ctx, w.Admin, "app", cmds, false, nil); err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		want := r.Ref == "refs/heads/y"
		if got := r.Err != nil; got != want {
			t.Fatalf("%s: refused %v (%v), want refused %v", r.Ref, got, r.Err, want)
		}
		if want && lockstep.ErrorCode(r.Err) != lockstep.EREFCONFLICT {
			t.Fatalf("y refused with %v, want ref_conflict", r.Err)
		}
	}
	r, _ := w.Repos.Repo(ctx, "app")
	for b, want := range map[string]string{"x": second.Commit, "y": first.Commit, "z": second.Commit} {
		if got, _, err := w.Repos.BranchTip(ctx, r, b); err != nil || got != want {
			t.Fatalf("%s at %s (%v), want %s", b, got, err, want)
		}
	}
	es = gitPushes()[1:]
	ok, failed := 0, 0
	for _, e := range es {
		switch {
		case e.Result == "ok" && len(e.Refs) == 1:
			ok++
		case e.Result != "ok":
			failed++
		default:
			t.Fatalf("entry %+v", e)
		}
	}
	if ok != 2 || failed != 1 {
		t.Fatalf("after a push with one lost CAS: %d ok and %d refused entries %+v, want 2 and 1", ok, failed, es)
	}
	if v, err := w.Store.VerifyOps(ctx); err != nil || !v.OK {
		t.Fatalf("oplog verify: %+v %v", v, err)
	}
}
