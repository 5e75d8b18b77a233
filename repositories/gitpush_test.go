package repositories_test

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/gitobj"
	"github.com/lockstep-hq/lockstep/gitstore"
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

// mirrorCounter counts the ref mirror's calls of one opener's networks.
type mirrorCounter struct {
	gitobj.Store
	one, many *int
}

func (m mirrorCounter) MirrorRef(repo, ref string, oid gitobj.Hash) error {
	*m.one++
	return m.Store.MirrorRef(repo, ref, oid)
}

func (m mirrorCounter) MirrorRefs(repo string, refs []gitobj.RefValue) error {
	*m.many++
	return m.Store.MirrorRefs(repo, refs)
}

// TestGitPushMirrorsOncePerPush: a push of many refs writes the on-disk
// mirror in one MirrorRefs call (one HEAD check), not one MirrorRef per
// ref, deletes included, and the mirror ends equal to the store.
func TestGitPushMirrorsOncePerPush(t *testing.T) {
	ctx := context.Background()
	var one, many int
	opener := gitobj.OpenerFunc(func(dir string, opts gitobj.OpenOptions) (gitobj.Store, error) {
		st, err := gitstore.Local{}.Open(dir, opts)
		if err != nil {
			return nil, err
		}
		return mirrorCounter{Store: st, one: &one, many: &many}, nil
	})
	w := servicetest.MustWorld(t, servicetest.Options{Repos: repositories.Config{Objects: opener}})
	first := w.MustRepo(t, "app", map[string]string{"a.txt": "one\n"})
	for _, n := range []int{3, 40} { // per-ref store reads, then one read of all
		var cmds []repositories.RefCommand
		for i := range n {
			cmds = append(cmds, repositories.RefCommand{Ref: fmt.Sprintf("refs/heads/b%d-%d", n, i), Old: lockstep.ZeroOID, New: first.Commit})
		}
		cmds = append(cmds, repositories.RefCommand{Ref: fmt.Sprintf("refs/tags/t%d", n), Old: lockstep.ZeroOID, New: first.Commit})
		one, many = 0, 0
		if _, res, err := w.Repos.GitPush(ctx, w.Admin, "app", cmds, false, nil); err != nil || res[0].Err != nil {
			t.Fatal(err, res)
		}
		if one != 0 || many != 1 {
			t.Fatalf("a push of %d refs: %d MirrorRef and %d MirrorRefs calls, want 0 and 1", n+1, one, many)
		}
	}
	// Deleting 3 and creating 1 in one push.
	cmds := []repositories.RefCommand{{Ref: "refs/heads/new", Old: lockstep.ZeroOID, New: first.Commit}}
	for i := range 3 {
		cmds = append(cmds, repositories.RefCommand{Ref: fmt.Sprintf("refs/heads/b3-%d", i), Old: first.Commit, New: lockstep.ZeroOID})
	}
	one, many = 0, 0
	if _, _, err := w.Repos.GitPush(ctx, w.Admin, "app", cmds, false, nil); err != nil {
		t.Fatal(err)
	}
	if one != 0 || many != 1 {
		t.Fatalf("a push of 4 refs: %d MirrorRef and %d MirrorRefs calls, want 0 and 1", one, many)
	}
	r, err := w.Repos.Repo(ctx, "app")
	if err != nil {
		t.Fatal(err)
	}
	stored, err := w.Store.Refs(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, ref := range stored {
		want = append(want, ref.Name+" "+ref.OID)
	}
	n, err := w.Repos.Network(r.Network)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("git", "--git-dir", n.Dir(), "for-each-ref", "--format=%(refname) %(objectname)", "refs/namespaces/app/refs/").CombinedOutput()
	if err != nil {
		t.Fatalf("git for-each-ref: %v\n%s", err, out)
	}
	if got := strings.ReplaceAll(strings.TrimSpace(string(out)), "refs/namespaces/app/", ""); got != strings.Join(want, "\n") {
		t.Fatalf("mirror:\n%s\nstore:\n%s", got, strings.Join(want, "\n"))
	}
	if len(w.Repos.MirrorProblems()) != 0 {
		t.Fatalf("mirror problems: %v", w.Repos.MirrorProblems())
	}
}
