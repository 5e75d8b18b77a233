package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/api"
	"github.com/lockstep-hq/lockstep/client"
)

// clientFlags are shared by every client command.
type clientFlags struct {
	url, key, keyFile string
	json              bool
	retries           int
	retryDelay        time.Duration
	attemptTimeout    time.Duration
	e                 *env
}

func (c *clientFlags) declare(f *flagger) {
	f.client = true
	f.str(&c.url, "url", "LOCKSTEP_URL", "http://127.0.0.1:7070", "server URL")
	f.secret(&c.key, "key", "LOCKSTEP_KEY", "API key")
	f.str(&c.keyFile, "key-file", "LOCKSTEP_KEY_FILE", "", "file holding the API key (e.g. lockstep-data/admin.key)")
	f.fs.BoolVar(&c.json, "json", false, "print JSON (for agents and scripts)")
	f.int(&c.retries, "retries", "LOCKSTEP_RETRIES", client.DefaultRetry.MaxAttempts, "attempts per request on connection errors, timeouts, 429, 502-504 (writes carry an Idempotency-Key, so a retry never runs twice); 1 = no retries")
	f.dur(&c.retryDelay, "retry-delay", "LOCKSTEP_RETRY_DELAY", client.DefaultRetry.BaseDelay, "first retry's backoff (doubles up to 5s, jittered; a server's Retry-After is honoured)")
	f.dur(&c.attemptTimeout, "attempt-timeout", "LOCKSTEP_ATTEMPT_TIMEOUT", 0, "bound on one attempt, answer included (0 = none); a timed-out attempt is retried")
}

func (c *clientFlags) client() (*client.Client, error) {
	if err := checkServerURL(c.url); err != nil {
		return nil, err
	}
	key := c.key
	if key == "" && c.keyFile != "" {
		b, err := os.ReadFile(c.keyFile)
		if err != nil {
			return nil, fmt.Errorf("read key file: %w", err)
		}
		key = strings.TrimSpace(string(b))
	}
	if key == "" {
		return nil, lockstep.Errorf(lockstep.EUNAUTH, "no API key: set LOCKSTEP_KEY (or --key, --key-file)")
	}
	cl := client.New(c.url, key)
	cl.Retry = client.RetryPolicy{MaxAttempts: c.retries, BaseDelay: c.retryDelay, AttemptTimeout: c.attemptTimeout}
	if e := c.e; e != nil && !c.json {
		// One friendly line while retrying, not one raw dialer error per
		// attempt; the final error (if every attempt fails) follows.
		var said atomic.Bool
		cl.OnRetry = func(method, path string, attempt int, delay time.Duration, reason error) {
			if said.Swap(true) {
				return
			}
			fmt.Fprintf(e.stderr, "lockstep: %s; retrying (up to %d attempts)…\n", retryReason(c.url, reason), max(c.retries, 1))
		}
	}
	return cl, nil
}

// checkServerURL refuses a server URL no request can use (e.g.
// 127.0.0.1:7070 without http://) before any request is tried: it is bad
// input, not a server that does not answer.
func checkServerURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return lockstep.Errorf(lockstep.EINVALID, "server URL %q (LOCKSTEP_URL or --url): want http://host:port or https://host", s)
	}
	return nil
}

// out prints v as JSON with --json, else calls human.
func (c *clientFlags) out(e *env, v any, human func()) error {
	if c.json {
		return writeJSON(e.stdout, v)
	}
	human()
	return nil
}

// writeJSON prints v indented by two spaces: every --json answer looks
// the same.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func table(e *env, rows [][]string) {
	w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	for _, r := range rows {
		fmt.Fprintln(w, strings.Join(r, "\t"))
	}
	w.Flush()
}

func short(oid string) string {
	if len(oid) > 12 {
		return oid[:12]
	}
	return oid
}

