package e2e

import (
	"net/http"
	"testing"

	"github.com/lockstep-hq/lockstep/internal/e2ekit"
)

// TestNewBranchStartsFromARevision: a branch created by a worktree push
// starts from the default branch's tip (or from=REV), so later merges have
// a base; HEAD names the default branch.
func TestNewBranchStartsFromARevision(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOpts{})
	s.CreateRepo(t, "r")
	v1 := s.Push(t, s.AdminKey, "r", "", map[string]string{"a.txt": "a\n"})
	v2 := s.Push(t, s.AdminKey, "r", v1.Commit, map[string]string{"a.txt": "a\nb\n"})

	// Default: the new branch's first commit has main's tip as parent.
	r := s.PushRaw(t, s.AdminKey, "r", e2ekit.PushQuery("feature", "", "expect_oid", zeroOID), e2ekit.TarOf(t, map[string]string{"a.txt": "a\nb\n", "f.txt": "f\n"}))
	var p e2ekit.PushResult
	r.Decode(t, &p)
	if r.Status != http.StatusCreated || p.Parent != v2.Commit {
		t.Fatalf("new branch: %s (want parent %s)", r, v2.Commit)
	}
	// from= picks another starting point.
	r = s.PushRaw(t, s.AdminKey, "r", e2ekit.PushQuery("old", "", "expect_oid", zeroOID, "from", v1.Commit), e2ekit.TarOf(t, map[string]string{"a.txt": "a\n", "o.txt": "o\n"}))
	r.Decode(t, &p)
	if r.Status != http.StatusCreated || p.Parent != v1.Commit {
		t.Fatalf("from=v1: %s", r)
	}
	// An unknown from= is a 404 and creates nothing.
	r = s.PushRaw(t, s.AdminKey, "r", e2ekit.PushQuery("x", "", "from", "nope"), e2ekit.TarOf(t, map[string]string{"a.txt": "x\n"}))
	e2ekit.WantError(t, r, http.StatusNotFound, "not_found")
	if _, ok := s.Refs(t, s.AdminKey, "r")["refs/heads/x"]; ok {
		t.Fatal("a failed push created the branch")
	}
	// The merge of feature into main has a real base: a fast-forward.
	var m struct {
		Clean       bool   `json:"clean"`
		FastForward bool   `json:"fast_forward"`
		MergeBase   string `json:"merge_base"`
	}
	s.MustJSON(t, "POST", "/api/v1/repos/r/merges", s.AdminKey, map[string]any{"ours": "main", "theirs": "feature", "preflight": true}, http.StatusOK, &m)
	if !m.Clean || !m.FastForward || m.MergeBase != v2.Commit {
		t.Fatalf("preflight: %+v", m)
	}
	// HEAD is the default branch.
	if c := s.Commit(t, "r", "HEAD"); c.Commit != v2.Commit {
		t.Fatalf("HEAD = %s, want %s", c.Commit, v2.Commit)
	}
}
