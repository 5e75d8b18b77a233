package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/worktree"
)

// cmdWatch runs the optional watcher of a directory (like git's
// fsmonitor--daemon): `lockstep push` of that directory then stats and
// hashes only the paths changed since its last push.
func cmdWatch(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("watch", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	dir := fs.String("dir", "", "the directory to watch (required): the one given to lockstep push")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return lockstep.Errorf(lockstep.EINVALID, "%v", err)
	}
	if *dir == "" || fs.NArg() != 0 {
		return lockstep.Errorf(lockstep.EINVALID, "usage: lockstep watch --dir DIR")
	}
	// Stopped by a signal, it removes its socket; killed, it leaves a
	// stale one, which pushes refuse and the next watcher replaces.
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	return worktree.Watch(ctx, *dir, func() {
		fmt.Fprintf(e.stderr, "watching %s (socket %s); stop with Ctrl-C\n", *dir, worktree.WatchSocketPath(*dir))
	})
}
