package gitstore

import (
	"container/heap"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
)

// IsAncestor reports whether commit a is reachable from commit b (a
// commit is its own ancestor), like `git merge-base --is-ancestor a b`.
// Returns not_found if either commit is missing.
func (n *Network) IsAncestor(a, b plumbing.Hash) (bool, error) {
	ahead, _, err := n.AheadBehind(a, b)
	return ahead == 0 && err == nil, err
}

// AheadBehind returns how many commits are reachable from a but not from b
// (ahead) and from b but not from a (behind), like
// `git rev-list --left-right --count a...b`. The walk goes newest
// committer time first; once every pending commit is reachable from both
// sides, it goes on only while a pending commit is as new as a commit
// already walked from one side only: times are seconds, so a parent may
// be as new as its child (commits made by a program in the same second),
// and such a parent may have been walked before the child that brings
// the other side to it. Like git's, the answer assumes committer times
// do not run backwards along history. Returns not_found if either commit
// (or a parent on the way) is missing.
func (n *Network) AheadBehind(a, b plumbing.Hash) (ahead, behind int, err error) {
	const fromA, fromB = 1, 2
	ca, err := n.commitObject(a)
	if err != nil {
		return 0, 0, err
	}
	cb, err := n.commitObject(b)
	if err != nil {
		return 0, 0, err
	}
	if a == b {
		return 0, 0, nil
	}
	flags := map[plumbing.Hash]uint8{a: fromA}
	flags[b] |= fromB
	walked := map[plumbing.Hash]time.Time{a: ca.Committer.When, b: cb.Committer.When}
	q := &commitQueue{}
	seq := 0
	push := func(q *commitQueue, c queued) { heap.Push(q, c) }
	push(q, queued{ca, seq})
	seq++
	push(q, queued{cb, seq})
	seq++
	// stale: every queued commit is reachable from both sides, and so is
	// everything below it; oneSide is then the oldest time of a commit
	// walked from one side only, which a queued commit as new as it may
	// still reach.
	stale, oneSide := false, time.Time{}
	for q.Len() > 0 {
		if !stale {
			stale = true
			for _, x := range *q {
				if flags[x.c.Hash] != fromA|fromB {
					stale = false
					break
				}
			}
			if stale {
				oneSide = oldestOneSided(flags, walked)
			}
		}
		if stale && (oneSide.IsZero() || (*q)[0].c.Committer.When.Before(oneSide)) {
			break
		}
		c := heap.Pop(q).(queued).c
		f := flags[c.Hash]
		for _, p := range c.ParentHashes {
			old := flags[p]
			if old|f == old {
				continue
			}
			flags[p] = old | f
			pc, err := n.commitObject(p)
			if err != nil {
				return 0, 0, err
			}
			walked[p] = pc.Committer.When
			push(q, queued{pc, seq})
			seq++
		}
	}
	for _, f := range flags {
		switch f {
		case fromA:
			ahead++
		case fromB:
			behind++
		}
	}
	return ahead, behind, nil
}

// oldestOneSided is the oldest committer time of the commits walked from
// one side only (zero: none).
func oldestOneSided(flags map[plumbing.Hash]uint8, walked map[plumbing.Hash]time.Time) time.Time {
	var oldest time.Time
	for h, f := range flags {
		if f == 3 {
			continue
		}
		if w := walked[h]; oldest.IsZero() || w.Before(oldest) {
			oldest = w
		}
	}
	return oldest
}
