package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/api"
)

// headerList collects repeated --header "Name: value" flags.
type headerList map[string]string

func (h headerList) String() string { return fmt.Sprint(map[string]string(h)) }

func (h headerList) Set(v string) error {
	name, value, ok := strings.Cut(v, ":")
	if !ok || strings.TrimSpace(name) == "" {
		return fmt.Errorf("header %q: want \"Name: value\"", v)
	}
	h[strings.TrimSpace(name)] = strings.TrimSpace(value)
	return nil
}

func cmdEffects(ctx context.Context, e *env, args []string) error {
	const use = "usage: lockstep effects stage WORKSPACE --method M --target URL [--body B] | list REPO | approve REPO ID | reject REPO ID | compensate REPO (ID | --commit OID)"
	if done, err := subcommands(e, "effects", use, args); done {
		return err
	}
	sub := args[0]
	var method, url, body, label, class, runID, compMethod, compURL, compBody, commit, reason string
	var consuming bool
	headers := headerList{}
	cf, c, rest, err := setup("effects "+sub, e, args[1:], func(f *flagger) {
		switch sub {
		case "stage":
			f.fs.StringVar(&method, "method", "POST", "POST, PUT, PATCH or DELETE")
			f.fs.StringVar(&url, "target", "", "the URL to send to (public, or on the server's --effect-allow-hosts)")
			f.fs.StringVar(&body, "body", "", "the request body")
			f.fs.Var(headers, "header", "a header \"Name: value\" (repeatable; Authorization, Cookie and X-Api-Key are stored encrypted)")
			f.fs.StringVar(&label, "label", "", "a note for reviewers")
			f.fs.StringVar(&class, "class", "", "a class a gate policy may hold for review (e.g. payment)")
			f.fs.StringVar(&runID, "run-id", "", "the run that stages it (a failed run discards its effects)")
			f.fs.BoolVar(&consuming, "consuming", false, "it spends something that does not come back (quota, messages to people)")
			f.fs.StringVar(&compMethod, "compensate-method", "", "the compensating request's method (e.g. DELETE)")
			f.fs.StringVar(&compURL, "compensate-target", "", "the compensating request's URL")
			f.fs.StringVar(&compBody, "compensate-body", "", "the compensating request's body")
		case "approve", "reject":
			f.fs.StringVar(&reason, "reason", "", "why (in the operations log)")
		case "compensate":
			f.fs.StringVar(&commit, "commit", "", "run the compensations of every effect this promoted commit of REPO released")
		}
	})
	if err != nil {
		return err
	}
	switch sub {
	case "stage":
		if len(rest) != 1 {
			return lockstep.Errorf(lockstep.EINVALID, "usage: lockstep effects stage WORKSPACE --method M --target URL [--body B] [--header H]...")
		}
		req := api.EffectRequest{Method: method, URL: url, Body: body, Label: label, Class: class, RunID: runID, Consuming: consuming}
		if len(headers) > 0 {
			req.Headers = headers
		}
		if compMethod != "" || compURL != "" {
			req.Compensation = &api.EffectCompensation{Method: compMethod, URL: compURL, Body: compBody}
		}
		ef, err := c.StageEffect(ctx, rest[0], req)
		if err != nil {
			return err
		}
		return cf.out(e, ef, func() {
			fmt.Fprintf(e.stdout, "staged %s (seq %d): %s %s, sent only when %s is promoted\n", ef.ID, ef.Seq, ef.Method, ef.URL, rest[0])
		})
	case "list":
		if len(rest) != 1 {
			return lockstep.Errorf(lockstep.EINVALID, "usage: lockstep effects list REPO")
		}
		all := []api.Effect{}
		var after int64
		for {
			page, next, err := c.Effects(ctx, rest[0], after, 1000)
			if err != nil {
				return err
			}
			all = append(all, page...)
			if next == 0 {
				break
			}
			after = next
		}
		out := api.EffectList{Effects: all}
		return cf.out(e, out, func() {
			rows := [][]string{{"ID", "SEQ", "STATUS", "METHOD", "URL", "CLASS", "CONSUMING", "ATTEMPTS", "LAST", "LABEL"}}
			for _, ef := range all {
				cons := ""
				if ef.Consuming {
					cons = "yes"
				}
				last := ""
				if ef.LastStatusCode != 0 {
					last = fmt.Sprint(ef.LastStatusCode)
				}
				rows = append(rows, []string{ef.ID, fmt.Sprint(ef.Seq), ef.Status, ef.Method, ef.URL, ef.Class, cons, fmt.Sprint(ef.Attempts), last, ef.Label})
			}
			table(e, rows)
		})
	case "approve", "reject":
		if len(rest) != 2 {
			return lockstep.Errorf(lockstep.EINVALID, "usage: lockstep effects %s REPO EFFECT_ID [--reason R]", sub)
		}
		var ef api.Effect
		if sub == "approve" {
			ef, err = c.ApproveEffect(ctx, rest[0], rest[1], reason)
		} else {
			ef, err = c.RejectEffect(ctx, rest[0], rest[1], reason)
		}
		if err != nil {
			return err
		}
		return cf.out(e, ef, func() { fmt.Fprintf(e.stdout, "effect %s is %s\n", ef.ID, ef.Status) })
	case "compensate":
		switch {
		case commit != "" && len(rest) == 1:
			res, err := c.CompensateCommit(ctx, rest[0], commit)
			if err != nil {
				return err
			}
			return cf.out(e, res, func() {
				fmt.Fprintf(e.stdout, "%d compensation(s) queued, newest first (each a new request, not an erasure):\n", len(res.Effects))
				for _, ef := range res.Effects {
					fmt.Fprintf(e.stdout, "  %s: %s %s\n", ef.ID, ef.Compensation.Method, ef.Compensation.URL)
				}
			})
		case commit == "" && len(rest) == 2:
			ef, err := c.CompensateEffect(ctx, rest[0], rest[1])
			if err != nil {
				return err
			}
			return cf.out(e, ef, func() {
				fmt.Fprintf(e.stdout, "compensation of %s queued: a new request, not an erasure of the first\n", ef.ID)
			})
		}
		return lockstep.Errorf(lockstep.EINVALID, "usage: lockstep effects compensate REPO EFFECT_ID | REPO --commit OID")
	}
	return lockstep.Errorf(lockstep.EINVALID, "unknown effects subcommand %q: want stage, list, approve, reject or compensate", sub)
}
