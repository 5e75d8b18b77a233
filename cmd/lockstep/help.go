package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/lockstep-hq/lockstep"
)

// Help as gh and git print it: what the command does, its usage, its own
// flags (with two dashes, as the README writes them), the client flags
// every client command shares in one line, and examples. -h prints it on
// stdout (status 0); a command line the flags refuse gets one error line,
// the nearest flag, the usage line and where to look (status 2).

// clientFlagNames are declared by clientFlags.declare on every client
// command; -h names them in one line (`lockstep help client` in full).
var clientFlagNames = []string{"url", "key", "key-file", "json", "retries", "retry-delay", "attempt-timeout"}

// subSummary describes the subcommands (the commands' own are in commands()).
var subSummary = map[string]string{
	"keys create":       "create an API key (its secret is shown once)",
	"keys list":         "list API keys",
	"keys revoke":       "revoke an API key",
	"keys quota":        "set a key's own workspace, storage and runs quotas (admin)",
	"repo create":       "create a repository",
	"repo list":         "list repositories",
	"repo retention":    "show or set a base repository's retention of its workspaces (admin)",
	"repo show":         "show a repository and its head",
	"gate show":         "show a branch's gate policy",
	"gate set":          "set a branch's gate policy",
	"database bind":     "bind a template database to a repository",
	"database show":     "show a repository's database binding",
	"database refresh":  "refresh a repository's template copy",
	"hooks list":        "list a repository's gate hooks",
	"hooks create":      "create a gate hook",
	"hooks rotate":      "rotate a gate hook's secret",
	"hooks deliveries":  "show a gate hook's deliveries",
	"hooks delete":      "delete a gate hook",
	"snapshot take":     "take a filesystem snapshot of a directory",
	"snapshot restore":  "restore a directory to a filesystem snapshot",
	"snapshot list":     "list a directory's filesystem snapshots",
	"snapshot drop":     "drop a filesystem snapshot",
	"snapshot prune":    "drop old filesystem snapshots of a directory",
	"workspace fail":    "mark a workspace failed (reviewers see why)",
	"workspace abandon": "abandon a workspace (it is archived; its branch stays readable)",
	"workspace delete":  "delete a workspace at once: refs, database branch, checkpoints, staged effects (oplog kept)",
}

// examples are shown under -h.
var examples = map[string][]string{
	"push":              {"lockstep push ./work --repo task-1 --expect-current", "lockstep push ./work --repo app --expect 3f1c…  # fails with status 3 if the branch moved"},
	"fork":              {"lockstep fork --task task-45 app task-45-a"},
	"checkout":          {"lockstep checkout app@main ./work"},
	"log":               {"lockstep log app --limit 5"},
	"rollback":          {"lockstep rollback --repo task-1 --to HEAD~1 --expect-current"},
	"merge":             {"lockstep merge --repo app --theirs task-1:main --preflight --deep   # status 4 on conflicts", "lockstep merge --repo app --theirs task-1:main --materialize"},
	"sync":              {"lockstep sync task-1"},
	"promote":           {"lockstep promote task-1", "lockstep promote task-1 --mode squash --message 'Add checkout'"},
	"checkpoint":        {"lockstep checkpoint task-1 --label 'before migration'", "lockstep checkpoint task-1 --fs-snapshot \"$(lockstep snapshot take ./work --quiet)\""},
	"checkpoints":       {"lockstep checkpoints task-1"},
	"restore":           {"lockstep restore task-1 cp_0123abcd"},
	"checks":            {"lockstep checks app 3f1c… --post ci --status success", "lockstep checks app 3f1c… --wait ci"},
	"run":               {"lockstep run --workspace task-1 --dir ./work -- make test"},
	"runner":            {"lockstep runner --repo app --check ci -- go test ./..."},
	"workspaces":        {"lockstep workspaces --task task-45 app"},
	"refs":              {"lockstep refs app"},
	"oplog":             {"lockstep oplog --repo app --limit 20", "lockstep oplog verify"},
	"serve":             {"lockstep serve --data ./lockstep-data --addr 127.0.0.1:7070"},
	"migrate":           {"lockstep migrate --database-url postgres://lockstep@db/lockstep"},
	"keys create":       {"KEY=$(lockstep keys create --name agent-1 --role agent --quiet)", "SUB=$(lockstep keys create --name sub-1 --ttl 1h --workspace app-ws1 --quiet)"},
	"repo create":       {"lockstep repo create app"},
	"repo retention":    {"lockstep repo retention app --abandon-after 7d --delete-after 30d --archive-failed", "lockstep repo retention app --abandon-after 0 --delete-after 0"},
	"gate set":          {"lockstep gate set app --require-check ci --protect 'migrations/**'"},
	"snapshot take":     {"ID=$(lockstep snapshot take ./work --quiet)"},
	"workspace fail":    {"lockstep workspace fail task-1 --reason 'tests never passed'"},
	"workspace abandon": {"lockstep workspace abandon task-1"},
	"workspace delete":  {"lockstep workspace delete task-1"},
	"hooks list":        {"lockstep hooks list app"},
	"version":           {"lockstep version --json"},
	"whoami":            {"lockstep whoami"},
}

