package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/api"
	"github.com/lockstep-hq/lockstep/fssnap"
	"github.com/lockstep-hq/lockstep/internal/lazyre"
)

func cmdCheckpoint(ctx context.Context, e *env, args []string) error {
	var branch, fsID, label, stateRoot string
	var quiet bool
	cf, c, rest, err := setup("checkpoint", e, args, func(f *flagger) {
		f.fs.BoolVar(&quiet, "quiet", false, "print only the checkpoint id")
		f.str(&stateRoot, "state-root", "LOCKSTEP_SNAPSHOT_STATE", "", "where snapshot records live (as for `lockstep snapshot`)")
		f.fs.StringVar(&branch, "branch", "", "branch (default: the default branch)")
		f.fs.StringVar(&fsID, "fs-snapshot", "", "id of a filesystem snapshot taken with `lockstep snapshot take`")
		f.fs.StringVar(&label, "label", "", "a note for reviewers")
	})
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return lockstep.Errorf(lockstep.EINVALID, "usage: lockstep checkpoint WORKSPACE [--fs-snapshot ID] [--label L]")
	}
	if fsID != "" {
		if err := checkFSSnapshot(e, stateRoot, fsID); err != nil {
			return err
		}
	}
	cp, err := c.CreateCheckpoint(ctx, rest[0], api.CheckpointRequest{Branch: branch, FSSnapshot: fsID, Label: label})
	if err != nil {
		return err
	}
	return cf.out(e, cp, func() {
		if quiet {
			fmt.Fprintln(e.stdout, cp.ID)
			return
		}
		fmt.Fprintf(e.stdout, "checkpoint %s of %s@%s: commit %s, database snapshot %q, filesystem snapshot %q (%.1f ms)\n",
			cp.ID, rest[0], cp.Branch, short(cp.Commit), cp.DBSnapshot, cp.FSSnapshot, cp.DurationMS)
	})
}

func cmdCheckpoints(ctx context.Context, e *env, args []string) error {
	cf, c, rest, err := setup("checkpoints", e, args, nil)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return lockstep.Errorf(lockstep.EINVALID, "usage: lockstep checkpoints WORKSPACE")
	}
	cps, err := c.Checkpoints(ctx, rest[0], 0)
	if err != nil {
		return err
	}
	out := api.CheckpointList{Checkpoints: cps}
	return cf.out(e, out, func() {
		rows := [][]string{{"ID", "BRANCH", "COMMIT", "DB SNAPSHOT", "FS SNAPSHOT", "CREATED", "LABEL"}}
		for _, cp := range out.Checkpoints {
			rows = append(rows, []string{cp.ID, cp.Branch, short(cp.Commit), cp.DBSnapshot, cp.FSSnapshot, cp.CreatedAt.Format("2006-01-02 15:04:05"), cp.Label})
		}
		table(e, rows)
	})
}

func cmdRestore(ctx context.Context, e *env, args []string) error {
	var expect string
	cf, c, rest, err := setup("restore", e, args, func(f *flagger) {
		f.fs.StringVar(&expect, "expect", "", "the oid the branch must still have")
	})
	if err != nil {
		return err
	}
	if len(rest) != 2 {
		return lockstep.Errorf(lockstep.EINVALID, "usage: lockstep restore WORKSPACE CHECKPOINT [--expect OID]")
	}
	r, err := c.RestoreCheckpoint(ctx, rest[0], rest[1], api.RestoreRequest{ExpectOID: expect})
	if err != nil {
		if d := lockstep.ErrorDetails(err); d != nil && !cf.json {
			if parts, ok := d["parts"]; ok {
				b, _ := json.MarshalIndent(parts, "", "  ")
				fmt.Fprintf(e.stderr, "partial restore:\n%s\n", b)
			}
		}
		return err
	}
	if cf.json {
		return printValue(e, r)
	}
	fmt.Fprintf(e.stdout, "restored %s to %s: code at %s%s, database restored: %v%s (%.1f ms)\n", rest[0], rest[1], short(r.Commit),
		paren(r.Code.Skipped), r.DBRestored, paren(r.Database.Skipped), r.DurationMS)
	if r.RedisRestored {
		fmt.Fprintf(e.stdout, "redis restored (%.1f ms)\n", r.RedisMS)
	}
	if r.FSSnapshot != "" {
		fmt.Fprintf(e.stdout, "restore the files with: lockstep snapshot restore DIR %s\n", r.FSSnapshot)
	}
	return nil
}

