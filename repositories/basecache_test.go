package repositories_test

import (
	"context"
	"testing"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/internal/servicetest"
	"github.com/lockstep-hq/lockstep/repositories"
)

// TestPreflightBaseCacheFollowsRefs: preflights share the network's
// merge-base cache, which is keyed by commits: after either branch moves
// (a merge into main, a push to the feature branch) the preflight answers
// for the new tips, never the cached pair of the old ones.
func TestPreflightBaseCacheFollowsRefs(t *testing.T) {
	ctx := context.Background()
	w := servicetest.MustWorld(t, servicetest.Options{})
	first := w.MustRepo(t, "app", map[string]string{"a.txt": "one\n"})
	feat, err := w.Repos.PushTar(ctx, w.Admin, "app", servicetest.Tar(t, map[string]string{"a.txt": "one\n", "b.txt": "b\n"}),
		repositories.WriteOptions{Branch: "feature", ExpectOID: lockstep.ZeroOID})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Repos.PushTar(ctx, w.Admin, "app", servicetest.Tar(t, map[string]string{"a.txt": "two\n"}),
		repositories.WriteOptions{Branch: "main", ExpectOID: first.Commit}); err != nil {
		t.Fatal(err)
	}
	r, err := w.Repos.Repo(ctx, "app")
	if err != nil {
		t.Fatal(err)
	}
	preflight := func() *repositories.MergeResponse {
		t.Helper()
		res, err := w.Repos.Merge(ctx, w.Admin, "app", repositories.MergeRequest{Ours: "main", Theirs: "feature", Preflight: true, Deep: true})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	for range 2 {
		if p := preflight(); !p.Clean || p.UpToDate || p.MergeBase != first.Commit {
			t.Fatalf("preflight: clean=%v up_to_date=%v base=%s, want a clean merge on %s", p.Clean, p.UpToDate, p.MergeBase, first.Commit)
		}
	}
	if n := w.Repos.BaseCacheLen(r.Network); n != 1 {
		t.Fatalf("the network's merge-base cache holds %d pairs, want 1", n)
	}
	// main takes the feature: the same refs now name an up-to-date pair.
	m, err := w.Repos.Merge(ctx, w.Admin, "app", repositories.MergeRequest{Ours: "main", Theirs: "feature", Materialize: true})
	if err != nil {
		t.Fatal(err)
	}
	if p := preflight(); !p.UpToDate || p.MergeBase != feat.Commit || p.Ours != m.Commit {
		t.Fatalf("after the merge: up_to_date=%v base=%s ours=%s, want up to date on %s at %s", p.UpToDate, p.MergeBase, p.Ours, feat.Commit, m.Commit)
	}
	// The feature moves on: its new tip merges on the old feature tip.
	f2, err := w.Repos.PushTar(ctx, w.Admin, "app", servicetest.Tar(t, map[string]string{"a.txt": "one\n", "b.txt": "b\n", "c.txt": "c\n"}),
		repositories.WriteOptions{Branch: "feature", ExpectOID: feat.Commit})
	if err != nil {
		t.Fatal(err)
	}
	if p := preflight(); p.UpToDate || !p.Clean || p.MergeBase != feat.Commit || p.Theirs != f2.Commit {
		t.Fatalf("after the feature moved: up_to_date=%v clean=%v base=%s theirs=%s, want a clean merge of %s on %s", p.UpToDate, p.Clean, p.MergeBase, p.Theirs, f2.Commit, feat.Commit)
	}
}

// TestPreflightMissingSides: a preflight reads each side's repository and
// branch in one statement on SQL stores; a missing branch or repository
// on either side still answers not_found, naming what is missing.
func TestPreflightMissingSides(t *testing.T) {
	ctx := context.Background()
	w := servicetest.MustWorld(t, servicetest.Options{})
	w.MustRepo(t, "app", map[string]string{"a.txt": "one\n"})
	for _, c := range []struct{ repo, ours, theirs, want string }{
		{"app", "nope", "main", "branch nope not found in app"},
		{"app", "main", "app:nope", "revision app:nope not found in app"},
		{"app", "main", "ghost:main", "repository ghost not found"},
		{"ghost", "main", "main", "repository ghost not found"},
	} {
		_, err := w.Repos.Merge(ctx, w.Admin, c.repo, repositories.MergeRequest{Ours: c.ours, Theirs: c.theirs, Preflight: true})
		if lockstep.ErrorCode(err) != lockstep.ENOTFOUND || lockstep.ErrorMessage(err) != c.want {
			t.Errorf("preflight %s into %s of %s: %v (%s), want not_found %q", c.theirs, c.ours, c.repo, err, lockstep.ErrorCode(err), c.want)
		}
	}
}
