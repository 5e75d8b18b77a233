package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/client"
	"github.com/lockstep-hq/lockstep/runner"
)

// cmdRunner parses `lockstep runner`'s flags and runs package runner: a
// small CI that receives gate hooks, tests each commit and posts a check.
func cmdRunner(ctx context.Context, e *env, args []string) error {
	var o runner.Options
	var secretFile string
	var events multiFlag
	cf, c, rest, err := setup("runner", e, args, func(f *flagger) {
		f.fs.StringVar(&o.Repo, "repo", "", "base repository whose workspaces to test (required)")
		f.fs.StringVar(&o.Check, "check", "", "check name to post (required)")
		f.fs.StringVar(&o.Listen, "listen", "127.0.0.1:0", "address the hook receiver listens on")
		f.fs.StringVar(&o.PublicURL, "public-url", "", "URL the server reaches the receiver at (default: http://<listen>/hook)")
		f.fs.DurationVar(&o.Timeout, "timeout", 10*time.Minute, "kill the command after this long (the check fails)")
		f.fs.IntVar(&o.Parallel, "parallel", 1, "commits tested at once")
		f.fs.Var(&events, "event", "events to test on (default push)")
		f.fs.StringVar(&secretFile, "secret-file", "", "file with the hook secret (first line; more lines: further secrets accepted, for a rotation); default: a random one")
		f.fs.DurationVar(&o.Tolerance, "tolerance", client.DefaultWebhookTolerance, "refuse deliveries whose webhook-timestamp is further than this from now")
	})
	if err != nil {
		return err
	}
	if o.Repo == "" || o.Check == "" || len(rest) == 0 {
		return lockstep.Errorf(lockstep.EINVALID, "usage: lockstep runner --repo R --check NAME -- COMMAND [ARGS...]")
	}
	if secretFile != "" {
		b, err := os.ReadFile(secretFile)
		if err != nil {
			return fmt.Errorf("--secret-file: %w", err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			if l = strings.TrimSpace(l); l != "" {
				o.Secrets = append(o.Secrets, l)
			}
		}
		if len(o.Secrets) == 0 {
			return lockstep.Errorf(lockstep.EINVALID, "--secret-file %s is empty", secretFile)
		}
	}
	o.Client, o.Command, o.Events, o.Quiet = c, rest, events, cf.json
	o.Stdout, o.Stderr = e.stdout, e.stderr
	return runner.Run(ctx, o)
}
