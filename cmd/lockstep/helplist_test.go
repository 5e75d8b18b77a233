package main

import (
	"regexp"
	"strings"
	"testing"
)

// TestCommandListNamesEverySubcommand: the one-line summary of a command
// with subcommands in `lockstep`'s command list names each subcommand its
// usage line has (the list said "fail | abandon a workspace" while
// `lockstep workspace delete` existed, and left out `keys quota` and
// `repo retention`).
func TestCommandListNamesEverySubcommand(t *testing.T) {
	_, list, _ := cli(t)
	word := regexp.MustCompile(`^[a-z]+$`)
	for name := range commands() {
		switch name {
		case "serve", "migrate", "bench", "load", "mcp":
			continue // the server build's: no subcommands
		}
		out, _, err := cli(t, name, "-h")
		if err != exitError(0) || !strings.Contains(out, "<subcommand> -h") {
			continue // no subcommands
		}
		usage, _, _ := strings.Cut(strings.TrimPrefix(out, "usage: lockstep "+name+" "), "\n")
		var summary string
		for _, l := range strings.Split(list, "\n") {
			if f := strings.Fields(l); len(f) > 1 && f[0] == name {
				summary = l
			}
		}
		if summary == "" {
			t.Errorf("%s is not in the command list:\n%s", name, list)
			continue
		}
		for _, alt := range strings.Split(usage, " | ") {
			f := strings.Fields(strings.TrimPrefix(alt, name+" "))
			if len(f) == 0 || !word.MatchString(f[0]) {
				continue
			}
			if !regexp.MustCompile(`\b` + f[0] + `\b`).MatchString(summary) {
				t.Errorf("the command list's line for %s does not name its subcommand %q:\n%s\nusage: %s", name, f[0], summary, usage)
			}
		}
	}
}
