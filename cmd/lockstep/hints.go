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

// progressWriter counts the bytes written through it for a progress
// line (as push shows one) unless p is nil.
type progressWriter struct {
	w io.Writer
	p *progress
	n int64
}

func (pw *progressWriter) Write(b []byte) (int, error) {
	n, err := pw.w.Write(b)
	pw.n += int64(n)
	pw.p.update(0, pw.n)
	return n, err
}
