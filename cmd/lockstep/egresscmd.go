package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/api"
	"github.com/lockstep-hq/lockstep/client"
	"github.com/lockstep-hq/lockstep/fssnap/txrun"
	"github.com/lockstep-hq/lockstep/internal/procenv"
)

// The egress proxy of `lockstep run` runs in a child process, the small
// lockstep-egress build (package egress/egressproc), or the server build's
// `lockstep-server __egress` (same code): the client build does not link
// the proxy (github.com/elazarl/goproxy's initialiser cost every client
// command about a millisecond, issue #26). docs/architecture.md, "Three
// builds".

// egressBinaryName is the egress build's file name, next to lockstep.
const egressBinaryName = "lockstep-egress"

// Egress modes (egress.ModeStage & co.; not imported: the client build
// does not link package egress).
const (
	egressModeStage = "stage"
	egressModeDeny  = "deny"
	egressModeOff   = "off"
	// egressDefaultMaxBody is egress.DefaultMaxBodyBytes.
	egressDefaultMaxBody = 1 << 20
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
	f.i64(&g.maxBody, "egress-max-body", "LOCKSTEP_EGRESS_MAX_BODY", egressDefaultMaxBody, "largest request body the proxy stages (413 beyond); keep it at the server's --effect-max-body-bytes")
}

// runEgress is the egress proxy of one run: a child process started
// before the run's snapshot, whose first line (the proxy's environment)
// is awaited only when the command is about to start (wait).
type runEgress struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan egressLine
	ready *egressLine
	c     *client.Client
	ws    string
	runID string
}

// egressLine is one line of the child's standard output: the first has
// the proxy's URL and environment (egressproc.Ready), the last the
// effects staged (egressproc.Done); err is a line that could not be read.
type egressLine struct {
	URL    string   `json:"url"`
	Env    []string `json:"env"`
	Staged []string `json:"staged"`
	err    error
}

// start starts the proxy's process unless the mode is off (nil then); the
// command's environment is then wait's.
func (g *egressFlags) start(e *env, c *client.Client, cf *clientFlags, ws string, noServer bool) (*runEgress, error) {
	mode := g.mode
	if mode == "" {
		mode = egressModeStage
		if noServer {
			mode = egressModeOff
		}
	}
	switch {
	case mode == egressModeOff:
		return nil, nil
	case mode != egressModeStage && mode != egressModeDeny:
		return nil, lockstep.Errorf(lockstep.EINVALID, "--egress %q: want stage, deny or off", mode)
	case noServer:
		return nil, lockstep.Errorf(lockstep.EINVALID, "--egress %s stages writes on the workspace: it needs the server (drop --no-server, or --egress off)", mode)
	}
	argv, err := findEgress(e)
	if err != nil {
		return nil, err
	}
	runID := lockstep.NewID("run_")
	var noProxy []string
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
		noProxy = append(noProxy, net.JoinHostPort(u.Hostname(), port))
	}
	argv = append(argv, "--mode", mode, "--allow", g.allow, "--bypass", strings.Join(noProxy, ","), "--no-proxy", strings.Join(noProxy, ","),
		"--intercept="+strconv.FormatBool(g.intercept), "--max-body", strconv.FormatInt(g.maxBody, 10),
		"--url", c.BaseURL, "--workspace", ws, "--run-id", runID,
		"--retries", strconv.Itoa(c.Retry.MaxAttempts), "--retry-delay", c.Retry.BaseDelay.String(), "--attempt-timeout", c.Retry.AttemptTimeout.String())
	cmd := exec.Command(argv[0], argv[1:]...)
	// The key only in the environment, never on the command line.
	cmd.Env = append(procenv.Drop(os.Environ(), "LOCKSTEP_KEY", "LOCKSTEP_KEY_FILE"), "LOCKSTEP_KEY="+c.Key)
	cmd.Stderr = e.stderr
	cmd.SysProcAttr = egressProcAttr() // Pdeathsig: never outlives this process
	r := &runEgress{cmd: cmd, c: c, ws: ws, runID: runID, lines: make(chan egressLine, 2)}
	if r.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the egress proxy %s: %w", argv[0], err)
	}
	go func() {
		br := bufio.NewReader(stdout)
		for range 2 {
			var l egressLine
			b, err := br.ReadBytes('\n')
			if err == nil {
				err = json.Unmarshal(b, &l)
			}
			l.err = err
			r.lines <- l
			if err != nil {
				return
			}
		}
		io.Copy(io.Discard, br)
	}()
	return r, nil
}

