package repositories

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/gitobj"
)

// Object GC (issue 28 item 1; docs/replicas.md "Object GC"). The
// service reads each network's roots from the store (refs, attempts,
// checkpoints), lets the network drop its unreachable objects older than
// the retention (repo/gc.go, replica/objgc.go), and commits through the
// store's CommitGC, which refuses when a ref moved to something the GC
// did not see and records the GC so that ref moves whose objects were
// checked before it are refused (lockstep.RefUpdate.ObjectsSince).

// DefaultObjectRetention is how long unreachable objects are kept by
// default (git's gc.pruneExpire: two weeks).
const DefaultObjectRetention = 14 * 24 * time.Hour

// gcClockSkew is how far replicas' clocks may disagree: with shared
// networks (object storage) a ref move counts its objects as checked this
// much before its request began. One process (local mode) has one clock.
const gcClockSkew = time.Second

// gcLease names the lease one GC run holds (one replica at a time).
const gcLease = "objgc"

// gcAttempts bounds the runs of one network's GC whose commit point found
// a ref moved meanwhile; the network is reported busy after them.
const gcAttempts = 3

// objectsSince is lockstep.RefUpdate.ObjectsSince of a write that began
// at t0: the earlier of t0 and its request's start, less the clock skew
// allowed between replicas (shared networks only).
func (s *Service) objectsSince(ctx context.Context, t0 time.Time) time.Time {
	since := t0
	if rs, ok := lockstep.RequestStart(ctx); ok && (since.IsZero() || rs.Before(since)) {
		since = rs
	}
	if since.IsZero() || !s.shared {
		return since
	}
	return since.Add(-gcClockSkew)
}

// GCOptions configure Service.GC.
type GCOptions struct {
	// Repo limits the run to the network of this repository ("" = all).
	Repo string
	// Retention: unreachable objects older than this are dropped; 0 drops
	// every unreachable object written before the run ("--prune now").
	Retention time.Duration
	// DryRun reports what would be dropped and changes nothing.
	DryRun bool
}

// GCResult says what a GC run dropped (or would drop).
type GCResult struct {
	DryRun    bool   `json:"dry_run"`
	Retention string `json:"retention"`
	Networks  int    `json:"networks"`
	gitobj.GCStats
	// BucketPacks counts packs deleted from the object store (retired
	// longer than the grace period ago); object storage only.
	BucketPacks int `json:"bucket_packs_deleted"`
	// Busy lists the networks left alone because their refs kept moving
	// to objects the run had not seen; the next run tries again.
	Busy []string `json:"busy,omitempty"`
	// Skipped is true when another replica was running a GC.
	Skipped bool `json:"skipped,omitempty"`
}

// GC drops the unreachable objects older than opts.Retention of every
// network (or of opts.Repo's), under a lease (one replica at a time),
// and records what it dropped in the operations log (op "gc"). Only an
// admin key may run it (permission_denied); an unknown opts.Repo is
// not_found; a store without GC support is unavailable. A dry run takes
// no lease and writes no log entry: it is what GCPlan answers.
func (s *Service) GC(ctx context.Context, actor *lockstep.Key, opts GCOptions) (*GCResult, error) {
	if actor == nil || actor.Role != lockstep.RoleAdmin {
		return nil, lockstep.Errorf(lockstep.EFORBIDDEN, "object gc needs an admin key")
	}
	if opts.Retention < 0 {
		return nil, lockstep.Errorf(lockstep.EINVALID, "retention %s: want 0 (now) or a positive duration", opts.Retention)
	}
	gcs, ok := s.store.(lockstep.GCStore)
	if !ok {
		return nil, lockstep.Errorf(lockstep.EUNAVAILABLE, "this metadata store does not support object gc")
	}
	t0 := s.now()
	res := &GCResult{DryRun: opts.DryRun, Retention: opts.Retention.String()}
	var nets []string
	if opts.Repo != "" {
		r, err := s.Repo(ctx, opts.Repo)
		if err != nil {
			return nil, err
		}
		nets = []string{r.Network}
	} else {
		var err error
		if nets, err = s.gcNetworks(ctx, gcs); err != nil {
			return nil, err
		}
	}
	if !opts.DryRun {
		stop, ok, err := s.holdGCLease(ctx)
		if err != nil {
			return nil, err
		}
		if !ok {
			res.Skipped = true
			return res, nil
		}
		defer stop()
	}
	cutoff := t0.Add(-opts.Retention)
	for _, name := range nets {
		st, busy, err := s.gcNetwork(ctx, gcs, name, cutoff, opts.DryRun)
		if err != nil {
			return res, fmt.Errorf("gc network %s: %w", name, err)
		}
		res.Networks++
		res.GCStats.Add(st)
		if busy {
			res.Busy = append(res.Busy, name)
		}
	}
	if opts.DryRun {
		return res, nil
	}
	if s.cfg.SweepBucket != nil {
		n, err := s.cfg.SweepBucket(ctx)
		if err != nil {
			s.log.WarnContext(ctx, "gc: bucket sweep", "error", err)
		}
		res.BucketPacks = n
	}
	entry := &lockstep.OpEntry{KeyID: actor.ID, KeyName: actor.Name, Op: "gc", Repo: opts.Repo, TraceID: traceID(ctx),
		Objects: res.Objects, Bytes: res.Bytes, DurationUS: s.now().Sub(t0).Microseconds(),
		Details: map[string]any{"networks": res.Networks, "packs": res.Packs, "loose": res.Loose,
			"bucket_packs_deleted": res.BucketPacks, "retention": res.Retention}}
	if len(res.Busy) > 0 {
		entry.Details["busy"] = res.Busy
	}
	if err := s.store.AppendOp(ctx, entry); err != nil {
		return res, err
	}
	return res, nil
}

