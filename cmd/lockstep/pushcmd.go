package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/api"
	"github.com/lockstep-hq/lockstep/client"
	"github.com/lockstep-hq/lockstep/worktree"
)

// pushReport is what `lockstep push` prints.
type pushReport struct {
	client.PushResult
	Files       int     `json:"files"`
	Hashed      int     `json:"hashed"`
	Watched     bool    `json:"watched"`
	ObjectsSent int     `json:"objects_sent"`
	BytesSent   int64   `json:"bytes_sent"`
	RoundTrips  int     `json:"round_trips"`
	TotalMS     float64 `json:"total_ms"`
	ScanMS      float64 `json:"scan_ms"`
	ServerMS    float64 `json:"server_ms"`

	uploaded client.UploadStats
}

func cmdPush(ctx context.Context, e *env, args []string) error {
	var repoName, branch, expect, message, author, from string
	var expectCurrent, force, allowEmpty, quiet bool
	var watchTimeout time.Duration
	cf, c, rest, err := setup("push", e, args, func(f *flagger) {
		f.dur(&watchTimeout, "watch-timeout", "LOCKSTEP_WATCH_TIMEOUT", worktree.DefaultWatchTimeout, "how long to wait for a `lockstep watch` daemon's answer before scanning everything")
		f.fs.StringVar(&repoName, "repo", "", "repository or workspace (required)")
		f.fs.StringVar(&branch, "branch", "", "branch (default: the repository's default branch)")
		f.fs.StringVar(&expect, "expect", "", "compare-and-swap: the oid the branch must still have (40 zeros: must not exist)")
		f.fs.BoolVar(&expectCurrent, "expect-current", false, "read the branch's current oid and push only if it is still that")
		f.fs.BoolVar(&force, "force", false, "write an existing branch without --expect")
		f.fs.StringVar(&message, "message", "", "commit message")
		f.fs.StringVar(&author, "author", "", `commit author "Name <email>" (default: the key's name)`)
		f.fs.BoolVar(&allowEmpty, "allow-empty", false, "commit even if the tree did not change")
		f.fs.StringVar(&from, "from", "", "start a new branch from this revision (default: the default branch's tip)")
		f.fs.BoolVar(&quiet, "quiet", false, "no progress output")
	})
	if err != nil {
		return err
	}
	if len(rest) != 1 || repoName == "" {
		return lockstep.Errorf(lockstep.EINVALID, "usage: lockstep push DIR --repo R [--branch B] [--expect OID | --expect-current]")
	}
	if expect != "" && expectCurrent {
		return lockstep.Errorf(lockstep.EINVALID, "--expect and --expect-current exclude each other")
	}
	start := time.Now()
	pushGC(e)
	prog := newProgress(e, cf.json || quiet, "uploading")
	rep, err := pushDir(ctx, c, rest[0], repoName, client.WriteOptions{Branch: branch, ExpectOID: expect, Force: force,
		Message: message, Author: author, AllowEmpty: allowEmpty, From: from}, expectCurrent, prog, watchTimeout)
	if err != nil {
		return pushWords(err, repoName)
	}
	prog.end()
	rep.TotalMS = msSince(start)
	return cf.out(e, rep, func() {
		verb := "pushed"
		if !rep.Changed {
			verb = "unchanged"
		}
		fmt.Fprintf(e.stdout, "%s %s@%s\ncommit  %s\ntree    %s\nobjects %d sent (%s), %d written on the server (%s)\nfiles   %d scanned, %d hashed\ntime    %.1f ms (scan %.1f ms, server %.1f ms, %d round trips)\n",
			verb, repoName, rep.Branch, rep.Commit, rep.Tree, rep.ObjectsSent, humanBytes(rep.BytesSent), rep.ObjectsWritten, humanBytes(rep.BytesWritten),
			rep.Files, rep.Hashed, rep.TotalMS, rep.ScanMS, rep.ServerMS, rep.RoundTrips)
	})
}

// pushGCPercent is the collector's target for a push process when GOGC
// is not set: a push allocates about 1.2 KB per file of the tree (stat
// cache, snapshot, trees) and exits, so Go's default (100), which starts
// collecting at 4 MB, would run several collections per push of a large
// tree for memory the exit frees anyway. README's settings table.
const pushGCPercent = 400

// pushGC sets pushGCPercent unless the environment sets GOGC.
func pushGC(e *env) {
	if e.getenv("GOGC") == "" {
		debug.SetGCPercent(pushGCPercent)
	}
}

