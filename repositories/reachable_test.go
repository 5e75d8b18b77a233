package repositories

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/lockstep-hq/lockstep/gitobj"
	"github.com/lockstep-hq/lockstep/gitstore"
)

// countingReader counts the commits read through it.
type countingReader struct {
	gitobj.Reader
	commits int
}

func (c *countingReader) Commit(h gitobj.Hash) (*gitobj.CommitInfo, error) {
	c.commits++
	return c.Reader.Commit(h)
}

// TestReachableStopsAtTheCommitsTime: a scoped key's check of a commit id
// finds ancestors (one made in the same second as its child, one a few
// hours newer than its child), and refuses a commit of another line by
// reading only the commits newer than it plus the skew, not the whole
// history (it walked all 400 before).
func TestReachableStopsAtTheCommitsTime(t *testing.T) {
	n, commit := commitNetwork(t)
	t0 := time.Unix(1_700_000_000, 0).UTC()
	// A long line, an hour apart: the repository's history.
	var line []gitobj.Hash
	for i := 0; i < 400; i++ {
		var ps []gitobj.Hash
		if i > 0 {
			ps = []gitobj.Hash{line[i-1]}
		}
		line = append(line, commit(t0.Add(time.Duration(i)*time.Hour), ps...))
	}
	// Another workspace's commit, forked from the 390th, recent.
	other := commit(t0.Add(395*time.Hour), line[389])
	// Same second as its child; a child older than its parent by 3 h.
	same := commit(t0.Add(400*time.Hour), line[399])
	child := commit(t0.Add(400*time.Hour), same)
	skewed := commit(t0.Add(404*time.Hour), child)
	tip := commit(t0.Add(401*time.Hour), skewed)
	ctx := context.Background()
	cr := &countingReader{Reader: n}
	for _, h := range []gitobj.Hash{tip, skewed, child, same, line[399], line[0]} {
		ok, err := reachable(ctx, cr, []gitobj.Hash{tip}, h, DefaultScopedCommitSkew)
		if err != nil || !ok {
			t.Fatalf("reachable(%s) = %v, %v; want true", h, ok, err)
		}
	}
	cr.commits = 0
	ok, err := reachable(ctx, cr, []gitobj.Hash{tip}, other, DefaultScopedCommitSkew)
	if err != nil || ok {
		t.Fatalf("reachable(other) = %v, %v; want false", ok, err)
	}
	// other is 395 h: commits down to 371 h are walked (the skew is 24
	// h), about 35 of the 405.
	if cr.commits > 60 {
		t.Fatalf("refusing a commit of another line read %d commits: want those newer than it (and the skew), not the history", cr.commits)
	}
}

// TestReachWalkSharedAcrossQueries: one request of a scoped key asks
// about many commits (objects/missing takes 100,000 ids, a fetch's have
// lines are unbounded). Commits older than the whole history (a key can
// store them itself, then force-push them away) each walked all of it:
// 100 of them read 100 × 400 commits. One walk shared by the request's
// questions reads the history once.
func TestReachWalkSharedAcrossQueries(t *testing.T) {
	n, commit := commitNetwork(t)
	t0 := time.Unix(1_700_000_000, 0).UTC()
	var line []gitobj.Hash
	for i := 0; i < 400; i++ {
		var ps []gitobj.Hash
		if i > 0 {
			ps = []gitobj.Hash{line[i-1]}
		}
		line = append(line, commit(t0.Add(time.Duration(i)*time.Hour), ps...))
	}
	var old []gitobj.Hash
	for i := 0; i < 100; i++ {
		old = append(old, commit(t0.Add(-time.Duration(1000+i)*time.Hour)))
	}
	ctx := context.Background()
	cr := &countingReader{Reader: n}
	w := newReachWalk(cr, []gitobj.Hash{line[399]}, DefaultScopedCommitSkew)
	for _, h := range old {
		if ok, err := w.reaches(ctx, h); err != nil || ok {
			t.Fatalf("reaches(old %s) = %v, %v; want false", h, ok, err)
		}
	}
	for _, h := range []gitobj.Hash{line[399], line[200], line[0]} {
		if ok, err := w.reaches(ctx, h); err != nil || !ok {
			t.Fatalf("reaches(%s) = %v, %v; want true", h, ok, err)
		}
	}
	// The history once (400), each question's own commit (103).
	if cr.commits > 600 {
		t.Fatalf("100 questions about old commits read %d commits: want the history once, not once per question", cr.commits)
	}
}

// commitNetwork is a fresh network and a function writing a commit of
// the empty tree at a time, with parents (each commit's message differs).
func commitNetwork(t *testing.T) (*gitstore.Network, func(at time.Time, ps ...gitobj.Hash) gitobj.Hash) {
	t.Helper()
	n, err := gitstore.Open(filepath.Join(t.TempDir(), "net.git"), gitstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	empty := &plumbing.MemoryObject{}
	empty.SetType(plumbing.TreeObject)
	if _, err := n.WriteObjects([]plumbing.EncodedObject{empty}); err != nil {
		t.Fatal(err)
	}
	k := 0
	return n, func(at time.Time, ps ...gitobj.Hash) gitobj.Hash {
		k++
		sig := gitobj.Signature{Name: "a", Email: "a@example.com", When: at}
		h, _, err := n.WriteCommit(gitobj.CommitSpec{Tree: empty.Hash(), Parents: ps, Author: sig, Committer: sig, Message: time.Duration(k).String() + "\n"})
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
}
