package repositories

import (
	"context"
	"io"
	"sort"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/repo"
)

// RefCommand is one ref update of a `git push`: the client's old value is
// a compare-and-swap expectation, never ignored.
type RefCommand struct {
	Ref string
	Old string
	New string
}

// RefResult is the outcome of one RefCommand; Err is nil when it applied.
type RefResult struct {
	Ref string
	Err error
}

// CanPush reports whether actor may push to the repository at all (checked
// before the client uploads anything).
func (s *Service) CanPush(ctx context.Context, actor *lockstep.Key, repoName string) error {
	r, err := s.Repo(ctx, repoName)
	if err != nil {
		return err
	}
	return writable(actor, r)
}

// GitPush applies a `git push`: the pack is validated and stored first
// (the same path rules as every upload), then each command moves its ref by
// compare-and-swap against the client's old oid, with an operations-log
// entry. With atomic, all commands apply or none does. unpackErr is
// non-nil when the pack was refused (then no ref moves).
func (s *Service) GitPush(ctx context.Context, actor *lockstep.Key, repoName string, cmds []RefCommand, atomic bool, pack io.Reader) (unpackErr error, results []RefResult, err error) {
	start := s.now()
	r, err := s.Repo(ctx, repoName)
	if err != nil {
		return nil, nil, err
	}
	if err := writable(actor, r); err != nil {
		return nil, nil, err
	}
	n, err := s.Network(r.Network)
	if err != nil {
		return nil, nil, err
	}
	var stats repo.WriteStats
	if pack != nil {
		stats, unpackErr = n.ReceivePack(pack, s.cfg.Limits)
		if unpackErr == nil {
			s.afterWrite(r.Network, n)
		}
		if unpackErr != nil {
			for _, c := range cmds {
				results = append(results, RefResult{Ref: c.Ref, Err: lockstep.Errorf(lockstep.EINVALID, "unpacker error")})
			}
			return unpackErr, results, nil
		}
	}
	results = make([]RefResult, len(cmds))
	var updates []lockstep.RefUpdate
	var moves []lockstep.RefMove
	var attempts []lockstep.AttemptRecord
	for i, c := range cmds {
		results[i].Ref = c.Ref
		if err := s.checkGitCommand(r, n, c); err != nil {
			results[i].Err = err
			continue
		}
		updates = append(updates, lockstep.RefUpdate{RepoID: r.ID, Repo: r.Name, Name: c.Ref, Old: c.Old, New: c.New})
		moves = append(moves, lockstep.RefMove{Repo: r.Name, Ref: c.Ref, Old: c.Old, New: c.New})
		if r.ForkOf != "" && c.New != lockstep.ZeroOID {
			tree := ""
			if ci, err := n.Commit(plumbing.NewHash(c.New)); err == nil {
				tree = ci.Tree.String()
			}
			attempts = append(attempts, lockstep.AttemptRecord{RepoID: r.ID, Attempt: lockstep.Attempt{Commit: c.New, Tree: tree,
				Branch: strings.TrimPrefix(c.Ref, "refs/heads/"), Op: "git.push", KeyName: actor.Name}})
		}
	}
	failed := len(updates) < len(cmds)
	if atomic && failed {
		for i := range results {
			if results[i].Err == nil {
				results[i].Err = lockstep.Errorf(lockstep.EINVALID, "atomic push failed")
			}
		}
		return nil, results, nil
	}
	apply := func(ups []lockstep.RefUpdate, mv []lockstep.RefMove, at []lockstep.AttemptRecord) error {
		entry := &lockstep.OpEntry{KeyID: actor.ID, KeyName: actor.Name, Op: "git.push", Repo: r.Name, TraceID: traceID(ctx),
			Refs: mv, Objects: stats.Objects, Bytes: stats.Bytes, DurationUS: s.now().Sub(start).Microseconds()}
		var evs []lockstep.HookEvent
		for _, u := range ups {
			if u.New != lockstep.ZeroOID {
				tree := ""
				if ci, err := n.Commit(plumbing.NewHash(u.New)); err == nil {
					tree = ci.Tree.String()
				}
				evs = append(evs, s.hookEvents(r, "push", strings.TrimPrefix(u.Name, "refs/heads/"), u.New, tree, nil)...)
			}
		}
		err := s.store.UpdateRefs(ctx, ups, at, evs, entry)
		s.metrics.ObserveOp("git.push", resultOf(err), s.now().Sub(start))
		return err
	}
	setErr := func(ref string, err error) {
		for i := range results {
			if results[i].Ref == ref && results[i].Err == nil {
				results[i].Err = err
			}
		}
	}
	if atomic {
		if err := apply(updates, moves, attempts); err != nil {
			if lockstep.ErrorCode(err) != lockstep.EREFCONFLICT {
				return nil, nil, err
			}
			s.logFailure(ctx, actor, r, "git.push", "", start, err)
			for _, u := range updates {
				setErr(u.Name, err)
			}
			return nil, results, nil
		}
	} else {
		for i, u := range updates {
			var at []lockstep.AttemptRecord
			for _, a := range attempts {
				if "refs/heads/"+a.Branch == u.Name {
					at = append(at, a)
				}
			}
			if err := apply(updates[i:i+1], moves[i:i+1], at); err != nil {
				if lockstep.ErrorCode(err) != lockstep.EREFCONFLICT {
					return nil, nil, err
				}
				s.logFailure(ctx, actor, r, "git.push", strings.TrimPrefix(u.Name, "refs/heads/"), start, err)
				setErr(u.Name, err)
			}
		}
	}
	// Deletes are mirrored first: a push may replace "a" by "a/b".
	ordered := append([]RefResult(nil), results...)
	sort.SliceStable(ordered, func(i, j int) bool { return isDelete(cmds, ordered[i].Ref) && !isDelete(cmds, ordered[j].Ref) })
	for _, res := range ordered {
		if res.Err == nil {
			s.mirror(ctx, r, res.Ref)
			for _, c := range cmds {
				if c.Ref == res.Ref && c.New != lockstep.ZeroOID {
					tree := ""
					if ci, err := n.Commit(plumbing.NewHash(c.New)); err == nil {
						tree = ci.Tree.String()
					}
					s.emit(ctx, Event{Type: "push", Repo: r, Branch: strings.TrimPrefix(c.Ref, "refs/heads/"), Commit: c.New, Tree: tree, KeyName: actor.Name})
				}
			}
		}
	}
	return nil, results, nil
}

