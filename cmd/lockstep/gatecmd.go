package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/api"
	"github.com/lockstep-hq/lockstep/client"
)

// printRaw prints a raw JSON answer, indented like every --json answer,
// its keys sorted.
func printRaw(e *env, raw json.RawMessage) error {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return err
	}
	return writeJSON(e.stdout, v)
}

// printValue prints an answer of the API (an api type, which encodes to
// the bytes the server sent) as printRaw does.
func printValue(e *env, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return printRaw(e, raw)
}

// printAnswer prints an answer of the API as JSON with --json, else as
// "field: value" lines (lists of objects as tables) for people.
func printAnswer(e *env, cf *clientFlags, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if cf.json {
		return printRaw(e, raw)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return printRaw(e, raw)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if list, ok := m[k].([]any); ok && len(list) > 0 {
			if _, isObj := list[0].(map[string]any); isObj {
				fmt.Fprintf(e.stdout, "%s:\n", k)
				objTable(e, list)
				continue
			}
		}
		fmt.Fprintf(e.stdout, "%s: %s\n", strings.ReplaceAll(k, "_", " "), humanValue(m[k]))
	}
	return nil
}

func objTable(e *env, list []any) {
	var cols []string
	seen := map[string]bool{}
	for _, it := range list {
		o, _ := it.(map[string]any)
		for k := range o {
			if !seen[k] {
				seen[k] = true
				cols = append(cols, k)
			}
		}
	}
	sort.Strings(cols)
	head := make([]string, len(cols))
	for i, c := range cols {
		head[i] = strings.ToUpper(c)
	}
	rows := [][]string{head}
	for _, it := range list {
		o, _ := it.(map[string]any)
		r := make([]string, len(cols))
		for i, c := range cols {
			r[i] = humanValue(o[c])
		}
		rows = append(rows, r)
	}
	table(e, rows)
}

func humanValue(v any) string {
	switch x := v.(type) {
	case nil:
		return "-"
	case string:
		if x == "" {
			return "-"
		}
		// A time from the API (RFC 3339, nanoseconds) reads as keys list
		// and oplog print times.
		if len(x) >= 20 && x[4] == '-' && x[10] == 'T' {
			if t, err := time.Parse(time.RFC3339Nano, x); err == nil {
				return t.Format("2006-01-02 15:04:05")
			}
		}
		return x
	case []any:
		if len(x) == 0 {
			return "-"
		}
		parts := make([]string, len(x))
		for i, p := range x {
			parts[i] = humanValue(p)
		}
		return strings.Join(parts, ", ")
	case map[string]any:
		b, _ := json.Marshal(x)
		return string(b)
	}
	return fmt.Sprint(v)
}

