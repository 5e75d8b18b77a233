// Command testreport reads `go test -json` on stdin and prints what a plain
// `go test` prints (each package's closing `ok`/`FAIL` line, the output of
// failed tests, build errors), then a list of the tests that were skipped,
// each with its reason: without -v go test hides a skip, and a skipped test
// looks exactly like a passing one. scripts/test pipes the suite through it:
//
//	go test -json ./... | go run ./internal/testreport
//
// It exits 1 if any test or package failed, else 0.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

func main() {
	os.Exit(report(os.Stdin, os.Stdout))
}

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action     string
	Package    string
	Test       string
	Output     string
	ImportPath string // build-output, build-fail
}

type key struct{ pkg, test string }

type skip struct{ pkg, test, reason string }

// report copies the readable part of the event stream in to out and ends
// with the skipped tests; it returns the exit status.
func report(in io.Reader, out io.Writer) int {
	w := bufio.NewWriter(out)
	defer w.Flush()
	bufs := map[key][]string{} // output of running tests, shown if they fail
	var skips []skip
	failed := false
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var ev event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &ev) != nil {
			// Not an event (go vet, a build error before -json took over).
			fmt.Fprintf(w, "%s\n", line)
			continue
		}
		k := key{ev.Package, ev.Test}
		switch ev.Action {
		case "build-output":
			w.WriteString(ev.Output)
		case "build-fail":
			failed = true
		case "output":
			if ev.Test != "" {
				if !chatter(ev.Output) {
					bufs[k] = append(bufs[k], ev.Output)
				}
				continue
			}
			if strings.TrimSpace(ev.Output) == "PASS" {
				continue // plain go test prints only "ok" for a passing package
			}
			w.WriteString(ev.Output)
		case "pass":
			delete(bufs, k)
		case "skip":
			if ev.Test != "" {
				skips = append(skips, skip{ev.Package, ev.Test, reason(bufs[k])})
			}
			delete(bufs, k)
		case "fail":
			failed = true
			if ev.Test != "" {
				flush(w, bufs[k])
				delete(bufs, k)
				continue
			}
			// A package that failed without its tests ending (a panic, a
			// timeout): show what its unfinished tests printed.
			var rest []key
			for b := range bufs {
				if b.pkg == ev.Package {
					rest = append(rest, b)
				}
			}
			sort.Slice(rest, func(i, j int) bool { return rest[i].test < rest[j].test })
			for _, b := range rest {
				flush(w, bufs[b])
				delete(bufs, b)
			}
		}
		w.Flush()
	}
	if len(skips) > 0 {
		fmt.Fprintf(w, "\nskipped: %d tests (not run, so not proven by this run):\n", len(skips))
		for _, s := range skips {
			fmt.Fprintf(w, "  %s %s: %s\n", s.pkg, s.test, s.reason)
		}
	}
	if failed {
		return 1
	}
	return 0
}

// chatter is verbose-mode framing that plain go test does not print.
func chatter(s string) bool {
	t := strings.TrimSpace(s)
	for _, p := range []string{"=== RUN", "=== PAUSE", "=== CONT", "=== NAME"} {
		if strings.HasPrefix(t, p) {
			return true
		}
	}
	return false
}

func flush(w *bufio.Writer, lines []string) {
	for _, l := range lines {
		w.WriteString(l)
	}
}

// reason is what a skipped test logged (its t.Skip message), on one line.
func reason(lines []string) string {
	var parts []string
	for _, l := range lines {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "--- SKIP") {
			continue
		}
		parts = append(parts, t)
	}
	if len(parts) == 0 {
		return "(no reason given)"
	}
	return strings.Join(parts, " / ")
}
