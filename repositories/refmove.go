package repositories

import (
	"context"
	"sort"
	"strings"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/gitobj"
)

// One path moves a ref (gitaly's updateref is the model): every write
// builds one refMove (which refs, from what to what, why) and hands it to
// Service.move, which checks the new commits, runs the compare-and-swap
// in the store with the attempt records, the hook outbox and the
// operations-log entry in one transaction, logs a refusal, then mirrors
// the refs to disk and emits the events. A write computed on a value of a
// ref checks it first with expect and, when it may be recomputed on the
// new tip, wraps itself in retryMoves. Every refusal is the one
// ref_conflict error, lockstep.RefConflict (lockstep.RefMismatch).

// Reason says why refs move: what the operation is, since when it runs,
// what its log entry carries and what commits in the same transaction.
type Reason struct {
	// Op names the operation in the log, the metrics and the hook event
	// ("push", "edit", "merge", "promote", "checkpoint.restore", …).
	Op string
	// Start is when the operation began (before its objects were
	// written): the entry's duration counts from it. Zero = now.
	Start time.Time
	// Details are extra details of the log entry (copied, never kept).
	Details map[string]any
	// Follows is the id of the log entry this move follows (a checkpoint
	// restore follows its checkpoint): the entry's follows link.
	Follows string
	// Workspace is the workspace a promote lands: details.workspace of
	// the log entry and workspace of the promote hook payload.
	Workspace string
	// Change (a promote's workspace status) commits in the same
	// transaction as the refs; its entry's details name the landed commit.
	Change *lockstep.StatusChange
	// Wrap, when set, turns the move's answer (the result its log entry
	// carries, OpEntry.Answer) into the outer operation's: promote turns
	// the landing's *MergeResponse into its PromoteResult, a checkpoint
	// restore the rollback's *PushResult into its RestoreResult. Errors
	// are not wrapped.
	Wrap func(inner any) any
}

// answer is what the log entry of an operation with result v carries:
// v through Wrap, an error as it is.
func (why Reason) answer(v any) any {
	if _, isErr := v.(error); v == nil || isErr || why.Wrap == nil {
		return v
	}
	return why.Wrap(v)
}

// refUpdate is one ref of a move: Old is the compare-and-swap
// expectation (ZeroOID: the ref must not exist), New the value
// (ZeroOID: delete it). Commit and Tree are New peeled to a commit and
// its tree, for the attempt record and the hook payload (Commit "" =
// New, for a move that names a commit).
type refUpdate struct {
	Ref, Old, New string
	Commit, Tree  string
}

// refMove is everything one move needs: who, which repository, which
// refs, the objects the operation wrote (counted on its log entry) and why.
type refMove struct {
	Reason
	Actor   *lockstep.Key
	Repo    *lockstep.Repo
	Updates []refUpdate
	Stats   gitobj.WriteStats
	// Checked: the caller checked every new object itself (git receive,
	// checkGitObject); otherwise move refuses a new commit whose tree
	// breaks the content rules (checkLanding).
	Checked bool
	// Answer is the operation's result if the move commits (a pointer,
	// encoded when the entry is appended): the log entry carries it
	// through Wrap (docs/idempotency.md).
	Answer any
	// Tentative: a refusal is not yet the operation's outcome (a whole
	// non-atomic git push, re-applied ref by ref when refused): neither
	// logged nor counted.
	Tentative bool
}

// branchMove is the move of one branch of r from old to new (a commit
// with tree).
func branchMove(actor *lockstep.Key, r *lockstep.Repo, branch, old, new, tree string, stats gitobj.WriteStats, why Reason) refMove {
	return refMove{Reason: why, Actor: actor, Repo: r, Stats: stats,
		Updates: []refUpdate{{Ref: branchRef(branch), Old: old, New: new, Tree: tree}}}
}