// setup parses flags for a client command and returns the client.
func setup(name string, e *env, args []string, declare func(f *flagger)) (*clientFlags, *client.Client, []string, error) {
	var cf clientFlags
	f := newFlagger(name, e)
	cf.declare(f)
	if declare != nil {
		declare(f)
	}
	if err := f.parse(args); err != nil {
		return nil, nil, nil, err
	}
	cf.e = e
	c, err := cf.client()
	return &cf, c, f.pos, err
}

func cmdKeys(ctx context.Context, e *env, args []string) error {
	if done, err := subcommands(e, "keys", "usage: lockstep keys create --name N --role R | list | revoke KEY_ID | quota KEY_ID [--workspaces N] [--storage-bytes N] [--runs N]", args); done {
		return err
	}
	switch args[0] {
	case "create":
		var name, role, ws, base, task string
		var quiet bool
		var ttl time.Duration
		cf, c, _, err := setup("keys create", e, args[1:], func(f *flagger) {
			f.fs.BoolVar(&quiet, "quiet", false, "print only the secret (for KEY=$(lockstep keys create ... --quiet))")
			f.fs.StringVar(&name, "name", "", "key name (shown as the author of its operations)")
			f.fs.StringVar(&role, "role", "agent", "admin, agent, reviewer, ci or runner")
			f.fs.DurationVar(&ttl, "ttl", 0, "the key expires after this long (e.g. 1h; agents: at most 24h)")
			f.fs.StringVar(&ws, "workspace", "", "scope: the key acts only on this workspace")
			f.fs.StringVar(&base, "base", "", "scope (with --task): the key acts only on this base's workspaces of --task")
			f.fs.StringVar(&task, "task", "", "scope (with --base): the task label")
		})
		if err != nil {
			return err
		}
		var scope *api.KeyScope
		if ws != "" || base != "" || task != "" {
			scope = &api.KeyScope{Workspace: ws, Base: base, Task: task}
		}
		k, err := c.MintKey(ctx, name, role, ttl, scope)
		if err != nil {
			return err
		}
		return cf.out(e, k, func() {
			if quiet {
				fmt.Fprintln(e.stdout, k.Secret)
				return
			}
			fmt.Fprintf(e.stdout, "created key %s (%s, role %s)\nsecret (shown once): %s\n", k.ID, k.Name, k.Role, k.Secret)
		})
	case "list":
		cf, c, _, err := setup("keys list", e, args[1:], nil)
		if err != nil {
			return err
		}
		keys, err := c.Keys(ctx)
		if err != nil {
			return err
		}
		return cf.out(e, map[string]any{"keys": keys}, func() {
			rows := [][]string{{"ID", "NAME", "ROLE", "PREFIX", "CREATED", "LAST USED", "REVOKED"}}
			for _, k := range keys {
				used, revoked := "-", "-"
				if k.LastUsedAt != nil {
					used = k.LastUsedAt.Format("2006-01-02 15:04")
				}
				if k.RevokedAt != nil {
					revoked = k.RevokedAt.Format("2006-01-02 15:04")
				}
				rows = append(rows, []string{k.ID, k.Name, k.Role, k.Prefix, k.CreatedAt.Format("2006-01-02 15:04"), used, revoked})
			}
			table(e, rows)
		})
	case "revoke":
		cf, c, rest, err := setup("keys revoke", e, args[1:], nil)
		if err != nil {
			return err
		}
		if len(rest) != 1 {
			return lockstep.Errorf(lockstep.EINVALID, "usage: lockstep keys revoke KEY_ID")
		}
		if err := c.RevokeKey(ctx, rest[0]); err != nil {
			return err
		}
		return cf.out(e, map[string]any{"revoked": rest[0]}, func() { fmt.Fprintf(e.stdout, "revoked %s\n", rest[0]) })
	case "quota":
		return cmdKeysQuota(ctx, e, args[1:])
	}
	return lockstep.Errorf(lockstep.EINVALID, "unknown keys subcommand %q: want create, list, revoke or quota", args[0])
}

