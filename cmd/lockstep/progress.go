package main

import (
	"fmt"
	"io"
	"os"
)

// isTerminal reports whether w is a terminal (a character device): progress
// lines rewrite themselves with \r only there; in a pipe or a log file
// they would pile up as one long line.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// humanBytes is n in B, KiB, MiB or GiB ("19.1 MiB").
func humanBytes(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	case n < 1<<30:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
}

// progress shows a transfer past 1 MiB on stderr: on a terminal one line
// rewritten in place (with the total of objects when known); elsewhere
// nothing until the end, then one line with the totals.
type progress struct {
	w       io.Writer
	tty     bool
	verb    string // "uploading", "downloading"
	total   int    // objects to send, 0 = unknown
	objects int
	bytes   int64
	shown   int64 // MiB last shown
}

func newProgress(e *env, quiet bool, verb string) *progress {
	if quiet {
		return nil
	}
	return &progress{w: e.stderr, tty: isTerminal(e.stderr), verb: verb}
}

// update records the counts so far.
func (p *progress) update(objects int, bytes int64) {
	if p == nil {
		return
	}
	p.objects, p.bytes = objects, bytes
	if !p.tty || bytes < 1<<20 || bytes>>20 == p.shown {
		return
	}
	p.shown = bytes >> 20
	fmt.Fprintf(p.w, "\r%s: %s ", p.verb, p.counts())
}

func (p *progress) counts() string {
	s := humanBytes(p.bytes)
	switch {
	case p.total > 0:
		s = fmt.Sprintf("%d/%d objects, %s", p.objects, p.total, s)
	case p.objects > 0:
		s = fmt.Sprintf("%d objects, %s", p.objects, s)
	}
	return s
}

// end prints the last line (the totals), if the transfer was big enough
// to show progress.
func (p *progress) end() {
	if p == nil || p.bytes < 1<<20 {
		return
	}
	cr := ""
	if p.tty {
		cr = "\r"
	}
	fmt.Fprintf(p.w, "%s%s: %s, done\n", cr, p.verb, p.counts())
}