// describe is a command's one-line description.
func describe(name string) string {
	if s, ok := subSummary[name]; ok {
		return s
	}
	top, _, _ := strings.Cut(name, " ")
	return commands()[top].summary
}

// printHelp writes the command's help.
func (f *flagger) printHelp(w io.Writer) {
	if d := describe(f.name); d != "" {
		fmt.Fprintf(w, "%s\n\n", capitalize(d))
	}
	fmt.Fprintln(w, f.usageLine())
	var own []*flag.Flag
	f.fs.VisitAll(func(fl *flag.Flag) {
		if !f.client || !isClientFlag(fl.Name) {
			own = append(own, fl)
		}
	})
	if len(own) > 0 {
		fmt.Fprintln(w, "\nflags:")
		printFlags(w, own)
	}
	if f.client {
		fmt.Fprintln(w, "\nclient flags: --url --key --key-file --json --retries --retry-delay --attempt-timeout")
		fmt.Fprintln(w, "  (LOCKSTEP_URL, LOCKSTEP_KEY, …; `lockstep help client` describes them)")
	}
	if ex := examples[f.name]; len(ex) > 0 {
		fmt.Fprintln(w, "\nexamples:")
		for _, x := range ex {
			fmt.Fprintf(w, "  %s\n", x)
		}
	}
}

func (f *flagger) usageLine() string {
	syn := synopsis[f.name]
	if syn == "" {
		syn = "[flags]"
	}
	return fmt.Sprintf("usage: lockstep %s %s", f.name, syn)
}

func isClientFlag(name string) bool {
	for _, n := range clientFlagNames {
		if n == name {
			return true
		}
	}
	return false
}

// printFlags lists flags as `--name TYPE` and their help; backquotes in the
// help stay text (flag.PrintDefaults made `lockstep snapshot take` a value
// name).
func printFlags(w io.Writer, fls []*flag.Flag) {
	for _, fl := range fls {
		head := "  --" + fl.Name
		if t := valueType(fl); t != "" {
			head += " " + t
		}
		help := fl.Usage
		if !zeroDefault(fl) {
			help += fmt.Sprintf(" (default %s)", fl.DefValue)
		}
		if len(head) <= 24 {
			fmt.Fprintf(w, "%-26s%s\n", head, help)
		} else {
			fmt.Fprintf(w, "%s\n%26s%s\n", head, "", help)
		}
	}
}

func valueType(fl *flag.Flag) string {
	if bf, ok := fl.Value.(interface{ IsBoolFlag() bool }); ok && bf.IsBoolFlag() {
		return ""
	}
	switch t := fmt.Sprintf("%T", fl.Value); t {
	case "*flag.stringValue":
		return "string"
	case "*flag.intValue", "*flag.int64Value", "*flag.uintValue", "*flag.uint64Value":
		return "int"
	case "*flag.durationValue":
		return "duration"
	case "*flag.float64Value":
		return "number"
	}
	return "value"
}