// cmdKeysQuota sets a key's quota overrides (admin). A flag not given
// keeps the key's current override, "default" clears it (the server-wide
// setting applies), 0 is unlimited.
func cmdKeysQuota(ctx context.Context, e *env, args []string) error {
	var ws, bytes, runs string
	cf, c, rest, err := setup("keys quota", e, args, func(f *flagger) {
		f.fs.StringVar(&ws, "workspaces", "", "active workspaces the key may own (0: unlimited; default: the server's --quota-workspaces)")
		f.fs.StringVar(&bytes, "storage-bytes", "", "bytes the key's active workspaces may add (0: unlimited; default: the server's --quota-storage-bytes)")
		f.fs.StringVar(&runs, "runs", "", "run jobs the key may have queued or running (0: unlimited; default: the server's --quota-runs)")
	})
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return lockstep.Errorf(lockstep.EINVALID, "usage: lockstep keys quota KEY_ID [--workspaces N|default] [--storage-bytes N|default] [--runs N|default]")
	}
	if ws == "" && bytes == "" && runs == "" {
		return lockstep.Errorf(lockstep.EINVALID, "keys quota: give at least one of --workspaces, --storage-bytes, --runs (a number, 0 for unlimited, or default)")
	}
	keys, err := c.Keys(ctx)
	if err != nil {
		return err
	}
	var cur *client.Key
	for _, k := range keys {
		if k.ID == rest[0] {
			cur = k
		}
	}
	if cur == nil {
		return lockstep.Errorf(lockstep.ENOTFOUND, "key %s not found (lockstep keys list)", rest[0])
	}
	req := api.KeyQuotaRequest{Workspaces: cur.QuotaWorkspaces, StorageBytes: cur.QuotaStorageBytes, Runs: cur.QuotaRuns}
	parse := func(flag, v string) (*int64, bool, error) {
		switch v {
		case "":
			return nil, false, nil
		case "default":
			return nil, true, nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return nil, false, lockstep.Errorf(lockstep.EINVALID, "--%s %q: want 0 (unlimited) or more, or default", flag, v)
		}
		return &n, true, nil
	}
	asInt := func(p *int64) *int {
		if p == nil {
			return nil
		}
		n := int(*p)
		return &n
	}
	if p, set, err := parse("workspaces", ws); err != nil {
		return err
	} else if set {
		req.Workspaces = asInt(p)
	}
	if p, set, err := parse("storage-bytes", bytes); err != nil {
		return err
	} else if set {
		req.StorageBytes = p
	}
	if p, set, err := parse("runs", runs); err != nil {
		return err
	} else if set {
		req.Runs = asInt(p)
	}
	if err := c.SetKeyQuota(ctx, rest[0], req); err != nil {
		return err
	}
	return cf.out(e, map[string]any{"key_id": rest[0], "workspaces": req.Workspaces, "storage_bytes": req.StorageBytes, "runs": req.Runs}, func() {
		show := func(name string, p *int64) string {
			switch {
			case p == nil:
				return name + " the server's"
			case *p == 0:
				return name + " unlimited"
			}
			return fmt.Sprintf("%s %d", name, *p)
		}
		i64 := func(p *int) *int64 {
			if p == nil {
				return nil
			}
			n := int64(*p)
			return &n
		}
		fmt.Fprintf(e.stdout, "quota of %s: %s, %s, %s\n", rest[0], show("workspaces", i64(req.Workspaces)), show("storage bytes", req.StorageBytes), show("runs", i64(req.Runs)))
	})
}

