package bench

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"
)

// runSteps collects the step durations of `lockstep run --json` reports,
// by step name, in the order the steps first appeared.
type runSteps struct {
	order []string
	ms    map[string][]float64
}

func (s *runSteps) add(name string, ms float64) {
	if s.ms == nil {
		s.ms = map[string][]float64{}
	}
	if _, ok := s.ms[name]; !ok {
		s.order = append(s.order, name)
	}
	s.ms[name] = append(s.ms[name], ms)
}

// String is "name median, …" in milliseconds.
func (s *runSteps) String() string {
	parts := make([]string, 0, len(s.order))
	for _, name := range s.order {
		parts = append(parts, fmt.Sprintf("%s %.1f", name, newDist(s.ms[name]).Median))
	}
	return strings.Join(parts, ", ")
}

// lockstepRun runs the whole `lockstep run --workspace ws --dir dir --json
// [extra] -- cmd` process once against s and returns its wall time. It
// fails when the exit status is not wantExit or the rollback left residue;
// with record, the report's step durations go to steps.
func (b *bencher) lockstepRun(s *benchServer, ws, dir string, extra []string, cmd string, wantExit int, steps *runSteps, record bool) (time.Duration, error) {
	args := append([]string{"run", "--workspace", ws, "--dir", dir, "--json"}, extra...)
	args = append(args, "--", cmd)
	c := b.cmd(dir, b.bin, args...)
	c.Env = append(slices.Clone(b.env), "LOCKSTEP_URL="+s.url, "LOCKSTEP_KEY="+s.key)
	var stderr bytes.Buffer
	c.Stderr = &stderr
	t := time.Now()
	out, err := c.Output()
	d := time.Since(t)
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		return 0, err
	}
	if code != wantExit {
		return 0, fmt.Errorf("lockstep run -- %s: exit %d: %s", cmd, code, stderr.String())
	}
	var rep struct {
		Purity struct {
			Checked, Clean bool
		} `json:"purity"`
		Steps []struct {
			Name       string  `json:"name"`
			DurationMs float64 `json:"duration_ms"`
		} `json:"steps"`
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		return 0, fmt.Errorf("run report: %w: %s", err, out)
	}
	if rep.Purity.Checked && !rep.Purity.Clean {
		return 0, fmt.Errorf("lockstep run -- %s: rollback left residue: %s", cmd, stderr.String())
	}
	if record {
		for _, st := range rep.Steps {
			steps.add(st.Name, st.DurationMs)
		}
	}
	return d, nil
}

// benchRunBaseline is `lockstep run -- true` and `-- false` with the
// run's defaults (detected driver, --contain instance, report posted to
// the server) against the naive checkpoint a user could script with git
// on the same directory: `git stash -u` … `git stash pop` (true), and
// `git stash -u` … `git reset --hard && git clean -fd && git stash pop`
// (false). Both run in alternation (ABBA) on one directory holding the
// small tree as a git repository with 10 files modified and 50 untracked
// (so that the stash has something to save), against the default server
// (embedded SQLite) and one workspace of a repository of that tree.
func (b *bencher) benchRunBaseline() error {
	s, err := b.server(true)
	if err != nil {
		return err
	}
	st, err := b.inc(true)
	if err != nil {
		return err
	}
	dir := b.path("run-stash")
	nbytes, err := b.small.write(dir)
	if err != nil {
		return err
	}
	if _, err := b.timeGit(dir, []string{"init", "-q", "-b", "main"}, []string{"add", "-A"}, []string{"commit", "-q", "-m", "init"}); err != nil {
		return err
	}
	for j := 0; j < 10; j++ {
		if _, err := editLine(dir, b.small, 3+j*17, 1, fmt.Sprintf("uncommitted %d", j)); err != nil {
			return err
		}
	}
	for j := 0; j < 50; j++ {
		if err := os.WriteFile(b.path("run-stash", fmt.Sprintf("untracked-%02d.txt", j)), []byte(strings.Repeat("u", 4096)), 0o644); err != nil {
			return err
		}
	}
	ws := "run-stash-ws"
	if _, err := s.c.Fork(b.ctx, st.repo, ws); err != nil {
		return err
	}
	// Only the state roots are the bench's own (nothing lands in the
	// machine's /var/lib/lockstep); driver and containment are detected
	// as for a user's first run.
	extra := []string{"--state-root", b.path("stash-state")}
	n := max(5, b.o.iters/2)
	for _, x := range []struct {
		name, cmd string
		wantExit  int
		gitCmd    string
		undo      [][]string
	}{
		{"run-baseline-true", "true", 0, "git stash -u; true; git stash pop", nil},
		{"run-baseline-false", "false", 1, "git stash -u; false; git reset --hard && git clean -fd && git stash pop",
			[][]string{{"reset", "-q", "--hard"}, {"clean", "-q", "-fd"}}},
	} {
		steps := &runSteps{}
		load0 := loadAvg()
		ls, gd, err := b.measurePair(x.name, 1, n, func(i int) (time.Duration, error) {
			return b.lockstepRun(s, ws, dir, extra, x.cmd, x.wantExit, steps, i >= 1)
		}, func(i int) (time.Duration, error) {
			t := time.Now()
			if _, err := b.git(dir, "stash", "push", "-u", "-q"); err != nil {
				return 0, err
			}
			b.cmd(dir, x.cmd).Run()
			cmds := append(slices.Clone(x.undo), []string{"stash", "pop", "-q"})
			if _, err := b.timeGit(dir, cmds...); err != nil {
				return 0, err
			}
			return time.Since(t), nil
		})
		if err != nil {
			return err
		}
		r := b.add(&benchRow{Name: x.name, Size: b.small.describe(nbytes) + ", 10 modified + 50 untracked", LS: ls, Git: gd, GitCmd: x.gitCmd, Target: "≤ 1.5× git"})
		r.check(fmt.Sprintf("%.2f× > 1.5×", r.Ratio), r.Ratio <= 1.5)
		r.note("whole `lockstep run --workspace W --dir D -- %s` process (defaults: detected driver, --contain instance, report posted) on %s, alternated with git on the same directory", x.cmd, b.fsType)
		r.note("min–median–max: lockstep %.1f–%.1f–%.1f ms, git %.1f–%.1f–%.1f ms; load average %s → %s", ls.Min, ls.Median, ls.Max, gd.Min, gd.Median, gd.Max, load0, loadAvg())
		r.note("step medians (ms): %s", steps)
	}
	return nil
}

// loadAvg is the 1-minute load average, "?" when unknown.
func loadAvg() string {
	la, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(la)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "?"
}