// pushDir runs client.PushDir on dir with the stat cache outside it.
func pushDir(ctx context.Context, c *client.Client, dir, repoName string, o client.WriteOptions, expectCurrent bool, progress *progress, watchTimeout time.Duration) (*pushReport, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	return pushDirCache(ctx, c, abs, repoName, o, expectCurrent, progress, statCachePath(abs), watchTimeout)
}

// pushDirCache is client.PushDir with an explicit stat cache file, its
// result as `lockstep push` prints it. watchTimeout bounds the query to a
// `lockstep watch` daemon (0: the default).
func pushDirCache(ctx context.Context, c *client.Client, dir, repoName string, o client.WriteOptions, expectCurrent bool, progress *progress, cachePath string, watchTimeout time.Duration) (*pushReport, error) {
	po := client.PushDirOptions{WriteOptions: o, ExpectCurrent: expectCurrent, StatCache: cachePath, WatchTimeout: watchTimeout}
	if progress != nil {
		po.Progress = progress.update
		po.ToSend = func(n int) { progress.total = n }
	}
	res, err := c.PushDir(ctx, repoName, dir, po)
	if err != nil {
		return nil, err
	}
	return &pushReport{PushResult: res.PushResult, Files: res.Files, Hashed: res.Hashed, Watched: res.Watched, ObjectsSent: res.ObjectsSent, BytesSent: res.BytesSent,
		RoundTrips: res.RoundTrips, ScanMS: res.ScanMS, ServerMS: res.ServerMS, uploaded: res.Uploaded}, nil
}

func msSince(t time.Time) float64 { return float64(time.Since(t).Microseconds()) / 1000 }

func cmdRollback(ctx context.Context, e *env, args []string) error {
	var repoName, branch, to, expect, message string
	var expectCurrent, force bool
	cf, c, _, err := setup("rollback", e, args, func(f *flagger) {
		f.fs.StringVar(&repoName, "repo", "", "repository or workspace (required)")
		f.fs.StringVar(&branch, "branch", "", "branch (default: the default branch)")
		f.fs.StringVar(&to, "to", "", "revision whose tree to restore (required)")
		f.fs.StringVar(&expect, "expect", "", "the oid the branch must still have")
		f.fs.BoolVar(&expectCurrent, "expect-current", false, "read the current oid and roll back only if it is still that")
		f.fs.BoolVar(&force, "force", false, "roll back without --expect")
		f.fs.StringVar(&message, "message", "", "commit message")
	})
	if err != nil {
		return err
	}
	if repoName == "" || to == "" {
		return lockstep.Errorf(lockstep.EINVALID, "usage: lockstep rollback --repo R --to REV [--branch B] [--expect OID | --expect-current]")
	}
	if expectCurrent {
		if branch == "" {
			r, err := c.Repo(ctx, repoName)
			if err != nil {
				return err
			}
			branch = r.DefaultBranch
		}
		if expect, err = c.Ref(ctx, repoName, branch); err != nil {
			return err
		}
	}
	res, err := c.Rollback(ctx, repoName, to, client.WriteOptions{Branch: branch, ExpectOID: expect, Force: force, Message: message})
	if err != nil {
		return err
	}
	return cf.out(e, res, func() {
		fmt.Fprintf(e.stdout, "rolled back %s@%s to the tree of %s\ncommit %s\ntree   %s\nparent %s\n", repoName, res.Branch, to, res.Commit, res.Tree, res.Parent)
		// The rollback is a commit on the server: a checkout is not touched.
		fmt.Fprintf(e.stderr, "a checkout of %s still has the old files: check out again (rm -rf DIR && lockstep checkout %s DIR)\n", repoName, repoName)
	})
}

