package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/lockstep-hq/lockstep"
)

// pushWords rewrites the API's "send expect_oid=… or force=true" (the
// words of the HTTP contract, kept for API users) into this CLI's flags.
func pushWords(err error, repo string) error {
	var le *lockstep.Error
	if !errors.As(err, &le) || le.Code != lockstep.EPRECONDITION || !strings.Contains(le.Message, "force=true") {
		return err
	}
	actual, _ := le.Details["actual"].(string)
	ref, _ := le.Details["ref"].(string)
	out := *le
	out.Message = fmt.Sprintf("branch %s of %s already exists (at %s): push with --expect %s (the tip you started from), "+
		"--expect-current (on top of whatever is there now) or --force (overwrite)",
		strings.TrimPrefix(ref, "refs/heads/"), repo, short(actual), actual)
	return &out
}

// progressWriter counts the bytes written through it and, past 1 MiB,
// shows a progress line on stderr (as push does) unless quiet.
type progressWriter struct {
	w     io.Writer
	e     *env
	quiet bool
	verb  string
	n     int64
	shown int64 // MiB last shown
}

func (p *progressWriter) Write(b []byte) (int, error) {
	n, err := p.w.Write(b)
	p.n += int64(n)
	if !p.quiet && p.n>>20 > p.shown {
		p.shown = p.n >> 20
		fmt.Fprintf(p.e.stderr, "\r%s: %.1f MiB ", p.verb, float64(p.n)/(1<<20))
	}
	return n, err
}

// end finishes the progress line, if one was shown.
func (p *progressWriter) end() {
	if p.shown > 0 {
		fmt.Fprintf(p.e.stderr, "\r%s: %.1f MiB, done\n", p.verb, float64(p.n)/(1<<20))
	}
}
