package bench

import (
	"io"
	"os"
	"path/filepath"
	"time"
)

// benchStartup measures the start of the client build on a client path:
// `lockstep version` (no server, no network) against `git --version`,
// interleaved. Every package initialiser of the binary runs before main,
// so this is what each client command pays before doing anything
// (docs/benchmarks.md, "Performance, third round (client)" and "CLI
// start-up: two builds"). With the server build beside it
// (lockstep-server), that one's `version` too, interleaved with the
// client's, in a note.
func (b *bencher) benchStartup() error {
	run := func(name string, args ...string) func(int) (time.Duration, error) {
		return func(int) (time.Duration, error) {
			c := b.cmd(b.root, name, args...)
			c.Stdout, c.Stderr = io.Discard, io.Discard
			t := time.Now()
			err := c.Run()
			return time.Since(t), err
		}
	}
	ls, gd, err := b.measurePair("cli-startup", 5, 3*b.o.iters, run(b.bin, "version"), run("git", "--version"))
	if err != nil {
		return err
	}
	r := b.add(&benchRow{Name: "cli-startup", LS: ls, Git: gd, GitCmd: "git --version", Target: "≤ 3× git"})
	r.check("more than 3× git", ls.Median <= 3*gd.Median)
	r.note("`lockstep version`: process start, every package initialiser of the client build, main")
	// The server build beside it (what every command paid when the one
	// binary linked the server), interleaved with the client build.
	srv := filepath.Join(filepath.Dir(b.bin), "lockstep-server")
	if st, err := os.Stat(srv); err == nil && !st.IsDir() {
		sd, cd, err := b.measurePair("cli-startup-server-build", 5, 3*b.o.iters, run(srv, "version"), run(b.bin, "version"))
		if err != nil {
			return err
		}
		r.note("the server build (%s version): median %.2f ms (min %.2f, max %.2f) where the client build read %.2f ms, interleaved",
			filepath.Base(srv), sd.Median, sd.Min, sd.Max, cd.Median)
	}
	return nil
}
