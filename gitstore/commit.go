package gitstore

import (
	"container/heap"
	"errors"
	"fmt"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/lockstep-hq/lockstep"
)

// WriteCommit writes the commit for spec as one loose object (durable when
// Options.Fsync) and returns its hash. The tree and parents must exist
// (not_found otherwise). Rollback is WriteCommit with an older tree.
//
// One small object is written loose rather than as a pack: a pack would
// add an index, a second fsync and one more pack for every later read to
// search (see BenchmarkWriteCommit).
func (n *Network) WriteCommit(spec CommitSpec) (plumbing.Hash, WriteStats, error) {
	if _, err := n.typed(plumbing.TreeObject, spec.Tree); err != nil {
		return plumbing.ZeroHash, WriteStats{}, err
	}
	for _, p := range spec.Parents {
		if !n.Has(p) {
			return plumbing.ZeroHash, WriteStats{}, lockstep.Errorf(lockstep.ENOTFOUND, "parent commit %s not found", p)
		}
	}
	obj := EncodeCommit(spec)
	// Names and emails come from requests (author, key names): a '<',
	// '>' or newline in them would make a commit git fsck refuses.
	if err := checkCommitObject(rawObject(obj)); err != nil {
		return plumbing.ZeroHash, WriteStats{}, lockstep.Errorf(lockstep.EINVALID, "commit would not pass git fsck (%v): check the author and committer names and emails", err)
	}
	// No writeMu: a loose write is an atomic rename of immutable content,
	// so a rollback never waits behind a large pack write.
	st, err := n.writeLoose(obj)
	if err != nil {
		return plumbing.ZeroHash, WriteStats{}, err
	}
	return obj.Hash(), st, nil
}

// Commit reads commit h. Returns not_found if h is missing or not a commit.
func (n *Network) Commit(h plumbing.Hash) (*CommitInfo, error) {
	c, err := n.commitObject(h)
	if err != nil {
		return nil, err
	}
	return commitInfo(c), nil
}

func commitInfo(c *object.Commit) *CommitInfo {
	parents := c.ParentHashes
	if parents == nil {
		parents = []plumbing.Hash{}
	}
	return &CommitInfo{
		Hash: c.Hash, Tree: c.TreeHash, Parents: parents,
		Author: c.Author, Committer: c.Committer, Message: c.Message,
	}
}

func (n *Network) commitObject(h plumbing.Hash) (*object.Commit, error) {
	obj, err := n.typed(plumbing.CommitObject, h)
	if err != nil {
		return nil, err
	}
	c := &object.Commit{}
	if err := c.Decode(obj); err != nil {
		return nil, fmt.Errorf("decode commit %s: %w", h, err)
	}
	return c, nil
}

// treeOf resolves a commit or tree hash to a tree hash.
func (n *Network) treeOf(h plumbing.Hash) (plumbing.Hash, error) {
	obj, err := n.object(h)
	if errors.Is(err, plumbing.ErrObjectNotFound) {
		return plumbing.ZeroHash, lockstep.Errorf(lockstep.ENOTFOUND, "object %s not found", h)
	} else if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("read object %s: %w", h, err) // not a miss: out of descriptors, I/O
	}
	switch obj.Type() {
	case plumbing.TreeObject:
		return h, nil
	case plumbing.CommitObject:
		c := &object.Commit{}
		if err := c.Decode(obj); err != nil {
			return plumbing.ZeroHash, fmt.Errorf("decode commit %s: %w", h, err)
		}
		return c.TreeHash, nil
	}
	return plumbing.ZeroHash, lockstep.Errorf(lockstep.ENOTFOUND, "%s is a %s, not a commit or tree", h, obj.Type())
}

// Log lists up to limit commits reachable from `from`, in git log order
// (newest committer time first, every parent followed, each commit once).
// A non-zero after is a cursor: the listing continues after that commit
// (which must be one of the listed commits; not_found otherwise).
// limit <= 0 means no limit.
func (n *Network) Log(from plumbing.Hash, limit int, after plumbing.Hash) ([]CommitInfo, error) {
	start, err := n.commitObject(from)
	if err != nil {
		return nil, err
	}
	q := &commitQueue{}
	seen := map[plumbing.Hash]bool{from: true}
	heap.Push(q, queued{start, 0})
	seq := 1
	skipping := !after.IsZero()
	out := []CommitInfo{}
	for q.Len() > 0 {
		c := heap.Pop(q).(queued).c
		if !skipping {
			out = append(out, *commitInfo(c))
			if limit > 0 && len(out) >= limit {
				break
			}
		} else if c.Hash == after {
			skipping = false
		}
		for _, p := range c.ParentHashes {
			if seen[p] {
				continue
			}
			seen[p] = true
			pc, err := n.commitObject(p)
			if err != nil {
				return nil, err
			}
			heap.Push(q, queued{pc, seq})
			seq++
		}
	}
	if skipping {
		return nil, lockstep.Errorf(lockstep.ENOTFOUND, "cursor commit %s is not in the history of %s", after, from)
	}
	return out, nil
}

type queued struct {
	c   *object.Commit
	seq int // insertion order breaks ties, as git does
}

// commitQueue is a max-heap on committer time.
type commitQueue []queued

func (q commitQueue) Len() int { return len(q) }
func (q commitQueue) Less(i, j int) bool {
	ti, tj := q[i].c.Committer.When, q[j].c.Committer.When
	if !ti.Equal(tj) {
		return ti.After(tj)
	}
	return q[i].seq < q[j].seq
}
func (q commitQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *commitQueue) Push(x any)   { *q = append(*q, x.(queued)) }
func (q *commitQueue) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}