func isDelete(cmds []RefCommand, ref string) bool {
	for _, c := range cmds {
		if c.Ref == ref {
			return c.New == lockstep.ZeroOID
		}
	}
	return false
}

// checkGitCommand validates one pushed ref update.
func (s *Service) checkGitCommand(r *lockstep.Repo, n ObjectStore, c RefCommand) error {
	if !strings.HasPrefix(c.Ref, "refs/heads/") {
		return lockstep.Errorf(lockstep.EINVALID, "only branches (refs/heads/*) can be pushed")
	}
	if err := lockstep.ValidateBranch(strings.TrimPrefix(c.Ref, "refs/heads/")); err != nil {
		return err
	}
	if !lockstep.IsOID(c.Old) || !lockstep.IsOID(c.New) {
		return lockstep.Errorf(lockstep.EINVALID, "malformed command")
	}
	if c.New == lockstep.ZeroOID {
		if c.Ref == branchRef(r.DefaultBranch) {
			return lockstep.Errorf(lockstep.EFORBIDDEN, "the default branch cannot be deleted")
		}
		return nil
	}
	ci, err := n.Commit(plumbing.NewHash(c.New))
	if err != nil {
		return lockstep.Errorf(lockstep.EINVALID, "%s is not a commit in this repository", c.New)
	}
	if _, err := n.TreeEntries(ci.Tree, ""); err != nil {
		return lockstep.Errorf(lockstep.EINVALID, "commit %s has no tree %s", c.New, ci.Tree)
	}
	for _, p := range ci.Parents {
		if !n.Has(p) {
			return lockstep.Errorf(lockstep.EINVALID, "commit %s: parent %s missing", c.New, p)
		}
	}
	return nil
}
