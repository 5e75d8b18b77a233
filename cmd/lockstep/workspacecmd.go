package main

import (
	"context"
	"fmt"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/api"
)

const workspaceUsage = "usage: lockstep workspace fail WORKSPACE --reason R | abandon WORKSPACE [--reason R] | delete WORKSPACE"

// cmdWorkspace marks a workspace failed (POST /repos/{ws}/status) or
// abandons it (DELETE /repos/{ws}): what an orchestrator does with an
// attempt that will not land. Its refs stay readable.
func cmdWorkspace(ctx context.Context, e *env, args []string) error {
	if done, err := subcommands(e, "workspace", workspaceUsage, args); done {
		return err
	}
	sub := args[0]
	if sub != "fail" && sub != "abandon" && sub != "delete" {
		return lockstep.Errorf(lockstep.EINVALID, "unknown workspace subcommand %q: want fail, abandon or delete", sub)
	}
	var reason string
	cf, c, rest, err := setup("workspace "+sub, e, args[1:], func(f *flagger) {
		f.fs.StringVar(&reason, "reason", "", "why (shown to reviewers and in the operations log)")
	})
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return lockstep.Errorf(lockstep.EINVALID, "usage: lockstep workspace %s %s", sub, synopsis["workspace "+sub])
	}
	var r *api.Repo
	if sub == "delete" {
		r, err = c.DeleteWorkspace(ctx, rest[0])
	} else if sub == "fail" {
		if reason == "" {
			return lockstep.Errorf(lockstep.EINVALID, "lockstep workspace fail needs --reason: say why the attempt failed")
		}
		r, err = c.SetStatus(ctx, rest[0], "failed", reason)
	} else {
		r, err = c.Abandon(ctx, rest[0], reason)
	}
	if err != nil {
		return err
	}
	return cf.out(e, viewRepo(r, ""), func() {
		if sub == "delete" {
			fmt.Fprintf(e.stdout, "workspace %s deleted (refs, database branch, checkpoints and staged effects; its oplog entries stay)\n", r.Name)
			return
		}
		fmt.Fprintf(e.stdout, "workspace %s is now %s\n", r.Name, r.Status)
	})
}
