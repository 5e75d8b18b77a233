//go:build lockstep_server

package main

import (
	"context"
	"os"
	"strings"
	"time"

	"github.com/lockstep-hq/lockstep/bench"
	"github.com/lockstep-hq/lockstep/client"
)

// cmdLoad parses `lockstep load`'s flags and runs bench.RunLoad against
// running servers (one, or several replicas). It exits 1 after the report
// when a promise did not hold (lost updates, stale reads, a broken oplog).
func cmdLoad(ctx context.Context, e *env, args []string) error {
	var o bench.LoadOptions
	var urls, keyFile string
	var asJSON bool
	var seed int
	f := newFlagger("load", e)
	f.str(&urls, "urls", "LOCKSTEP_URL", "http://127.0.0.1:7070", "comma-separated base URLs of the servers; requests go to them round-robin")
	f.secret(&o.Key, "key", "LOCKSTEP_KEY", "admin API key")
	f.str(&keyFile, "key-file", "LOCKSTEP_KEY_FILE", "", "file holding the admin API key (e.g. lockstep-data/admin.key)")
	f.fs.IntVar(&o.Agents, "agents", 64, "simulated agents running at once (1-4096)")
	f.fs.DurationVar(&o.Duration, "duration", 60*time.Second, "how long agents start new iterations (iterations under way then finish)")
	f.fs.StringVar(&o.Base, "base", "load", "base repository the agents fork; created with a small seed tree and a gate requiring the check \""+bench.LoadCheckName+"\" when absent")
	f.fs.StringVar(&o.Dir, "dir", "", "parent directory of the agents' worktrees (default $TMPDIR)")
	f.fs.IntVar(&seed, "seed", 1, "seed of the agents' choices")
	f.fs.BoolVar(&asJSON, "json", false, "print the report as JSON")
	f.dur(&o.Retry.AttemptTimeout, "attempt-timeout", "LOCKSTEP_ATTEMPT_TIMEOUT", 0, "bound on one attempt, answer included (0 = none); a timed-out attempt is retried")
	if err := f.parse(args); err != nil {
		return err
	}
	var err error
	if o.URLs, err = bench.ParseURLs(urls); err != nil {
		return err
	}
	if o.Key == "" && keyFile != "" {
		b, err := os.ReadFile(keyFile)
		if err != nil {
			return err
		}
		o.Key = strings.TrimSpace(string(b))
	}
	o.Seed = uint64(seed)
	o.Retry.MaxAttempts = client.DefaultRetry.MaxAttempts
	o.Stderr = e.stderr
	out := e.stdout
	if asJSON {
		out = nil
	}
	rep, err := bench.RunLoad(ctx, o, out)
	if err != nil {
		return err
	}
	if asJSON {
		if err := writeJSON(e.stdout, rep); err != nil {
			return err
		}
	}
	if !rep.OK() {
		if !asJSON {
			e.stderr.Write([]byte(bench.ErrLoadFailed.Error() + "\n"))
		}
		return exitError(1)
	}
	return nil
}