func cmdOplog(ctx context.Context, e *env, args []string) error {
	verify := len(args) > 0 && args[0] == "verify"
	if verify {
		args = args[1:]
	}
	var f api.OplogQuery
	var after int64
	var oldest bool
	cf, c, _, err := setup("oplog", e, args, func(fl *flagger) {
		fl.fs.BoolVar(&oldest, "oldest-first", false, "list oldest first (default: newest first)")
		fl.fs.StringVar(&f.Repo, "repo", "", "only this repository")
		fl.fs.StringVar(&f.KeyID, "key-id", "", "only this key")
		fl.fs.Int64Var(&after, "after", 0, "paging: entries past this sequence number (older ones newest first, newer ones with --oldest-first)")
		fl.fs.IntVar(&f.Limit, "limit", 100, "at most this many entries")
	})
	if err != nil {
		return err
	}
	if verify {
		res, err := c.VerifyOplog(ctx)
		if err != nil {
			return err
		}
		err = cf.out(e, res, func() {
			if res.OK {
				fmt.Fprintf(e.stdout, "ok: %d entries, chain intact\n", res.Entries)
			} else {
				fmt.Fprintf(e.stdout, "BROKEN at entry %d of %d: %s\n", *res.FirstBad, res.Entries, res.Reason)
			}
		})
		if err == nil && !res.OK {
			return exitError(1)
		}
		return err
	}
	f.After, f.Newest = after, !oldest
	page, err := c.Oplog(ctx, f)
	if err != nil {
		return err
	}
	return cf.out(e, page, func() {
		rows := [][]string{{"SEQ", "TIME", "KEY", "OP", "RESULT", "REPO", "REFS"}}
		for _, en := range page.Entries {
			var refs []string
			for _, r := range en.Refs {
				refs = append(refs, fmt.Sprintf("%s %s→%s", strings.TrimPrefix(r.Ref, "refs/heads/"), short(r.Old), short(r.New)))
			}
			rows = append(rows, []string{fmt.Sprint(en.Seq), en.Time.Format("2006-01-02 15:04:05"), en.KeyName, en.Op, en.Result, en.Repo, strings.Join(refs, ", ")})
		}
		table(e, rows)
	})
}

func cmdRepo(ctx context.Context, e *env, args []string) error {
	if done, err := subcommands(e, "repo", "usage: lockstep repo create NAME [--default-branch B] | list | show NAME | retention REPO [--abandon-after AGE] [--delete-after AGE] [--archive-failed]", args); done {
		return err
	}
	switch args[0] {
	case "create":
		var branch string
		cf, c, rest, err := setup("repo create", e, args[1:], func(f *flagger) {
			f.fs.StringVar(&branch, "default-branch", "main", "default branch")
		})
		if err != nil {
			return err
		}
		if len(rest) != 1 {
			return lockstep.Errorf(lockstep.EINVALID, "usage: lockstep repo create NAME")
		}
		r, err := c.CreateRepo(ctx, rest[0], branch)
		if err != nil {
			return err
		}
		return cf.out(e, viewRepo(&r.Repo, r.Head), func() { fmt.Fprintf(e.stdout, "created repository %s (default branch %s)\n", r.Name, r.DefaultBranch) })
	case "list":
		cf, c, _, err := setup("repo list", e, args[1:], nil)
		if err != nil {
			return err
		}
		repos, err := c.Repos(ctx)
		if err != nil {
			return err
		}
		views := make([]repoView, len(repos))
		for i, r := range repos {
			views[i] = viewRepo(r, "")
		}
		if repos == nil {
			views = nil
		}
		return cf.out(e, map[string]any{"repos": views}, func() {
			rows := [][]string{{"NAME", "FORK OF", "STATUS", "OWNER", "DEFAULT"}}
			for _, r := range repos {
				rows = append(rows, []string{r.Name, r.ForkOf, r.Status, r.Owner, r.DefaultBranch})
			}
			table(e, rows)
		})
	case "show":
		cf, c, rest, err := setup("repo show", e, args[1:], nil)
		if err != nil {
			return err
		}
		if len(rest) != 1 {
			return lockstep.Errorf(lockstep.EINVALID, "usage: lockstep repo show NAME")
		}
		r, err := c.Repo(ctx, rest[0])
		if err != nil {
			return err
		}
		return cf.out(e, viewRepo(&r.Repo, r.Head), func() {
			fmt.Fprintf(e.stdout, "name:     %s\nfork of:  %s\nstatus:   %s\nbranch:   %s\nhead:     %s\n", r.Name, r.ForkOf, r.Status, r.DefaultBranch, r.Head)
		})
	case "retention":
		return cmdRepoRetention(ctx, e, args[1:]) // retentioncmd.go
	}
	return lockstep.Errorf(lockstep.EINVALID, "unknown repo subcommand %q", args[0])
}

