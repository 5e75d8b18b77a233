package main

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/api"
	"github.com/lockstep-hq/lockstep/client"
	"github.com/lockstep-hq/lockstep/egress"
	"github.com/lockstep-hq/lockstep/fssnap/txrun"
)

// egressFlags are `lockstep run`'s egress-proxy flags.
type egressFlags struct {
	mode, allow string
	intercept   bool
	maxBody     int64
}

func (g *egressFlags) declare(f *flagger) {
	f.str(&g.mode, "egress", "LOCKSTEP_EGRESS", "", "egress proxy for the command: stage (reads pass, writes staged as effects), deny (stage, and refuse every host not in --egress-allow) or off (default: stage with --workspace, off with --no-server)")
	f.str(&g.allow, "egress-allow", "LOCKSTEP_EGRESS_ALLOW", "", "hosts the command may reach through the proxy (comma-separated; .example.com for a domain); empty: all under stage, none under deny")
	f.bool(&g.intercept, "egress-intercept", "LOCKSTEP_EGRESS_INTERCEPT", true, "intercept HTTPS with a CA made for the run (and trusted through SSL_CERT_FILE & co.) so HTTPS writes are staged too; false: HTTPS is an unmediated tunnel to allowed hosts")
	f.i64(&g.maxBody, "egress-max-body", "LOCKSTEP_EGRESS_MAX_BODY", egress.DefaultMaxBodyBytes, "largest request body the proxy stages (413 beyond); keep it at the server's --effect-max-body-bytes")
}

// runEgress is the egress proxy of one run.
type runEgress struct {
	px    *egress.Proxy
	c     *client.Client
	ws    string
	runID string
}

type clientStager struct {
	c  *client.Client
	ws string
}

func (s clientStager) Stage(ctx context.Context, req api.EffectRequest) (api.Effect, error) {
	return s.c.StageEffect(ctx, s.ws, req)
}

// start starts the proxy unless the mode is off (nil then) and returns
// the command's environment with the proxy's variables.
func (g *egressFlags) start(c *client.Client, cf *clientFlags, ws string, noServer bool, env []string) (*runEgress, []string, error) {
	mode := g.mode
	if mode == "" {
		mode = egress.ModeStage
		if noServer {
			mode = egress.ModeOff
		}
	}
	switch {
	case mode == egress.ModeOff:
		return nil, env, nil
	case mode != egress.ModeStage && mode != egress.ModeDeny:
		return nil, nil, lockstep.Errorf(lockstep.EINVALID, "--egress %q: want stage, deny or off", mode)
	case noServer:
		return nil, nil, lockstep.Errorf(lockstep.EINVALID, "--egress %s stages writes on the workspace: it needs the server (drop --no-server, or --egress off)", mode)
	}
	runID := lockstep.NewID("run_")
	var noProxy, bypass []string
	// The Lockstep server stays unproxied: NO_PROXY names its host:port
	// (not the bare host, which would also exempt every other service on
	// it, e.g. all of loopback), and a client that does not understand a
	// port there reaches it through the proxy, forwarded as it is.
	if u, err := url.Parse(cf.url); err == nil && u.Host != "" {
		port := u.Port()
		if port == "" {
			port = map[string]string{"https": "443"}[u.Scheme]
			if port == "" {
				port = "80"
			}
		}
		hp := net.JoinHostPort(u.Hostname(), port)
		noProxy, bypass = append(noProxy, hp), append(bypass, hp)
	}
	var allow []string
	for _, h := range strings.Split(g.allow, ",") {
		if h = strings.TrimSpace(h); h != "" {
			allow = append(allow, h)
		}
	}
	px, err := egress.Start(egress.Config{Mode: mode, Allow: allow, Bypass: bypass, Intercept: g.intercept, MaxBodyBytes: g.maxBody,
		Stager: clientStager{c: c, ws: ws}, RunID: runID})
	if err != nil {
		return nil, nil, err
	}
	return &runEgress{px: px, c: c, ws: ws, runID: runID}, egress.MergeEnv(env, append(px.Env(noProxy), "LOCKSTEP_RUN_ID="+runID)), nil
}

// finish stops the proxy and, when the run failed (or never ran),
// discards what it staged: a successful run's effects stay staged for the
// promote to release.
func (r *runEgress) finish(ctx context.Context, e *env, rep *txrun.Report, runErr error) {
	if r == nil {
		return
	}
	r.px.Close()
	if runErr == nil && rep != nil && rep.Succeeded {
		if n := len(r.px.Staged()); n > 0 {
			fmt.Fprintf(e.stderr, "lockstep run: %d effect(s) staged by run %s, released when %s is promoted\n", n, r.runID, r.ws)
		}
		return
	}
	res, err := r.c.DiscardEffects(context.WithoutCancel(ctx), r.ws, api.EffectDiscard{RunID: r.runID, Reason: "run failed"})
	if err != nil {
		fmt.Fprintf(e.stderr, "lockstep run: could not discard the effects of run %s: %v (POST /repos/%s/effects/discard {\"run_id\": %q})\n", r.runID, err, r.ws, r.runID)
		return
	}
	if len(res.Discarded) > 0 {
		fmt.Fprintf(e.stderr, "lockstep run: discarded %d effect(s) staged by the failed run %s\n", len(res.Discarded), r.runID)
	}
}