func cmdCheckout(ctx context.Context, e *env, args []string) error {
	var quiet bool
	cf, c, rest, err := setup("checkout", e, args, func(f *flagger) {
		f.fs.BoolVar(&quiet, "quiet", false, "no progress output")
	})
	if err != nil {
		return err
	}
	if len(rest) != 2 {
		return lockstep.Errorf(lockstep.EINVALID, "usage: lockstep checkout REPO[@REV] DIR")
	}
	repoName, rev, _ := strings.Cut(rest[0], "@")
	if rev == "" {
		rev = "HEAD"
		r, err := c.Repo(ctx, repoName)
		if err != nil {
			return err
		}
		rev = r.DefaultBranch
	}
	dir := rest[1]
	if ents, err := os.ReadDir(dir); err == nil && len(ents) > 0 {
		return lockstep.Errorf(lockstep.EINVALID, "checkout: %s exists and is not empty", dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	start := time.Now()
	prog := newProgress(e, cf.json || quiet, "downloading")
	commit, files, err := c.Checkout(ctx, repoName, rev, dir, func(w io.Writer) io.Writer { return &progressWriter{w: w, p: prog} })
	prog.end()
	if err != nil {
		return err
	}
	res := map[string]any{"repo": repoName, "commit": commit, "dir": dir, "files": files, "duration_ms": msSince(start)}
	return cf.out(e, res, func() {
		fmt.Fprintf(e.stdout, "checked out %s@%s (%s) into %s: %d files\n", repoName, rev, short(commit), dir, files)
	})
}

func cmdMerge(ctx context.Context, e *env, args []string) error {
	var req client.MergeRequest
	var repoName string
	cf, c, _, err := setup("merge", e, args, func(f *flagger) {
		f.fs.StringVar(&repoName, "repo", "", "repository whose branch receives the merge (required)")
		f.fs.StringVar(&req.Ours, "ours", "", "branch to merge into (default: the default branch)")
		f.fs.StringVar(&req.Theirs, "theirs", "", "oid, branch or repo:branch of the fork network (required)")
		f.fs.BoolVar(&req.Preflight, "preflight", false, "compute only: write nothing")
		f.fs.BoolVar(&req.Deep, "deep", false, "merge line by line inside files both sides changed")
		f.fs.BoolVar(&req.Materialize, "materialize", false, "write the merge and move the branch")
		f.fs.StringVar(&req.Message, "message", "", "merge commit message")
		f.fs.StringVar(&req.OnConflict, "on-conflict", "", `"markers": write a commit with conflict markers to a side ref`)
	})
	if err != nil {
		return err
	}
	if repoName == "" || req.Theirs == "" {
		return lockstep.Errorf(lockstep.EINVALID, "usage: lockstep merge --repo R --theirs REV [--ours B] (--preflight | --materialize) [--deep]")
	}
	res, err := c.MergeBranches(ctx, repoName, req)
	if err != nil {
		return err
	}
	return printMerge(e, cf, res)
}

func cmdSync(ctx context.Context, e *env, args []string) error {
	var expect string
	cf, c, rest, err := setup("sync", e, args, func(f *flagger) {
		f.fs.StringVar(&expect, "expect", "", "the oid the workspace branch must still have")
	})
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return lockstep.Errorf(lockstep.EINVALID, "usage: lockstep sync WORKSPACE [--expect OID]")
	}
	res, err := c.Sync(ctx, rest[0], api.SyncRequest{ExpectOID: expect})
	if err != nil {
		return err
	}
	return printMerge(e, cf, res)
}

// printMerge prints a merge's answer; a merge with conflicts (a preflight
// that found them, markers written to a side ref) ends with exit status 4,
// as a refused materialize does, so scripts can test `lockstep merge
// --preflight` directly.
func printMerge(e *env, cf *clientFlags, m *api.MergeResponse) error {
	if cf.json {
		if err := writeJSON(e.stdout, m); err != nil {
			return err
		}
		return mergeStatus(m)
	}
	state := "clean"
	switch {
	case !m.Clean:
		state = fmt.Sprintf("%d conflicts", len(m.Conflicts))
	case m.UpToDate:
		state = "already up to date"
	case m.FastForward:
		state = "clean (fast-forward)"
	}
	fmt.Fprintf(e.stdout, "merge: %s\nbase   %s\nours   %s\ntheirs %s\ntree   %s\n", state, m.MergeBase, m.Ours, m.Theirs, m.Tree)
	if m.Commit != "" {
		fmt.Fprintf(e.stdout, "commit %s\n", m.Commit)
	}
	if m.SideRef != "" {
		fmt.Fprintf(e.stdout, "markers written to %s\n", m.SideRef)
	}
	for _, cfl := range m.Conflicts {
		fmt.Fprintf(e.stdout, "  %-14s %s\n", cfl.Kind, cfl.Path)
	}
	fmt.Fprintf(e.stdout, "time   %.2f ms\n", m.DurationMS)
	return mergeStatus(m)
}

// mergeStatus is exit status 4 for a merge with conflicts.
func mergeStatus(m *api.MergeResponse) error {
	if !m.Clean {
		return exitError(exitCode(lockstep.Errorf(lockstep.EMERGECONFLICT, "conflicts")))
	}
	return nil
}