func cmdRefs(ctx context.Context, e *env, args []string) error {
	cf, c, rest, err := setup("refs", e, args, nil)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return lockstep.Errorf(lockstep.EINVALID, "usage: lockstep refs REPO")
	}
	refs, err := c.Refs(ctx, rest[0])
	if err != nil {
		return err
	}
	var views []refView
	if refs != nil {
		views = make([]refView, len(refs))
	}
	for i, r := range refs {
		views[i] = refView{Name: r.Name, OID: r.OID}
	}
	return cf.out(e, map[string]any{"refs": views}, func() {
		for _, r := range refs {
			fmt.Fprintf(e.stdout, "%s %s\n", r.OID, r.Name)
		}
	})
}

func cmdLog(ctx context.Context, e *env, args []string) error {
	var ref, after string
	var limit int
	cf, c, rest, err := setup("log", e, args, func(f *flagger) {
		f.fs.StringVar(&ref, "ref", "", "branch, oid or repo:branch (default: the default branch)")
		f.fs.IntVar(&limit, "limit", 20, "at most this many commits")
		f.fs.StringVar(&after, "after", "", "continue after this commit (paging)")
	})
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return lockstep.Errorf(lockstep.EINVALID, "usage: lockstep log REPO [--ref B] [--limit N]")
	}
	commits, next, err := c.Log(ctx, rest[0], ref, limit, after)
	if err != nil {
		return err
	}
	var views []commitView
	if commits != nil {
		views = make([]commitView, len(commits))
	}
	for i, cm := range commits {
		views[i] = viewCommit(cm)
	}
	return cf.out(e, map[string]any{"commits": views, "next_after": next}, func() {
		for _, cm := range commits {
			fmt.Fprintf(e.stdout, "%s %s %-12s %s\n", short(cm.Commit), cm.Time, cm.Author.Name, firstLine(cm.Message))
		}
	})
}

func cmdFork(ctx context.Context, e *env, args []string) error {
	var task string
	cf, c, rest, err := setup("fork", e, args, func(f *flagger) {
		f.fs.StringVar(&task, "task", "", "task label grouping attempts at one task (e.g. task-45)")
	})
	if err != nil {
		return err
	}
	if len(rest) != 2 {
		return lockstep.Errorf(lockstep.EINVALID, "usage: lockstep fork [--task T] BASE NAME")
	}
	res, err := c.ForkTask(ctx, rest[0], rest[1], task)
	if err != nil {
		return err
	}
	view := forkView{Name: res.Name, ForkOf: res.ForkOf, BaseCommit: res.BaseCommit, Owner: res.Owner, Task: res.Task, DurationMS: res.DurationMS}
	return cf.out(e, view, func() {
		fmt.Fprintf(e.stdout, "workspace %s forked from %s at %s (%.2f ms)\n", res.Name, res.ForkOf, short(res.BaseCommit), res.DurationMS)
	})
}