func paren(s string) string {
	if s == "" {
		return ""
	}
	return " (" + s + ")"
}

func cmdDatabase(ctx context.Context, e *env, args []string) error {
	if done, err := subcommands(e, "database", "usage: lockstep database bind REPO --template DB | show REPO | refresh REPO", args); done {
		return err
	}
	sub := args[0]
	var template string
	cf, c, rest, err := setup("database "+sub, e, args[1:], func(f *flagger) {
		if sub == "bind" {
			f.fs.StringVar(&template, "template", "", "the template database on the branch server")
		}
	})
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return lockstep.Errorf(lockstep.EINVALID, "usage: lockstep database %s REPO", sub)
	}
	var db *api.Database
	switch sub {
	case "bind":
		db, err = c.BindDatabase(ctx, rest[0], template)
	case "show":
		db, err = c.Database(ctx, rest[0])
	case "refresh":
		db, err = c.RefreshDatabase(ctx, rest[0])
	default:
		return lockstep.Errorf(lockstep.EINVALID, "unknown database subcommand %q: want bind, show or refresh", sub)
	}
	if err != nil {
		return branchingOffHint(err, sub, rest[0], template)
	}
	return printAnswer(e, cf, db)
}

// branchingOffHint turns the server's "database branching is off" into
// the steps to take: the setting is read at start, so the server must be
// restarted with it.
func branchingOffHint(err error, sub, repo, template string) error {
	if lockstep.ErrorCode(err) != lockstep.ENOTCONFIGURED || !strings.Contains(err.Error(), "LOCKSTEP_BRANCH_DATABASE_URL") {
		return err
	}
	var le *lockstep.Error
	if !errors.As(err, &le) {
		return err
	}
	again := "lockstep database " + sub + " " + repo
	if template != "" {
		again += " --template " + template
	}
	out := *le
	out.Message = le.Message + ". The server reads this setting only when it starts: stop `lockstep serve`, start it again with " +
		"LOCKSTEP_BRANCH_DATABASE_URL=postgres://USER@HOST:5432/postgres (a role allowed to CREATE DATABASE and CREATE ROLE), then run `" + again + "` again"
	return &out
}

// checkFSSnapshot refuses a filesystem snapshot id that `lockstep
// snapshot take` did not record on this machine: a checkpoint naming a
// snapshot nobody can restore is a trap found only on the bad day.
func checkFSSnapshot(e *env, stateRoot, id string) error {
	if !snapIDPattern.MatchString(id) {
		return lockstep.Errorf(lockstep.EINVALID, "--fs-snapshot %q is not a snapshot id (lowercase letters, digits and '-', as printed by `lockstep snapshot take DIR`)", id)
	}
	if stateRoot == "" {
		stateRoot = fssnap.DefaultStateRoot(e.getenv)
	}
	hits, _ := filepath.Glob(filepath.Join(stateRoot, "*", "snapshots", id+".json"))
	if len(hits) == 0 {
		return lockstep.Errorf(lockstep.ENOTFOUND, "no filesystem snapshot %s on this machine (looked in %s): take one with `lockstep snapshot take DIR` and pass the id it prints", id, stateRoot)
	}
	return nil
}

var snapIDPattern = lazyre.New(`^[a-z0-9-]{1,64}$`)
