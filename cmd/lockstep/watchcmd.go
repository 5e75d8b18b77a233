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
	f := newFlagger("watch", e)
	var dir string
	var opts worktree.WatchOptions
	f.str(&dir, "dir", "LOCKSTEP_WATCH_DIR", "", "the directory to watch (required): the one given to lockstep push")
	f.int(&opts.MaxTracked, "max-tracked", "LOCKSTEP_WATCH_MAX_TRACKED", worktree.DefaultWatchMaxTracked, "changed paths remembered; past it the watcher forgets them and every client's next push scans everything")
	f.dur(&opts.Timeout, "timeout", "LOCKSTEP_WATCH_TIMEOUT", worktree.DefaultWatchTimeout, "how long one query may take (read, wait for the event loop, answer)")
	if err := f.parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if dir == "" || f.fs.NArg() != 0 {
		return lockstep.Errorf(lockstep.EINVALID, "usage: lockstep watch --dir DIR")
	}
	// Stopped by a signal, it removes its socket; killed, it leaves a
	// stale one, which pushes refuse and the next watcher replaces.
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	return worktree.Watch(ctx, dir, opts, func() {
		fmt.Fprintf(e.stderr, "watching %s (socket %s); stop with Ctrl-C\n", dir, worktree.WatchSocketPath(dir))
	})
}
