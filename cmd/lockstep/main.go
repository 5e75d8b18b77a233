// Command lockstep is the Lockstep command: `lockstep serve` runs the
// service; every other subcommand is a client of its HTTP API (keys, repo,
// push, rollback, log, checkout, fork, merge, sync, …). This package only
// parses flags and environment and wires packages together.
//
// It builds two ways from the same files. `go build ./cmd/lockstep` is
// the client: it links none of the server's packages (web, sqlstore, the
// drivers, gin, pgx, minio, prometheus, OpenTelemetry, the MCP SDK), so a
// client command starts in about a millisecond, and it runs the server
// commands (serve, migrate, mcp, bench, load) by executing the server
// build, lockstep-server (servercmd_client.go). `go build -tags
// lockstep_server` is that server build: every command in process
// (servercmd_server.go). docs/architecture.md, "Two builds".
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/fssnap/contain"
)

func main() {
	contain.MaybeHelper() // a contained run's namespace helper (lockstep __contain …)
	maybeEgress()         // the server build as a run's egress proxy (lockstep-server __egress …)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		// The first signal asks for a clean stop (in-flight requests
		// finish, a failed run is rolled back); a second one forces exit.
		<-ctx.Done()
		again := make(chan os.Signal, 1)
		signal.Notify(again, os.Interrupt, syscall.SIGTERM)
		<-again
		fmt.Fprintln(os.Stderr, "lockstep: second signal: exiting now")
		os.Exit(130)
	}()
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		var fe flagError
		if errors.As(err, &fe) {
			if wantsJSON(os.Args[1:]) {
				report(os.Args[1:], fe.err, os.Stdout, os.Stderr)
			}
			os.Exit(2)
		}
		var ee exitError
		if errors.As(err, &ee) {
			os.Exit(int(ee))
		}
		os.Exit(report(os.Args[1:], err, os.Stdout, os.Stderr))
	}
}

// exitError ends the process with a status and no message.
type exitError int

// flagError is a command line the flag package refused (it already
// printed the error and the usage on stderr): status 2, and under --json
// the error envelope on stdout as for every other error.
type flagError struct{ err error }

func (e flagError) Error() string { return e.err.Error() }
func (e flagError) Unwrap() error { return e.err }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// report prints err and returns the process status: with --json the
// error envelope {"error":{"code","message","details"}} goes to stdout
// (scripts parse one stream), else a plain line to stderr.
func report(args []string, err error, stdout, stderr io.Writer) int {
	err = unreachable(err)
	if wantsJSON(args) {
		code := lockstep.ErrorCode(err)
		msg := err.Error()
		var le *lockstep.Error
		if errors.As(err, &le) {
			msg = le.Message
		}
		details := lockstep.ErrorDetails(err)
		if details == nil {
			details = map[string]any{}
		}
		writeJSON(stdout, map[string]any{"error": map[string]any{"code": code, "message": msg, "details": details}})
	} else {
		fmt.Fprintln(stderr, "lockstep:", err)
	}
	return exitCode(err)
}

// wantsJSON reports whether the command line asks for --json (before a
// "--" that starts a wrapped command).
// unreachable makes a server that does not answer at all (connection
// refused, unknown host) an unavailable error that names the URL and what
// to check, instead of an internal one with the dialer's text.
func unreachable(err error) error {
	var ue *url.Error
	if lockstep.ErrorCode(err) != lockstep.EINTERNAL || !errors.As(err, &ue) {
		return err
	}
	var dns *net.DNSError
	why := ""
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		why = "connection refused"
	case errors.As(err, &dns):
		why = "unknown host " + dns.Name
	default:
		return err
	}
	server := ue.URL
	if u, perr := url.Parse(ue.URL); perr == nil {
		server = u.Scheme + "://" + u.Host
	}
	return lockstep.Errorf(lockstep.EUNAVAILABLE, "cannot reach the server at %s (%s): is `lockstep serve` running there? (LOCKSTEP_URL or --url)", server, why)
}

func wantsJSON(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "--json", "-json", "--json=true", "-json=true":
			return true
		}
	}
	return false
}

