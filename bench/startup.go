package bench

import (
	"io"
	"time"
)

// benchStartup measures the start of the one binary on a client path:
// `lockstep version` (no server, no network) against `git --version`,
// interleaved. Every package initialiser of the binary runs before main,
// so this is what each client command pays before doing anything
// (docs/benchmarks.md, "Performance, third round (client)").
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
	r.note("`lockstep version`: process start, every package initialiser of the one binary, main")
	return nil
}
