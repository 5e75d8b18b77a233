package web

import (
	"bufio"
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/lockstep-hq/lockstep"
)

// FuzzReadCommands: the ref-update commands of a pushed request never
// panic the parser, and whatever it accepts is three fields per command
// with known error codes otherwise. `go test` runs the seeds.
func FuzzReadCommands(f *testing.F) {
	pkt := func(s string) string { return fmt.Sprintf("%04x%s", len(s)+4, s) }
	zero := lockstep.ZeroOID
	one := strings.Repeat("1", 40)
	f.Add([]byte(pkt(zero+" "+one+" refs/heads/main\x00report-status atomic\n") + "0000PACK"))
	f.Add([]byte(pkt(one+" "+zero+" refs/heads/x\n") + pkt(zero+" "+one+" refs/heads/y\n") + "0000"))
	f.Add([]byte(pkt("shallow "+one+"\n") + "0000"))
	f.Add([]byte("0003"))
	f.Add([]byte("zzzz"))
	f.Add([]byte("0000"))
	f.Add([]byte("ffff" + strings.Repeat("a", 100)))
	f.Fuzz(func(t *testing.T, data []byte) {
		cmds, _, err := readCommands(bufio.NewReader(bytes.NewReader(data)))
		if err != nil {
			if c := lockstep.ErrorCode(err); c != lockstep.EINVALID && c != lockstep.ETOOLARGE {
				t.Fatalf("error code %q: %v", c, err)
			}
			return
		}
		for _, c := range cmds {
			if c.Old == "" || c.New == "" || c.Ref == "" || strings.ContainsAny(c.Ref, " \x00") {
				t.Fatalf("accepted malformed command %+v", c)
			}
		}
	})
}

// FuzzGitCapsLearn: any advertisement git (or a broken git) prints is
// either learned as the capabilities around the symref or ignored, never
// a panic; a learned set rebuilds the input's capabilities exactly.
func FuzzGitCapsLearn(f *testing.F) {
	pkt := func(s string) string { return fmt.Sprintf("%04x%s", len(s)+4, s) }
	one := strings.Repeat("1", 40)
	caps := "multi_ack thin-pack side-band no-done symref=HEAD:refs/heads/main filter object-format=sha1 agent=git/2.39.5"
	f.Add([]byte(pkt(one + " HEAD\x00" + caps + "\n")))
	f.Add([]byte(pkt(one+" HEAD\x00symref=HEAD:refs/heads/x\n") + "0000"))
	f.Add([]byte(pkt(one + " refs/heads/main\x00ofs-delta\n")))
	f.Add([]byte("0000"))
	f.Add([]byte("00ff"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var g gitCaps
		g.learn(data)
		got := g.caps("refs/heads/main")
		if got == "" {
			return
		}
		if !strings.Contains(got, " symref=HEAD:refs/heads/main") || strings.Count(got, "symref=") != 1 {
			t.Fatalf("learned %q from %q", got, data)
		}
	})
	var g gitCaps
	g.learn([]byte(pkt(one + " HEAD\x00" + caps + "\n")))
	if got := g.caps("refs/heads/main"); got != caps {
		f.Fatalf("caps(main) = %q, want git's %q", got, caps)
	}
	if got, want := g.caps("refs/heads/dev"), strings.Replace(caps, "refs/heads/main", "refs/heads/dev", 1); got != want {
		f.Fatalf("caps(dev) = %q, want %q", got, want)
	}
}
