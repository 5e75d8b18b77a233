package workspaces

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/lockstep-hq/lockstep"
)

// Retention (issue 28 item 2): a base repository's policy abandons its
// active workspaces whose refs have not moved for AbandonAfter, and
// purges its abandoned and failed workspaces DeleteAfter after their
// status changed (the purge of DELETE /repos/{ws}?purge=true), first
// keeping a failed one's attempts on refs/archive/<workspace>/<n> in the
// base when ArchiveFailed is set. The sweeper acts as the system key;
// every action is an oplog entry whose details.reason names the policy.

// RetentionLease is the store lease that lets one replica sweep at a time.
const RetentionLease = "retention"

// MaxArchived bounds how many attempts of one failed workspace are kept
// on archive refs (the newest).
const MaxArchived = 1000

// SetRetention sets base's retention policy (admins only; a zero policy
// turns retention off), recorded by a "repo.retention" oplog entry.
func (s *Service) SetRetention(ctx context.Context, actor *lockstep.Key, baseName string, p lockstep.RetentionPolicy) (lockstep.RetentionPolicy, error) {
	rs, err := s.retentionStore()
	if err != nil {
		return p, err
	}
	if actor == nil || actor.Role != lockstep.RoleAdmin {
		return p, lockstep.Errorf(lockstep.EFORBIDDEN, "setting a retention policy needs an admin key")
	}
	if p.AbandonAfter < 0 || p.DeleteAfter < 0 {
		return p, lockstep.Errorf(lockstep.EINVALID, "retention durations must not be negative (0 = off)")
	}
	if p.AbandonAfter%time.Second != 0 || p.DeleteAfter%time.Second != 0 {
		return p, lockstep.Errorf(lockstep.EINVALID, "retention durations are whole seconds")
	}
	base, err := s.repos.Repo(ctx, baseName)
	if err != nil {
		return p, err
	}
	if base.IsWorkspace() {
		return p, lockstep.Errorf(lockstep.EINVALID, "%s is a workspace: retention is set on its base repository %s", base.Name, RootOf(ctx, s.repos, base.Name))
	}
	entry := &lockstep.OpEntry{KeyID: actor.ID, KeyName: actor.Name, Op: "repo.retention", Repo: base.Name, TraceID: traceID(ctx),
		Details: map[string]any{"abandon_after": p.AbandonAfter.String(), "delete_after": p.DeleteAfter.String(), "archive_failed": p.ArchiveFailed}}
	if err := rs.SetRetention(ctx, base.ID, p, entry); err != nil {
		return p, err
	}
	return rs.Retention(ctx, base.ID)
}

// Retention returns base's retention policy (the zero policy: off).
func (s *Service) Retention(ctx context.Context, baseName string) (lockstep.RetentionPolicy, error) {
	rs, err := s.retentionStore()
	if err != nil {
		return lockstep.RetentionPolicy{}, err
	}
	base, err := s.repos.Repo(ctx, baseName)
	if err != nil {
		return lockstep.RetentionPolicy{}, err
	}
	if base.IsWorkspace() {
		return lockstep.RetentionPolicy{}, lockstep.Errorf(lockstep.EINVALID, "%s is a workspace: retention is set on its base repository", base.Name)
	}
	return rs.Retention(ctx, base.ID)
}

func (s *Service) retentionStore() (lockstep.RetentionStore, error) {
	rs, ok := s.store.(lockstep.RetentionStore)
	if !ok {
		return nil, lockstep.Errorf(lockstep.EUNAVAILABLE, "this metadata store does not support retention policies")
	}
	return rs, nil
}

// SweepResult is what one retention sweep did.
type SweepResult struct {
	Skipped   bool     // another replica holds the lease
	Abandoned []string // workspaces abandoned for being idle
	Purged    []string // workspaces purged
	Archived  int      // archive refs created
	Errors    []string // per-workspace failures (the sweep goes on)
}

// SweepRetention applies every retention policy once, as actor (the
// system key), under the store's "retention" lease when the store has
// leases (ok false: another replica is sweeping, Skipped).
func (s *Service) SweepRetention(ctx context.Context, actor *lockstep.Key) (*SweepResult, error) {
	rs, err := s.retentionStore()
	if err != nil {
		return nil, err
	}
	res := &SweepResult{}
	if ps, ok := s.store.(lockstep.PackStore); ok {
		stop, ok, err := lockstep.HoldLease(ctx, ps, RetentionLease, retentionHolder(), 2*time.Minute, func(err error) {
			s.log.Warn("retention: lease not renewed", "error", err)
		})
		if err != nil {
			return nil, err
		}
		if !ok {
			res.Skipped = true
			return res, nil
		}
		defer stop()
	}
	policies, err := rs.RetentionPolicies(ctx)
	if err != nil {
		return nil, err
	}
	for _, rr := range policies {
		if err := s.sweepBase(ctx, actor, rr, res); err != nil {
			return res, err
		}
	}
	return res, nil
}