func cmdGate(ctx context.Context, e *env, args []string) error {
	const gateUsage = "usage: lockstep gate show REPO | gate set REPO [--require-check N]... [--max-files N] [--max-lines N] [--protect GLOB]... [--allow-conflicts] [--mode M]"
	if done, err := subcommands(e, "gate", gateUsage, args); done {
		return err
	}
	if args[0] != "show" && args[0] != "set" {
		return lockstep.Errorf(lockstep.EINVALID, "unknown gate subcommand %q: %s", args[0], gateUsage)
	}
	sub := args[0]
	var branch, mode string
	var checks, protect multiFlag
	var maxFiles, maxLines int
	var allowConflicts bool
	cf, c, rest, err := setup("gate "+sub, e, args[1:], func(f *flagger) {
		f.fs.StringVar(&branch, "branch", "", "branch (default: the default branch)")
		if sub == "set" {
			f.fs.Var(&checks, "require-check", "a check that must succeed on the exact commit (repeatable)")
			f.fs.Var(&protect, "protect", "a glob of paths agents may not touch (repeatable)")
			f.fs.IntVar(&maxFiles, "max-files", 0, "most changed files (0 = no limit)")
			f.fs.IntVar(&maxLines, "max-lines", 0, "most changed lines (0 = no limit)")
			f.fs.BoolVar(&allowConflicts, "allow-conflicts", false, "do not require a clean merge")
			f.fs.StringVar(&mode, "mode", "merge", "default promote mode: merge, squash or fast_forward")
		}
	})
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return lockstep.Errorf(lockstep.EINVALID, "usage: lockstep gate %s REPO", sub)
	}
	var p *api.Policy
	if sub == "show" {
		p, err = c.Gate(ctx, rest[0], branch)
	} else {
		clean := !allowConflicts
		p, err = c.SetGate(ctx, rest[0], api.Policy{Branch: branch, RequiredChecks: checks,
			MaxChangedFiles: maxFiles, MaxChangedLines: maxLines, ProtectedPaths: protect, RequireCleanMerge: &clean, PromoteMode: mode})
	}
	if err != nil {
		return err
	}
	if !cf.json {
		// For people, a limit of 0 reads as what it means.
		raw, err := json.Marshal(p)
		if err != nil {
			return err
		}
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			return err
		}
		for _, k := range []string{"max_changed_files", "max_changed_lines"} {
			if n, ok := m[k].(float64); ok && n == 0 {
				m[k] = "no limit"
			}
		}
		return printAnswer(e, cf, m)
	}
	return printAnswer(e, cf, p)
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func cmdChecks(ctx context.Context, e *env, args []string) error {
	var name, status, summary, detailsURL, wait string
	var waitFor time.Duration
	cf, c, rest, err := setup("checks", e, args, func(f *flagger) {
		f.fs.StringVar(&wait, "wait", "", "wait until this check has a final result (success, failure or error)")
		f.fs.DurationVar(&waitFor, "timeout", 10*time.Minute, "with --wait: give up after this long")
		f.fs.StringVar(&name, "post", "", "post a result with this check name (role ci or admin)")
		f.fs.StringVar(&status, "status", "", "pending, success, failure or error (with --post)")
		f.fs.StringVar(&summary, "summary", "", "summary (with --post)")
		f.fs.StringVar(&detailsURL, "details-url", "", "link to details (with --post)")
	})
	if err != nil {
		return err
	}
	if len(rest) != 2 {
		return lockstep.Errorf(lockstep.EINVALID, "usage: lockstep checks REPO COMMIT [--post NAME --status S]")
	}
	if name != "" {
		ch, err := c.PostCheck(ctx, rest[0], rest[1], api.CheckRequest{Name: name, Status: status, Summary: summary, DetailsURL: detailsURL})
		if err != nil {
			return err
		}
		return printValue(e, ch)
	}
	var set *api.CheckSet
	if wait != "" {
		set, err = waitCheck(ctx, c, rest[0], rest[1], wait, waitFor)
	} else {
		set, err = c.Checks(ctx, rest[0], rest[1])
	}
	if err != nil {
		return err
	}
	if cf.json {
		return printValue(e, set)
	}
	rows := [][]string{{"NAME", "STATUS", "BY", "AT", "SUMMARY"}}
	for _, ch := range set.Latest {
		rows = append(rows, []string{ch.Name, ch.Status, ch.KeyName, ch.CreatedAt.Format("15:04:05"), firstLine(ch.Summary)})
	}
	table(e, rows)
	return nil
}