func cmdWorkspaces(ctx context.Context, e *env, args []string) error {
	var task string
	cf, c, rest, err := setup("workspaces", e, args, func(f *flagger) {
		f.fs.StringVar(&task, "task", "", "only the workspaces with this task label")
	})
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return lockstep.Errorf(lockstep.EINVALID, "usage: lockstep workspaces [--task T] BASE")
	}
	ws, err := c.TaskWorkspaces(ctx, rest[0], task)
	if err != nil {
		return err
	}
	views := make([]workspaceView, len(ws))
	for i, w := range ws {
		views[i] = workspaceView{Name: w.Name, Owner: w.Owner, Status: w.Status, Task: w.Task, Tip: w.Tip, BaseCommit: w.BaseCommit, Ahead: w.Ahead, Behind: w.Behind}
	}
	return cf.out(e, map[string]any{"workspaces": views}, func() {
		rows := [][]string{{"NAME", "OWNER", "STATUS", "TASK", "TIP", "AHEAD", "BEHIND"}}
		for _, w := range ws {
			rows = append(rows, []string{w.Name, w.Owner, w.Status, w.Task, short(w.Tip), fmt.Sprint(w.Ahead), fmt.Sprint(w.Behind)})
		}
		table(e, rows)
	})
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

func cmdWhoami(ctx context.Context, e *env, args []string) error {
	cf, c, _, err := setup("whoami", e, args, nil)
	if err != nil {
		return err
	}
	k, err := c.Whoami(ctx)
	if err != nil {
		return err
	}
	return cf.out(e, k, func() {
		fmt.Fprintf(e.stdout, "key %s (%s), role %s, server %s\n", k.ID, k.Name, k.Role, cf.url)
		if k.ExpiresAt != nil {
			fmt.Fprintf(e.stdout, "expires %s\n", k.ExpiresAt.Format(time.RFC3339))
		}
		if k.ParentKeyID != "" {
			fmt.Fprintf(e.stdout, "minted by %s\n", k.ParentKeyID)
		}
		if sc := k.Scope; sc != nil {
			if sc.Workspace != "" {
				fmt.Fprintf(e.stdout, "scope: workspace %s\n", sc.Workspace)
			} else {
				fmt.Fprintf(e.stdout, "scope: task %s of %s\n", sc.Task, sc.Base)
			}
		}
		if l := k.Limits; l != nil {
			lim := func(n int) string {
				if n <= 0 {
					return "unlimited"
				}
				return fmt.Sprint(n)
			}
			// from says where a limit comes from (the key's own override
			// or the server-wide setting).
			from := func(src string) string {
				switch src {
				case "key":
					return " (this key's own quota)"
				case "server":
					return " (server-wide)"
				case "admin":
					return " (admin keys are not bound)"
				}
				return ""
			}
			rps := "off"
			if l.RateLimitRPS > 0 {
				rps = fmt.Sprintf("%g/s", l.RateLimitRPS)
			}
			fmt.Fprintf(e.stdout, "workspaces: %d active of %s; uploads: %d in progress of %s; request rate: %s\n",
				l.WorkspacesActive, lim(l.Workspaces)+from(l.WorkspacesSource), l.UploadsActive, lim(l.Uploads), rps)
			storage := "unlimited"
			if l.StorageBytes > 0 {
				storage = fmt.Sprint(l.StorageBytes)
			}
			storage += from(l.StorageBytesSource)
			runs := fmt.Sprint(l.RunsActive)
			if l.RunsActive < 0 {
				runs = "none (run jobs not configured)"
			}
			fmt.Fprintf(e.stdout, "storage: %d bytes written by active workspaces of %s; runs: %s queued or running of %s\n",
				l.StorageBytesUsed, storage, runs, lim(l.Runs)+from(l.RunsSource))
		}
	})
}

// retryReason says in words why a request is retried: the server does not
// answer, or answered busy / timed out.
func retryReason(server string, err error) string {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "the server at " + server + " refuses connections (is `lockstep serve` running?)"
	case errors.Is(err, context.DeadlineExceeded) || os.IsTimeout(err):
		return "the server at " + server + " did not answer in time"
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return "unknown host " + dns.Name
	}
	if code := lockstep.ErrorCode(err); code != lockstep.EINTERNAL {
		return "the server at " + server + " is busy (" + code + ")"
	}
	return "the server at " + server + " did not answer"
}
