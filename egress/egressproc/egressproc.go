// Package egressproc is the egress proxy of `lockstep run` as a process of
// its own: the small lockstep-egress build (cmd/lockstep-egress) and the
// server build's `lockstep-server __egress` run Main. The client build
// starts it as a child instead of linking the proxy, so the client does
// not link github.com/elazarl/goproxy, whose package initialiser (it
// parses its bundled CA) cost every client command about a millisecond
// (issue #26).
//
// The protocol: the configuration comes as flags, the API key in the
// environment (LOCKSTEP_KEY, never on the command line). Once listening,
// Main writes one JSON line (Ready) to stdout and serves until its stdin
// reaches end of file (the parent closed it, or died); then it stops the
// proxy, writes a second JSON line (Done) with the effects it staged and
// returns.
package egressproc

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/api"
	"github.com/lockstep-hq/lockstep/client"
	"github.com/lockstep-hq/lockstep/egress"
	"github.com/lockstep-hq/lockstep/internal/procenv"
)

// Ready is the first line: the variables the run's environment gets
// (egress.Proxy.Env with the NO_PROXY hosts given).
type Ready struct {
	URL string   `json:"url"`
	Env []string `json:"env"`
}

// Done is the last line: the ids of the effects the proxy staged.
type Done struct {
	Staged []string `json:"staged"`
}

// Main runs the proxy described by args and getenv until stdin ends; it
// returns the process status (2: bad arguments, 1: the proxy did not
// start).
func Main(args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	// Its key (LOCKSTEP_KEY, the run's) is in its environment and the
	// run's command, of the same user, must not read it from /proc.
	if err := procenv.Hide(); err != nil {
		fmt.Fprintf(stderr, "lockstep-egress: hide this process's environment: %v\n", err)
		return 1
	}
	fs := flag.NewFlagSet("lockstep-egress", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg egress.Config
	var allow, bypass, noProxy, url, ws string
	var retries int
	var retryDelay, attemptTimeout time.Duration
	fs.StringVar(&cfg.Mode, "mode", egress.ModeStage, "stage or deny")
	fs.StringVar(&allow, "allow", "", "hosts the command may reach (comma-separated)")
	fs.StringVar(&bypass, "bypass", "", "host:port addresses forwarded as they are (comma-separated)")
	fs.StringVar(&noProxy, "no-proxy", "", "NO_PROXY of the run's environment (comma-separated)")
	fs.BoolVar(&cfg.Intercept, "intercept", true, "intercept HTTPS with a CA made for the run")
	fs.Int64Var(&cfg.MaxBodyBytes, "max-body", egress.DefaultMaxBodyBytes, "largest staged request body")
	fs.StringVar(&url, "url", "http://127.0.0.1:7070", "Lockstep server URL (the key is LOCKSTEP_KEY in the environment)")
	fs.StringVar(&ws, "workspace", "", "workspace the writes are staged on")
	fs.StringVar(&cfg.RunID, "run-id", "", "run the staged effects belong to")
	fs.IntVar(&retries, "retries", client.DefaultRetry.MaxAttempts, "attempts per staging request")
	fs.DurationVar(&retryDelay, "retry-delay", client.DefaultRetry.BaseDelay, "first retry's backoff")
	fs.DurationVar(&attemptTimeout, "attempt-timeout", 0, "bound on one attempt (0: none)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if ws == "" || cfg.RunID == "" {
		fmt.Fprintln(stderr, "lockstep-egress: --workspace and --run-id are required")
		return 2
	}
	c := client.New(url, getenv("LOCKSTEP_KEY"))
	c.Retry = client.RetryPolicy{MaxAttempts: retries, BaseDelay: retryDelay, AttemptTimeout: attemptTimeout}
	cfg.Allow, cfg.Bypass = split(allow), split(bypass)
	cfg.Stager = stager{c: c, ws: ws}
	px, err := egress.Start(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "lockstep-egress: %v\n", err)
		if lockstep.ErrorCode(err) == lockstep.EINVALID {
			return 2
		}
		return 1
	}
	out := bufio.NewWriter(stdout)
	enc := json.NewEncoder(out)
	if err := enc.Encode(Ready{URL: px.URL, Env: px.Env(split(noProxy))}); err == nil {
		err = out.Flush()
	}
	// Serve until stdin ends: the parent closes it when the run is over,
	// and the kernel when the parent dies (which also sends SIGTERM, the
	// parent's Pdeathsig). SIGINT, which a terminal sends the whole
	// foreground group, is the parent's to handle: it ends the run, then
	// the proxy.
	signal.Ignore(os.Interrupt)
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM, syscall.SIGHUP)
	eof := make(chan struct{})
	go func() {
		io.Copy(io.Discard, stdin)
		close(eof)
	}()
	select {
	case <-eof:
	case <-term:
	}
	signal.Stop(term)
	px.Close()
	staged := px.Staged()
	if staged == nil {
		staged = []string{}
	}
	enc.Encode(Done{Staged: staged})
	out.Flush()
	return 0
}

type stager struct {
	c  *client.Client
	ws string
}

func (s stager) Stage(ctx context.Context, req api.EffectRequest) (api.Effect, error) {
	return s.c.StageEffect(ctx, s.ws, req)
}

func split(s string) []string {
	var out []string
	for _, h := range strings.Split(s, ",") {
		if h = strings.TrimSpace(h); h != "" {
			out = append(out, h)
		}
	}
	return out
}