func zeroDefault(fl *flag.Flag) bool {
	switch fl.DefValue {
	case "", "0", "false", "0s", "[]":
		return true
	}
	return false
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// flagFailure prints what the flag package refused in two or three lines
// (the error with the flag as the README writes it, the nearest flag, the
// usage) and returns it as a flagError (status 2).
func (f *flagger) flagFailure(err error) error {
	msg := err.Error()
	const undefined = "flag provided but not defined: -"
	if name, ok := strings.CutPrefix(msg, undefined); ok {
		msg = "unknown flag --" + name
		var names []string
		f.fs.VisitAll(func(fl *flag.Flag) { names = append(names, fl.Name) })
		if near := nearest(strings.TrimLeft(name, "-"), names); len(near) > 0 {
			msg += " (did you mean --" + strings.Join(near, " or --") + "?)"
		}
	} else {
		msg = strings.Replace(msg, "flag -", "flag --", 1)
	}
	fmt.Fprintf(f.stderr, "lockstep %s: %s\n%s\nrun `lockstep %s -h` for its flags\n", f.name, msg, f.usageLine(), f.name)
	return flagError{lockstep.Errorf(lockstep.EINVALID, "%s", msg)}
}

// nearest returns the candidates closest to s by Damerau-Levenshtein
// distance (transpositions count 1), if close enough to be a typo: at
// most 1 edit for short words, 2 from 5 letters on; a candidate that s is
// a prefix of also counts. At most three, closest first.
func nearest(s string, candidates []string) []string {
	limit := 1
	if len(s) >= 5 {
		limit = 2
	}
	type cand struct {
		name string
		d    int
	}
	var found []cand
	for _, c := range candidates {
		d := distance(s, c)
		if d <= limit || (len(s) >= 3 && strings.HasPrefix(c, s)) {
			found = append(found, cand{c, d})
		}
	}
	sort.SliceStable(found, func(i, j int) bool {
		if found[i].d != found[j].d {
			return found[i].d < found[j].d
		}
		return found[i].name < found[j].name
	})
	var out []string
	for i, c := range found {
		if i == 3 {
			break
		}
		out = append(out, c.name)
	}
	return out
}

// distance is the optimal-string-alignment Damerau-Levenshtein distance.
func distance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}

// cmdHelp: `lockstep help` lists the commands, `lockstep help client` the
// flags every client command shares, `lockstep help CMD [SUB]` is CMD -h.
func cmdHelp(e *env, args []string) error {
	cmds := commands()
	switch {
	case len(args) == 0:
		usage(e.stdout, cmds)
		return nil
	case args[0] == "client":
		var cf clientFlags
		f := newFlagger("client", e)
		cf.declare(f)
		fmt.Fprintln(e.stdout, "Flags every client command takes (each also read from the environment variable named):")
		var fls []*flag.Flag
		f.fs.VisitAll(func(fl *flag.Flag) { fls = append(fls, fl) })
		printFlags(e.stdout, fls)
		return nil
	}
	c, ok := cmds[args[0]]
	if !ok {
		return unknownCommand(e, args[0])
	}
	return c.run(context.Background(), e, append(append([]string{}, args[1:]...), "-h"))
}

// unknownCommand says so in one or two lines, with the nearest commands.
func unknownCommand(e *env, name string) error {
	var names []string
	for n := range commands() {
		names = append(names, n)
	}
	names = append(names, "help")
	msg := fmt.Sprintf("unknown command %q", name)
	if near := nearest(name, names); len(near) > 0 {
		msg += fmt.Sprintf(" (did you mean %s?)", strings.Join(near, " or "))
	}
	fmt.Fprintf(e.stderr, "lockstep: %s\nrun `lockstep help` for the list of commands\n", msg)
	return flagError{lockstep.Errorf(lockstep.EINVALID, "%s", msg)}
}
