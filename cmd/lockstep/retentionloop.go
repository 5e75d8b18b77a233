//go:build lockstep_server

package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/lockstep-hq/lockstep/auth"
	"github.com/lockstep-hq/lockstep/checkpoints"
	"github.com/lockstep-hq/lockstep/workspaces"
)

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