// exitCode maps an error code to a process status, so scripts can tell a
// lost compare-and-swap (3) from bad input (2) or anything else (1).
func exitCode(err error) int {
	switch lockstep.ErrorCode(err) {
	case lockstep.EINVALID, lockstep.ETOOLARGE:
		return 2
	case lockstep.EREFCONFLICT, lockstep.EPRECONDITION:
		return 3
	case lockstep.EMERGECONFLICT:
		return 4
	case lockstep.EGATEFAILED:
		return 5
	case lockstep.ENOTCONFIGURED:
		return 6
	}
	return 1
}

type command struct {
	summary string
	run     func(ctx context.Context, e *env, args []string) error
}

// env is what every subcommand gets: the environment and the streams.
type env struct {
	getenv func(string) string
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
}

func commands() map[string]command {
	return map[string]command{
		"serve":       {"run the service", runServe},
		"migrate":     {"apply metadata schema migrations and exit", runMigrate},
		"keys":        {"create | list | revoke API keys, quota: set a key's limits", cmdKeys},
		"oplog":       {"read or verify the operations log", cmdOplog},
		"repo":        {"create | list | show repositories, set their retention", cmdRepo},
		"push":        {"push a directory as a commit (incremental, compare-and-swap)", cmdPush},
		"watch":       {"keep a directory's changed paths for fast pushes (optional daemon)", cmdWatch},
		"rollback":    {"new commit with an older commit's tree", cmdRollback},
		"log":         {"list commits", cmdLog},
		"checkout":    {"write a commit's tree into a fresh directory", cmdCheckout},
		"refs":        {"list a repository's refs", cmdRefs},
		"fork":        {"create a workspace (a ref-only fork)", cmdFork},
		"workspaces":  {"list a base repository's workspaces", cmdWorkspaces},
		"workspace":   {"fail | abandon | delete a workspace", cmdWorkspace},
		"merge":       {"preflight or materialize a merge", cmdMerge},
		"sync":        {"merge the base branch into a workspace", cmdSync},
		"gate":        {"show | set a branch's gate policy", cmdGate},
		"gc":          {"drop unreachable objects older than the retention now (admin), print what was reclaimed", cmdGC},
		"checks":      {"list or post check results of a commit", cmdChecks},
		"promote":     {"land a workspace in its base when the gate passes", cmdPromote},
		"hooks":       {"list | create | rotate | delete gate hooks, show deliveries", cmdHooks},
		"checkpoint":  {"record a checkpoint of a workspace (code, database, filesystem snapshot id)", cmdCheckpoint},
		"checkpoints": {"list a workspace's checkpoints", cmdCheckpoints},
		"restore":     {"restore a workspace to a checkpoint (code and database)", cmdRestore},
		"effects":     {"stage | list | approve | reject | compensate outward effects (sent when a workspace is promoted)", cmdEffects},
		"database":    {"bind | show | refresh a repository's database (template, branch DSN)", cmdDatabase},
		"snapshot":    {"take | restore | list | drop | prune filesystem snapshots of a directory (prepare | unprepare it)", cmdSnapshot},
		"run":         {"run a command as a transaction: checkpoint, run, roll back everything on failure", cmdRun},
		"runner":      {"a CI runner: receives gate hooks, runs a command, posts a check; with --jobs, takes agents' run jobs from the server", cmdRunner},
		"bench":       {"measure Lockstep side by side with the git CLI", runBench},
		"load":        {"simulated agents against running servers (fork, push, preflight, promote), then a lost-update check", runLoad},
		"mcp":         {"serve the MCP tools over stdio for an agent on this machine", runMCP},
		"version":     {"print the version", cmdVersion},
		"whoami":      {"show the key the client uses (id, name, role)", cmdWhoami},
	}
}

func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	e := &env{getenv: getenv, stdin: stdin, stdout: stdout, stderr: stderr}
	cmds := commands()
	if len(args) == 0 {
		usage(stderr, cmds)
		return exitError(2)
	}
	if args[0] == "-h" || args[0] == "--help" {
		usage(stdout, cmds)
		return nil
	}
	if args[0] == "help" {
		return cmdHelp(e, args[1:])
	}
	c, ok := cmds[args[0]]
	if !ok {
		return unknownCommand(e, args[0])
	}
	return c.run(ctx, e, args[1:])
}

func usage(w io.Writer, cmds map[string]command) {
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintln(w, "usage: lockstep <command> [flags]\n\ncommands:")
	for _, n := range names {
		fmt.Fprintf(w, "  %-11s %s\n", n, cmds[n].summary)
	}
	fmt.Fprintln(w, "\nclient commands read LOCKSTEP_URL (default http://127.0.0.1:7070) and LOCKSTEP_KEY;\nrun `lockstep help <command>` (or `lockstep <command> -h`) for its flags and examples,\n`lockstep help client` for the flags every client command takes.")
}

