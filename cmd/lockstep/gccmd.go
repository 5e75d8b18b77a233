package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/api"
)

// cmdGC is `lockstep gc [--repo R] [--prune now|DURATION] [--dry-run]`:
// an object GC now (admin key), printing what it reclaimed.
func cmdGC(ctx context.Context, e *env, args []string) error {
	var req api.GCRequest
	cf, c, rest, err := setup("gc", e, args, func(f *flagger) {
		f.fs.StringVar(&req.Repo, "repo", "", "only the network of this repository (default: every network)")
		f.fs.StringVar(&req.Prune, "prune", "", "drop unreachable objects older than this: now or a duration such as 336h (default: the server's --object-retention)")
		f.fs.BoolVar(&req.DryRun, "dry-run", false, "report what would be dropped; change nothing")
	})
	if err != nil {
		return err
	}
	if len(rest) != 0 {
		return lockstep.Errorf(lockstep.EINVALID, "usage: lockstep gc [--repo R] [--prune now|DURATION] [--dry-run]")
	}
	res, err := c.GC(ctx, req)
	if err != nil {
		return err
	}
	return cf.out(e, res, func() {
		switch {
		case res.Skipped:
			fmt.Fprintln(e.stdout, "another replica is running a gc: nothing done")
			return
		case res.DryRun:
			fmt.Fprintf(e.stdout, "would reclaim %d objects (%s) in %d packs and %d loose files, %d networks, retention %s\n",
				res.Objects, humanBytes(res.Bytes), res.Packs, res.Loose, res.Networks, res.Retention)
		default:
			fmt.Fprintf(e.stdout, "reclaimed %d objects (%s) in %d packs and %d loose files, %d networks, retention %s\n",
				res.Objects, humanBytes(res.Bytes), res.Packs, res.Loose, res.Networks, res.Retention)
		}
		if res.BucketPacks > 0 {
			fmt.Fprintf(e.stdout, "deleted %d retired packs from the object store\n", res.BucketPacks)
		}
		if len(res.Busy) > 0 {
			fmt.Fprintf(e.stdout, "left for the next run (refs kept moving): %s\n", strings.Join(res.Busy, ", "))
		}
	})
}
