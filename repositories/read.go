package repositories

import (
	"context"
	"io"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/gitobj"
	"github.com/lockstep-hq/lockstep/merge"
)

// open resolves a repository and a revision of it.
func (s *Service) open(ctx context.Context, repoName, rev string) (*lockstep.Repo, ObjectStore, gitobj.Hash, error) {
	r, err := s.Repo(ctx, repoName)
	if err != nil {
		return nil, nil, gitobj.ZeroHash, err
	}
	n, err := s.network(ctx, r.Network)
	if err != nil {
		return nil, nil, gitobj.ZeroHash, err
	}
	if rev == "" {
		rev = r.DefaultBranch
	}
	h, err := s.Resolve(ctx, r, rev)
	return r, n, h, err
}

// Log lists commits reachable from rev in git log order, after the cursor
// commit when given.
func (s *Service) Log(ctx context.Context, repoName, rev string, limit int, after string) ([]gitobj.CommitInfo, error) {
	_, n, h, err := s.open(ctx, repoName, rev)
	if err != nil {
		return nil, err
	}
	cursor := gitobj.ZeroHash
	if after != "" {
		if err := lockstep.ValidateOID("after", after); err != nil {
			return nil, err
		}
		cursor = gitobj.NewHash(after)
	}
	if limit <= 0 || limit > 1000 {
		limit = 50
	}
	return n.Log(h, limit, cursor)
}

// Commit returns one commit.
func (s *Service) Commit(ctx context.Context, repoName, rev string) (*gitobj.CommitInfo, error) {
	_, n, h, err := s.open(ctx, repoName, rev)
	if err != nil {
		return nil, err
	}
	return n.Commit(h)
}

// Tree lists the entries of a directory at rev.
func (s *Service) Tree(ctx context.Context, repoName, rev, path string) ([]gitobj.TreeEntry, error) {
	_, n, h, err := s.open(ctx, repoName, rev)
	if err != nil {
		return nil, err
	}
	return n.TreeEntries(h, path)
}

// Blob opens a file at rev.
func (s *Service) Blob(ctx context.Context, repoName, rev, path string) (*gitobj.BlobInfo, io.ReadCloser, error) {
	_, n, h, err := s.open(ctx, repoName, rev)
	if err != nil {
		return nil, nil, err
	}
	return n.Blob(h, path)
}

// Archive streams rev's tree as a tar. resolved is called with the commit
// before any byte is written, so HTTP headers can name it.
func (s *Service) Archive(ctx context.Context, repoName, rev string, w io.Writer, resolved func(commit string)) error {
	_, n, h, err := s.open(ctx, repoName, rev)
	if err != nil {
		return err
	}
	if resolved != nil {
		resolved(h.String())
	}
	return n.Archive(ctx, w, h)
}

// CompareResult is the answer to a compare.
type CompareResult struct {
	Base    string              `json:"base"`
	Head    string              `json:"head"`
	Files   []gitobj.FileChange `json:"files"`
	Added   int                 `json:"added"`
	Removed int                 `json:"removed"`
}

// Compare lists the files changed between base and head with diffs.
func (s *Service) Compare(ctx context.Context, repoName, base, head string) (*CompareResult, error) {
	r, n, hh, err := s.open(ctx, repoName, head)
	if err != nil {
		return nil, err
	}
	if base == "" {
		return nil, lockstep.Errorf(lockstep.EINVALID, "missing base")
	}
	bh, err := s.Resolve(ctx, r, base)
	if err != nil {
		return nil, err
	}
	files, err := n.Compare(bh, hh, gitobj.CompareOptions{MaxPatchBytes: s.cfg.ComparePatchBytes})
	if err != nil {
		return nil, err
	}
	res := &CompareResult{Base: bh.String(), Head: hh.String(), Files: files}
	if res.Files == nil {
		res.Files = []gitobj.FileChange{}
	}
	for _, f := range files {
		res.Added += f.Added
		res.Removed += f.Removed
	}
	return res, nil
}

// ChangesSinceMergeBase lists what head changes relative to its merge base
// with base (full patches): a review's view of a branch's own work. The
// merge base is ZeroHash when the histories share none.
func (s *Service) ChangesSinceMergeBase(ctx context.Context, r *lockstep.Repo, base, head gitobj.Hash) (gitobj.Hash, []gitobj.FileChange, error) {
	n, err := s.network(ctx, r.Network)
	if err != nil {
		return gitobj.ZeroHash, nil, err
	}
	mb, err := merge.MergeBase(ctx, n.Objects(), base, head)
	if err != nil {
		return gitobj.ZeroHash, nil, err
	}
	files, err := n.Compare(mb, head, gitobj.CompareOptions{})
	return mb, files, err
}