// waitCheck polls a commit's checks until the named one has a final
// result, or the timeout passes (a precondition error).
func waitCheck(ctx context.Context, c *client.Client, repo, commit, name string, timeout time.Duration) (*api.CheckSet, error) {
	deadline := time.Now().Add(timeout)
	for {
		set, err := c.Checks(ctx, repo, commit)
		if err != nil {
			return nil, err
		}
		for _, ch := range set.Latest {
			if ch.Name == name && ch.Status != lockstep.CheckPending {
				return set, nil
			}
		}
		if time.Now().After(deadline) {
			return nil, lockstep.Errorf(lockstep.EPRECONDITION, "check %q has no result after %s: is a runner watching this repository?", name, timeout)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

func cmdPromote(ctx context.Context, e *env, args []string) error {
	var commit, message, mode string
	cf, c, rest, err := setup("promote", e, args, func(f *flagger) {
		f.fs.StringVar(&commit, "commit", "", "the exact commit to promote (default: the workspace tip)")
		f.fs.StringVar(&message, "message", "", "merge commit message")
		f.fs.StringVar(&mode, "mode", "", "merge, squash or fast_forward (default: the gate's promote_mode)")
	})
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return lockstep.Errorf(lockstep.EINVALID, "usage: lockstep promote WORKSPACE [--commit OID] [--mode M]")
	}
	res, err := c.Promote(ctx, rest[0], api.PromoteRequest{Commit: commit, Message: message, Mode: mode})
	if err != nil {
		if !cf.json {
			if d := lockstep.ErrorDetails(err); d != nil {
				if reasons, ok := d["reasons"].([]any); ok && len(reasons) > 0 {
					fmt.Fprintln(e.stderr, "lockstep: gate refused the promote:")
					for _, r := range reasons {
						if m, ok := r.(map[string]any); ok {
							fmt.Fprintf(e.stderr, "  - [%v] %v\n", m["rule"], m["message"])
						}
					}
					// The error's message repeats the reasons (a failing
					// check's output): they were just printed, once.
					return exitError(exitCode(err))
				}
			}
		}
		return err
	}
	if cf.json {
		return printValue(e, res)
	}
	how := "merge commit"
	commitOID := ""
	if res.MergeResponse != nil {
		commitOID = res.Commit
	}
	if res.MergeResponse != nil && res.FastForward {
		how = "fast-forward"
	}
	fmt.Fprintf(e.stdout, "promoted %s into %s (%s) → %s\n", rest[0], res.Into, how, commitOID)
	return nil
}

const hooksUsage = "usage: lockstep hooks list REPO | create REPO --hook-url U --secret S [--event E]... | rotate REPO HOOK_ID [--secret S] [--overlap 24h] | deliveries REPO HOOK_ID | delete REPO HOOK_ID"

func cmdHooks(ctx context.Context, e *env, args []string) error {
	if done, err := subcommands(e, "hooks", hooksUsage, args); done {
		return err
	}
	sub := args[0]
	var hookURL, secret string
	var events multiFlag
	var overlap time.Duration
	cf, c, rest, err := setup("hooks "+sub, e, args[1:], func(f *flagger) {
		if sub == "create" {
			f.fs.StringVar(&hookURL, "hook-url", "", "receiver URL (http or https); not --url, which is the server's")
			f.fs.StringVar(&secret, "secret", "", "HMAC-SHA256 signing secret (>= 16 characters)")
			f.fs.Var(&events, "event", "push, promote, rollback, checkpoint or * (repeatable; default all)")
		}
		if sub == "rotate" {
			f.fs.StringVar(&secret, "secret", "", "the new secret (default: the server makes a random whsec_ secret and prints it once)")
			f.fs.DurationVar(&overlap, "overlap", 24*time.Hour, "how long the old secret keeps signing too (a second signature); 0 = none")
		}
	})
	if err != nil {
		return err
	}
	var answer any
	switch {
	case sub == "list" && len(rest) == 1:
		var hs []api.Hook
		hs, err = c.Hooks(ctx, rest[0])
		answer = api.HookList{Hooks: hs}
	case sub == "create" && len(rest) == 1:
		answer, err = c.CreateHook(ctx, rest[0], hookURL, secret, []string(events))
	case sub == "deliveries" && len(rest) == 2:
		var ds []api.Delivery
		ds, err = c.HookDeliveries(ctx, rest[0], rest[1], 0)
		answer = api.DeliveryList{Deliveries: ds}
	case sub == "rotate" && len(rest) == 2:
		if overlap < 0 {
			return lockstep.Errorf(lockstep.EINVALID, "--overlap must be >= 0")
		}
		answer, err = c.RotateHook(ctx, rest[0], rest[1], secret, overlap)
	case sub == "delete" && len(rest) == 2:
		err = c.DeleteHook(ctx, rest[0], rest[1])
		if err == nil {
			return cf.out(e, map[string]any{"deleted": rest[1]}, func() { fmt.Fprintf(e.stdout, "hook %s deleted\n", rest[1]) })
		}
		return err
	default:
		return lockstep.Errorf(lockstep.EINVALID, hooksUsage)
	}
	if err != nil {
		return err
	}
	return printAnswer(e, cf, answer)
}