// gcNetworks lists the networks a GC of everything visits: those the
// store knows (with a repository; in object storage also with live packs
// registered) and, in local mode, every network directory on disk. A
// network with no repository left (a create that failed after making its
// directory) has no roots: its objects are dropped once older than the
// retention, and its empty directory stays.
func (s *Service) gcNetworks(ctx context.Context, gcs lockstep.GCStore) ([]string, error) {
	nets, err := gcs.GCNetworks(ctx)
	if err != nil || s.shared {
		return nets, err
	}
	dirs, err := filepath.Glob(filepath.Join(s.cfg.DataDir, "networks", "*.git"))
	if err != nil {
		return nil, err
	}
	for _, d := range dirs {
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			nets = append(nets, strings.TrimSuffix(filepath.Base(d), ".git"))
		}
	}
	slices.Sort(nets)
	return slices.Compact(nets), nil
}

// GCPlan answers what a GC with this retention would drop now (objects,
// packs, loose files, bytes), for repoName's network or every network
// (""), changing nothing: the storage accounting's "what GC would free".
func (s *Service) GCPlan(ctx context.Context, repoName string, retention time.Duration) (*GCResult, error) {
	return s.GC(ctx, &lockstep.Key{ID: "system", Name: "system", Role: lockstep.RoleAdmin}, GCOptions{Repo: repoName, Retention: retention, DryRun: true})
}

// gcNetwork runs one network's GC, again when its commit point found a
// ref moved meanwhile (up to gcAttempts; then busy).
func (s *Service) gcNetwork(ctx context.Context, gcs lockstep.GCStore, name string, cutoff time.Time, dry bool) (gitobj.GCStats, bool, error) {
	for attempt := 1; ; attempt++ {
		roots, err := gcs.GCRoots(ctx, name)
		if err != nil {
			return gitobj.GCStats{}, false, err
		}
		n, err := s.network(ctx, name)
		if err != nil {
			return gitobj.GCStats{}, false, err
		}
		seen := map[string]string{}
		allowed := map[string]bool{}
		var tips []gitobj.Hash
		add := func(oid string) {
			if oid != "" && oid != lockstep.ZeroOID && !allowed[oid] && gitobj.IsHash(oid) {
				allowed[oid] = true
				tips = append(tips, gitobj.NewHash(oid))
			}
		}
		for _, r := range roots.Refs {
			seen[r.Repo+"\x00"+r.Name] = r.OID
			add(r.OID)
		}
		for _, oid := range roots.Retained {
			add(oid)
		}
		// A ref may have been deleted, or moved to what this run kept;
		// anything else may name an object it drops.
		check := func(cur []lockstep.NetworkRef) error {
			for _, r := range cur {
				if seen[r.Repo+"\x00"+r.Name] == r.OID || allowed[r.OID] {
					continue
				}
				return lockstep.Errorf(lockstep.EREFCONFLICT, "gc %s: %s %s moved to %s during the gc", name, r.Repo, r.Name, r.OID)
			}
			return nil
		}
		st, err := n.CollectGarbage(ctx, gitobj.GCOptions{Roots: tips, Cutoff: cutoff, DryRun: dry,
			Commit: func(p *lockstep.PackRecord, retire []string) (int64, error) {
				return gcs.CommitGC(ctx, name, check, p, retire)
			}})
		switch c := lockstep.ErrorCode(err); {
		case err == nil:
			return st, false, nil
		case (c == lockstep.EREFCONFLICT || c == lockstep.ECONFLICT) && attempt < gcAttempts:
			continue
		case c == lockstep.EREFCONFLICT || c == lockstep.ECONFLICT:
			s.log.InfoContext(ctx, "gc: network busy, left for the next run", "network", name, "error", err)
			return gitobj.GCStats{}, true, nil
		default:
			return gitobj.GCStats{}, false, err
		}
	}
}

// holdGCLease claims the GC lease in the store and renews it while the
// run lasts; ok is false when another replica holds it. A store without
// leases (none today) runs unguarded: CommitGC is what keeps refs safe.
func (s *Service) holdGCLease(ctx context.Context) (stop func(), ok bool, err error) {
	ps, isPS := s.store.(lockstep.PackStore)
	if !isPS {
		return func() {}, true, nil
	}
	return lockstep.HoldLease(ctx, ps, gcLease, s.gcHolder(), 2*time.Minute, func(err error) {
		s.log.Warn("gc: lease not renewed", "error", err)
	})
}

func (s *Service) gcHolder() string {
	s.gcHolderOnce.Do(func() {
		host, _ := os.Hostname()
		s.gcHolderName = fmt.Sprintf("%s-%d-%d", host, os.Getpid(), time.Now().UnixNano()%1e9)
	})
	return s.gcHolderName
}