// synopsis is each command's positional arguments, shown by -h.
var synopsis = map[string]string{
	"keys create":      "--name N --role R",
	"keys revoke":      "KEY_ID",
	"repo create":      "NAME [--default-branch B]",
	"repo show":        "NAME",
	"repo retention":   "REPO [--abandon-after AGE] [--delete-after AGE] [--archive-failed]",
	"refs":             "REPO",
	"gc":               "[--repo R] [--prune now|DURATION] [--dry-run]",
	"log":              "REPO [--ref B] [--limit N]",
	"fork":             "[--task T] BASE NAME",
	"workspaces":       "[--task T] BASE",
	"checkout":         "REPO[@REV] DIR",
	"push":             "DIR --repo R (--expect OID | --expect-current | --force)",
	"watch":            "--dir DIR",
	"promote":          "WORKSPACE [--commit OID] [--mode M]",
	"restore":          "WORKSPACE CHECKPOINT [--expect OID]",
	"checkpoint":       "WORKSPACE [--fs-snapshot ID] [--label L]",
	"checkpoints":      "WORKSPACE",
	"checks":           "REPO COMMIT [--post NAME --status S]",
	"gate show":        "REPO [--branch B]",
	"gate set":         "REPO [--require-check N]... [--protect GLOB]...",
	"database bind":    "REPO --template DB",
	"database show":    "REPO",
	"database refresh": "REPO",
	"hooks list":       "REPO",
	"hooks create":     "REPO --hook-url U --secret S [--event E]...",
	"hooks rotate":     "REPO HOOK_ID [--secret S] [--overlap D]",
	"hooks deliveries": "REPO HOOK_ID",
	"hooks delete":     "REPO HOOK_ID",
	"run":              "--workspace W --dir DIR [--timeout D] -- COMMAND [ARGS...]",
	"runner":           "--repo R --check NAME -- COMMAND [ARGS...] | --jobs --workspaces PREFIX[,PREFIX...] [--name N]",
	"snapshot prune":   "DIR [--keep N] [--keep-failed D] [--dry-run]",
	"snapshot take":    "DIR [--quiet]",
	"snapshot restore": "DIR SNAPSHOT_ID",
	"snapshot list":    "DIR",
	"snapshot drop":    "DIR SNAPSHOT_ID",
	"sync":             "WORKSPACE [--expect OID]",
	"rollback":         "--repo R --to REV (--expect OID | --expect-current | --force)",
	"merge":            "--repo R --theirs REV [--ours B] [--preflight [--deep] | --materialize]",
	"oplog":            "[verify] [--repo R] [--limit N] [--oldest-first]",

	// The effects outbox (effectscmd.go).
	"effects stage":      "WORKSPACE --method M --target URL [--body B] [--header H]...",
	"effects list":       "REPO",
	"effects approve":    "REPO EFFECT_ID [--reason R]",
	"effects reject":     "REPO EFFECT_ID [--reason R]",
	"effects compensate": "REPO (EFFECT_ID | --commit OID)",
	"workspace fail":     "WORKSPACE --reason R",
	"workspace abandon":  "WORKSPACE [--reason R]",
	"workspace delete":   "WORKSPACE",
}

// subcommands answers a command that has subcommands when it got none or
// -h: usage on stdout for -h (status 0), on stderr otherwise (status 2).
// It returns done=false when args name a subcommand to run.
func subcommands(e *env, name, usageText string, args []string) (bool, error) {
	if len(args) > 0 && args[0] != "-h" && args[0] != "--help" && args[0] != "help" {
		return false, nil
	}
	if len(args) == 0 {
		fmt.Fprintln(e.stderr, usageText)
		return true, exitError(2)
	}
	fmt.Fprintln(e.stdout, usageText)
	fmt.Fprintf(e.stdout, "run `lockstep %s <subcommand> -h` for its flags.\n", name)
	return true, exitError(0)
}

// envOr returns getenv(name) or def.
func envOr(getenv func(string) string, name, def string) string {
	if v := strings.TrimSpace(getenv(name)); v != "" {
		return v
	}
	return def
}