// wait waits for the proxy to listen and returns env with its variables
// and the run's id (LOCKSTEP_RUN_ID, the staged effects' run).
func (r *runEgress) wait(ctx context.Context, env []string) ([]string, error) {
	select {
	case l := <-r.lines:
		if l.err != nil || l.URL == "" {
			return nil, lockstep.Errorf(lockstep.EINTERNAL, "the egress proxy (%s) did not start: %v (its error is above)", r.cmd.Path, l.err)
		}
		r.ready = &l
		if env == nil {
			env = os.Environ()
		}
		return procenv.Merge(env, append(l.Env, "LOCKSTEP_RUN_ID="+r.runID)), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// stop closes the proxy's standard input (it stops then) and returns the
// ids of the effects it staged.
func (r *runEgress) stop() ([]string, error) {
	r.stdin.Close()
	var staged []string
	var err error
	if r.ready != nil {
		l := <-r.lines
		staged, err = l.Staged, l.err
	}
	if werr := r.cmd.Wait(); werr != nil && err == nil {
		err = werr
	}
	return staged, err
}

// finish stops the proxy and, when the run failed (or never ran),
// discards what it staged: a successful run's effects stay staged for the
// promote to release.
func (r *runEgress) finish(ctx context.Context, e *env, rep *txrun.Report, runErr error) {
	if r == nil {
		return
	}
	staged, err := r.stop()
	if err != nil && r.ready != nil {
		fmt.Fprintf(e.stderr, "lockstep run: the egress proxy: %v\n", err)
	}
	if runErr == nil && rep != nil && rep.Succeeded {
		if n := len(staged); n > 0 {
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

// findEgress is the command line that runs the egress proxy, the first
// of: LOCKSTEP_EGRESS_BINARY; lockstep-egress in this executable's
// directory (symbolic links resolved); lockstep-egress on PATH; the
// server build as findServer finds it without building it (`lockstep-server
// __egress`, the same code: a two-binary install works); and, inside a
// checkout of this module with the Go toolchain on PATH, lockstep-egress
// built from that source into the user cache directory.
func findEgress(e *env) ([]string, error) {
	if p := strings.TrimSpace(e.getenv("LOCKSTEP_EGRESS_BINARY")); p != "" {
		if st, err := os.Stat(p); err != nil || st.IsDir() {
			return nil, lockstep.Errorf(lockstep.EINVALID, "LOCKSTEP_EGRESS_BINARY=%s: not an executable file", p)
		}
		return []string{p}, nil
	}
	if p := besideSelf(egressBinaryName); p != "" {
		return []string{p}, nil
	}
	if p, err := exec.LookPath(egressBinaryName); err == nil {
		return []string{p}, nil
	}
	if p := strings.TrimSpace(e.getenv("LOCKSTEP_SERVER_BINARY")); p != "" {
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return []string{p, "__egress"}, nil
		}
	}
	if p := besideSelf(serverBinaryName); p != "" {
		return []string{p, "__egress"}, nil
	}
	if p, err := exec.LookPath(serverBinaryName); err == nil {
		return []string{p, "__egress"}, nil
	}
	root := moduleRoot()
	goBin, goErr := exec.LookPath("go")
	if root == "" || goErr != nil {
		return nil, lockstep.Errorf(lockstep.ENOTCONFIGURED,
			"--egress stage|deny (the default with a server) runs the egress proxy, %s (or the server build, %s __egress), and neither is next to lockstep, on PATH or in LOCKSTEP_EGRESS_BINARY; "+
				"build it with `CGO_ENABLED=0 go build -o %s ./cmd/lockstep-egress` (the release archive and image hold it), or run with --egress off",
			egressBinaryName, serverBinaryName, egressBinaryName)
	}
	p, err := buildFromSource(e, goBin, root, "egress-", egressBinaryName, nil, "./cmd/lockstep-egress")
	if err != nil {
		return nil, err
	}
	return []string{p}, nil
}

// besideSelf is the file name in this executable's directory (symbolic
// links resolved), or "".
func besideSelf(name string) string {
	self, err := os.Executable()
	if err != nil {
		return ""
	}
	if real, err := filepath.EvalSymlinks(self); err == nil {
		self = real
	}
	p := filepath.Join(filepath.Dir(self), name)
	if st, err := os.Stat(p); err == nil && !st.IsDir() {
		return p
	}
	return ""
}
