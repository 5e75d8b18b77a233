//go:build lockstep_server

package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestLoadFlags: `lockstep load` refuses bad settings before it sends a
// request, naming the flag (bench.TestLoad runs it against a server).
func TestLoadFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"load", "--urls", "ftp://x", "--key", "k"}, "--urls"},
		{[]string{"load", "--urls", " , ", "--key", "k"}, "no URL given"},
		{[]string{"load", "--urls", "http://127.0.0.1:1", "--key", "k", "--agents", "0"}, "--agents"},
		{[]string{"load", "--urls", "http://127.0.0.1:1", "--key", "k", "--duration", "10ms"}, "--duration"},
		{[]string{"load", "--urls", "http://127.0.0.1:1"}, "no API key"},
	} {
		var out, errb bytes.Buffer
		err := run(context.Background(), c.args, func(string) string { return "" }, strings.NewReader(""), &out, &errb)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("lockstep %s = %v, want an error naming %q", strings.Join(c.args, " "), err, c.want)
		}
	}
}
