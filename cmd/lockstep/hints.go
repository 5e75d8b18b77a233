package main

import (
	"errors"
	"fmt"
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