// move applies m: the one place a ref moves. Errors: ref_conflict (a
// compare-and-swap lost, or a ref name clash), invalid_argument (a commit
// breaking the content rules), those of Store.UpdateRefs.
func (s *Service) move(ctx context.Context, m refMove) error {
	r, actor := m.Repo, m.Actor
	t0 := m.Start
	if t0.IsZero() {
		t0 = s.now()
	}
	if !m.Checked {
		for _, u := range m.Updates {
			if err := s.checkLanding(ctx, r, u.New); err != nil {
				return err
			}
		}
	}
	details := copyDetails(m.Details)
	if m.Workspace != "" {
		if details == nil {
			details = map[string]any{}
		}
		details["workspace"] = m.Workspace
	}
	entry := &lockstep.OpEntry{KeyID: actor.ID, KeyName: actor.Name, Op: m.Op, Repo: r.Name, TraceID: traceID(ctx),
		Objects: m.Stats.Objects, Bytes: m.Stats.Bytes, Details: details, Follows: m.Follows, Answer: m.answer(m.Answer)}
	updates := make([]lockstep.RefUpdate, 0, len(m.Updates))
	var attempts []lockstep.AttemptRecord
	var events []lockstep.HookEvent
	for _, u := range m.Updates {
		entry.Refs = append(entry.Refs, lockstep.RefMove{Repo: r.Name, Ref: u.Ref, Old: u.Old, New: u.New})
		updates = append(updates, lockstep.RefUpdate{RepoID: r.ID, Repo: r.Name, Name: u.Ref, Old: u.Old, New: u.New, ObjectsSince: s.objectsSince(ctx, t0)})
		if u.New == lockstep.ZeroOID {
			continue
		}
		commit := u.commit()
		branch, isBranch := strings.CutPrefix(u.Ref, "refs/heads/")
		if isBranch && r.ForkOf != "" {
			attempts = append(attempts, lockstep.AttemptRecord{RepoID: r.ID, Attempt: lockstep.Attempt{Commit: u.New, Tree: u.Tree,
				Branch: branch, Op: m.Op, KeyName: actor.Name}})
		}
		if tag, isTag := strings.CutPrefix(u.Ref, "refs/tags/"); isTag {
			if ev := hookEvent(m.Op); ev != "" {
				events = append(events, s.HookEvent(r, ev, "", commit, u.Tree, map[string]any{"ref": u.Ref, "tag": tag, "object": u.New}))
			}
		} else {
			events = append(events, s.hookEvents(r, m.Op, branch, commit, u.Tree, m.Workspace)...)
		}
	}
	entry.DurationUS = s.now().Sub(t0).Microseconds()
	var err error
	if m.Change != nil {
		change := *m.Change
		if change.Entry != nil && len(m.Updates) > 0 {
			if change.Entry.Details == nil {
				change.Entry.Details = map[string]any{}
			}
			change.Entry.Details["landed"] = m.Updates[len(m.Updates)-1].New
		}
		err = s.store.UpdateRefsAndStatus(ctx, updates, attempts, events, entry, change)
	} else {
		err = s.store.UpdateRefs(ctx, updates, attempts, events, entry)
	}
	if err != nil && m.Tentative {
		return err
	}
	s.metrics.ObserveOp(m.Op, resultOf(err), s.now().Sub(t0))
	if err != nil {
		branch := ""
		if len(m.Updates) == 1 {
			branch = strings.TrimPrefix(m.Updates[0].Ref, "refs/heads/")
		}
		return s.logFailure(ctx, actor, r, m.Op, branch, t0, err)
	}
	// Deletes are mirrored first: a push may replace "a" by "a/b".
	ordered := append([]refUpdate(nil), m.Updates...)
	sort.SliceStable(ordered, func(i, j int) bool {
		return ordered[i].New == lockstep.ZeroOID && ordered[j].New != lockstep.ZeroOID
	})
	s.mirrorRefs(ctx, r, ordered)
	for _, u := range m.Updates {
		if b, isBranch := strings.CutPrefix(u.Ref, "refs/heads/"); isBranch && u.New != lockstep.ZeroOID {
			s.emit(ctx, Event{Type: m.Op, Repo: r, Branch: b, Commit: u.New, Tree: u.Tree, KeyName: actor.Name})
		}
	}
	return nil
}

func (u refUpdate) commit() string {
	if u.Commit != "" {
		return u.Commit
	}
	return u.New
}

// expect is the one check of a write computed on a ref's value: nil when
// expected is "" (no expectation) or the ref's actual value, else the
// ref_conflict of a compare-and-swap that would lose.
func expect(r *lockstep.Repo, ref, expected, actual string) error {
	if expected == "" || expected == actual {
		return nil
	}
	return lockstep.RefConflict(r.Name, ref, expected, actual)
}

// retryPolicy bounds how often a write that lost a compare-and-swap race
// is recomputed on the new tip.
type retryPolicy struct {
	attempts int                             // tries in all; 1 (or less) = never retried
	until    time.Time                       // no retry from then on; zero = no time bound
	backoff  func(attempt int) time.Duration // pause before the retry after attempt; nil = none
}

// noRetry is the policy of a write with an expectation of its own: a
// lost race is the caller's to resolve.
var noRetry = retryPolicy{attempts: 1}

// retryMoves runs try (attempt 0, 1, …) again while it loses a race (a
// ref_conflict whose ref is at another value; never a name clash, which
// a retry cannot resolve) and p allows. It returns try's last error.
func (s *Service) retryMoves(ctx context.Context, p retryPolicy, try func(attempt int) error) error {
	for attempt := 0; ; attempt++ {
		err := try(attempt)
		m, lost := lockstep.AsRefMismatch(err)
		if !lost || m.Conflicting != "" || attempt+1 >= p.attempts || (!p.until.IsZero() && !s.now().Before(p.until)) {
			return err
		}
		if p.backoff != nil {
			if err := sleepCtx(ctx, p.backoff(attempt)); err != nil {
				return err
			}
		}
	}
}