// sweepBase applies one base's policy to its workspaces (forks of forks
// included).
func (s *Service) sweepBase(ctx context.Context, actor *lockstep.Key, rr lockstep.RepoRetention, res *SweepResult) error {
	p := rr.Policy
	if p.AbandonAfter <= 0 && p.DeleteAfter <= 0 {
		return nil
	}
	base, err := s.repos.Repo(ctx, rr.Repo)
	if err != nil {
		return err
	}
	all, err := s.store.ListRepos(ctx, lockstep.RepoFilter{Network: base.Network})
	if err != nil {
		return err
	}
	now := s.now()
	for _, ws := range all {
		if !ws.IsWorkspace() || RootOf(ctx, s.repos, ws.Name) != base.Name {
			continue
		}
		refs, err := s.store.Refs(ctx, ws.ID)
		if err != nil {
			return err
		}
		if len(refs) == 0 && ws.Status != lockstep.StatusActive {
			continue // purged already (a purge abandons an active one first)
		}
		var act error
		switch {
		case ws.Status == lockstep.StatusActive && p.AbandonAfter > 0:
			last := lastActivity(ws, refs)
			if now.Sub(last) < p.AbandonAfter {
				continue
			}
			reason := fmt.Sprintf("retention: no ref moved for %s (abandon after %s)", now.Sub(last).Round(time.Second), p.AbandonAfter)
			if _, act = s.SetStatus(ctx, actor, ws.Name, lockstep.StatusAbandoned, reason); act == nil {
				res.Abandoned = append(res.Abandoned, ws.Name)
			}
		case (ws.Status == lockstep.StatusAbandoned || ws.Status == lockstep.StatusFailed) && p.DeleteAfter > 0:
			if now.Sub(ws.UpdatedAt) < p.DeleteAfter {
				continue
			}
			if ws.Status == lockstep.StatusFailed && p.ArchiveFailed {
				n, err := s.archiveAttempts(ctx, actor, base, ws)
				res.Archived += n
				if err != nil {
					res.Errors = append(res.Errors, fmt.Sprintf("%s: archive: %v", ws.Name, err))
					continue // never purge what could not be archived
				}
			}
			reason := fmt.Sprintf("retention: %s for %s (delete after %s)", ws.Status, now.Sub(ws.UpdatedAt).Round(time.Second), p.DeleteAfter)
			if _, act = s.purge(ctx, actor, ws.Name, reason); act == nil {
				res.Purged = append(res.Purged, ws.Name)
			}
		}
		if act != nil {
			s.log.WarnContext(ctx, "retention", "workspace", ws.Name, "error", act)
			res.Errors = append(res.Errors, fmt.Sprintf("%s: %v", ws.Name, act))
		}
	}
	return nil
}

// lastActivity is when ws last changed: its creation, its status or a
// ref move, the latest.
func lastActivity(ws *lockstep.Repo, refs []lockstep.Ref) time.Time {
	last := ws.CreatedAt
	if ws.UpdatedAt.After(last) {
		last = ws.UpdatedAt
	}
	for _, r := range refs {
		if r.UpdatedAt.After(last) {
			last = r.UpdatedAt
		}
	}
	return last
}

// ArchiveRef names the archive ref of a workspace's attempt n in its base.
func ArchiveRef(ws string, n int64) string {
	return "refs/archive/" + ws + "/" + strconv.FormatInt(n, 10)
}

// archiveAttempts keeps ws's attempts (the newest MaxArchived) on
// archive refs in base, skipping those that exist (an earlier sweep that
// archived but did not purge). Returns how many refs it created.
func (s *Service) archiveAttempts(ctx context.Context, actor *lockstep.Key, base, ws *lockstep.Repo) (int, error) {
	attempts, err := s.store.Attempts(ctx, ws.ID, MaxArchived)
	if err != nil {
		return 0, err
	}
	have, err := s.store.Refs(ctx, base.ID)
	if err != nil {
		return 0, err
	}
	exists := make(map[string]bool, len(have))
	for _, r := range have {
		exists[r.Name] = true
	}
	refs := map[string]string{}
	for _, a := range attempts {
		if name := ArchiveRef(ws.Name, a.Number); !exists[name] {
			refs[name] = a.Commit
		}
	}
	err = s.repos.ArchiveRefs(ctx, actor, base, refs, "workspace.archive",
		map[string]any{"workspace": ws.Name, "attempts": len(refs), "reason": "retention: archive failed attempts"})
	if err != nil {
		return 0, err
	}
	return len(refs), nil
}

// retentionHolder names this replica in the retention lease.
var retentionHolder = sync.OnceValue(func() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s-%d-%d", host, os.Getpid(), time.Now().UnixNano()%1e9)
})
