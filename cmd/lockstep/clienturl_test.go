package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestServerURLWithoutScheme: LOCKSTEP_URL=127.0.0.1:7070 (the address
// `lockstep serve` prints, without http://) is a likely first mistake. It
// printed Go's URL parser ("first path segment in URL cannot contain
// colon") or, for localhost:7070, retried six times before "unsupported
// protocol scheme". It is bad input: one line naming the setting and the
// form wanted, exit status 2, no request made.
func TestServerURLWithoutScheme(t *testing.T) {
	for _, u := range []string{"127.0.0.1:7070", "localhost:7070", "ftp://x", "http://"} {
		getenv := func(k string) string {
			switch k {
			case "LOCKSTEP_URL":
				return u
			case "LOCKSTEP_KEY":
				return "lsk_deadbeef_notakey"
			}
			return ""
		}
		var out, errb bytes.Buffer
		err := run(context.Background(), []string{"whoami"}, getenv, strings.NewReader(""), &out, &errb)
		if got := exitCode(err); got != 2 {
			t.Errorf("LOCKSTEP_URL=%s: exit status %d (%v), want 2", u, got, err)
		}
		if err == nil || !strings.Contains(err.Error(), "LOCKSTEP_URL") || !strings.Contains(err.Error(), "http://") {
			t.Errorf("LOCKSTEP_URL=%s: error %v should name LOCKSTEP_URL and the http:// form", u, err)
		}
		if strings.Contains(errb.String(), "retrying") {
			t.Errorf("LOCKSTEP_URL=%s: retried a malformed URL: %s", u, errb.String())
		}
	}
}
