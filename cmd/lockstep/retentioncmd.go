package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/auth"
	"github.com/lockstep-hq/lockstep/checkpoints"
	"github.com/lockstep-hq/lockstep/workspaces"
)

const retentionUsage = "usage: lockstep repo retention REPO [--abandon-after AGE] [--delete-after AGE] [--archive-failed[=false]]"

// cmdRepoRetention is `lockstep repo retention REPO [flags]` (admin):
// without flags it shows the base's retention policy; with flags it sets
// the ones given (the others keep their value) and shows the result.
func cmdRepoRetention(ctx context.Context, e *env, args []string) error {
	var abandon, del string
	var archive bool
	var fs *flag.FlagSet
	cf, c, rest, err := setup("repo retention", e, args, func(f *flagger) {
		fs = f.fs
		f.fs.StringVar(&abandon, "abandon-after", "", "abandon active workspaces whose refs have not moved for this long: 7d, 36h or 0 (off)")
		f.fs.StringVar(&del, "delete-after", "", "purge abandoned and failed workspaces this long after their status changed: 30d, 36h or 0 (off)")
		f.fs.BoolVar(&archive, "archive-failed", false, "keep a failed workspace's attempts on refs/archive/WORKSPACE/N in the base before purging it")
	})
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return lockstep.Errorf(lockstep.EINVALID, retentionUsage)
	}
	p, err := c.Retention(ctx, rest[0])
	if err != nil {
		return err
	}
	set := false
	var bad error
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "abandon-after":
			p.AbandonAfter, set = abandon, true
			_, bad = lockstep.ParseAge(abandon)
		case "delete-after":
			p.DeleteAfter, set = del, true
			if _, err := lockstep.ParseAge(del); err != nil {
				bad = err
			}
		case "archive-failed":
			p.ArchiveFailed, set = archive, true
		}
	})
	if bad != nil {
		return bad
	}
	if set {
		if p, err = c.SetRetention(ctx, rest[0], *p); err != nil {
			return err
		}
	}
	return cf.out(e, p, func() {
		if p.AbandonAfter == "0" && p.DeleteAfter == "0" {
			fmt.Fprintf(e.stdout, "retention of %s: off\n", rest[0])
			return
		}
		fmt.Fprintf(e.stdout, "retention of %s: abandon after %s, delete after %s, archive failed %v\n", rest[0], p.AbandonAfter, p.DeleteAfter, p.ArchiveFailed)
	})
}

// startRetention runs the retention sweeper every interval (0: never)
// until the app closes; one replica sweeps at a time (the store's
// "retention" lease), as the system key.
func (a *app) startRetention(wss *workspaces.Service, cps *checkpoints.Service, interval, checkpointWindow time.Duration, logger *slog.Logger) {
	if interval <= 0 {
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				res, err := wss.SweepRetention(ctx, auth.System)
				switch {
				case err != nil:
					logger.Error("retention sweep", "error", err)
				case !res.Skipped && len(res.Abandoned)+len(res.Purged)+len(res.Errors) > 0:
					logger.Info("retention sweep", "abandoned", res.Abandoned, "purged", res.Purged, "archived", res.Archived, "errors", res.Errors)
				}
				if err != nil || res.Skipped {
					continue // the replica holding the lease prunes
				}
				// Then the checkpoints' snapshots (after the sweep: its
				// abandons and purges free theirs too).
				pr, err := cps.PruneSnapshots(ctx, checkpointWindow)
				switch {
				case err != nil:
					logger.Error("checkpoint snapshot retention", "error", err)
				case pr.Database+pr.Redis+len(pr.Errors) > 0:
					logger.Info("checkpoint snapshot retention", "database", pr.Database, "redis", pr.Redis, "errors", pr.Errors)
				}
			}
		}
	}()
	a.closers = append(a.closers, func() { stop(); <-done })
}
