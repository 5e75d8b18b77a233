package txrun_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep/fssnap"
	"github.com/lockstep-hq/lockstep/fssnap/internal/fstest"
	"github.com/lockstep-hq/lockstep/fssnap/proc"
	"github.com/lockstep-hq/lockstep/fssnap/txrun"
)

// recorder is a Checkpointer that records calls.
type recorder struct {
	mu      sync.Mutex
	calls   []string
	n       int
	failure *txrun.Failure // what the last restore reported
}

func (r *recorder) Checkpoint(ctx context.Context, fs string) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n++
	id := fmt.Sprintf("cp%d", r.n)
	r.calls = append(r.calls, "checkpoint "+fs+" -> "+id)
	return id, nil
}

func (r *recorder) Restore(ctx context.Context, id string, f *txrun.Failure) (txrun.RestoreReport, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, "restore "+id)
	r.failure = f
	return txrun.RestoreReport{Commit: "c-" + id, DBRestored: true}, nil
}

func (r *recorder) Commit(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, "commit")
	return nil
}

func (r *recorder) last() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.calls) == 0 {
		return ""
	}
	return r.calls[len(r.calls)-1]
}

// alive lists live processes carrying the run's marker, independently of
// proc.Run.Residue.
func alive(runID string) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil || !strings.Contains(string(env), proc.EnvMarker+"="+runID) {
			continue
		}
		stat, _ := os.ReadFile("/proc/" + e.Name() + "/stat")
		if i := strings.LastIndexByte(string(stat), ')'); i > 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
			continue
		}
		cl, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		out = append(out, e.Name()+" "+strings.ReplaceAll(string(cl), "\x00", " "))
	}
	return out
}

// sameTree compares manifests on everything but inode, ctime and directory
// or symlink mtimes.
func sameTree(t *testing.T, want, got *fssnap.Manifest) bool {
	t.Helper()
	strip := func(m *fssnap.Manifest) map[string]fssnap.Entry {
		out := map[string]fssnap.Entry{}
		for _, e := range m.Entries {
			e.Ino, e.CtimeNs = 0, 0
			if e.Type != fssnap.TypeFile {
				e.MtimeNs = 0
			}
			out[e.Path] = e
		}
		return out
	}
	w, g := strip(want), strip(got)
	if reflect.DeepEqual(w, g) {
		return true
	}
	for p, we := range w {
		if ge, ok := g[p]; !ok {
			t.Errorf("missing %s", p)
		} else if ge != we {
			t.Errorf("differs %s: want %+v got %+v", p, we, ge)
		}
	}
	for p := range g {
		if _, ok := w[p]; !ok {
			t.Errorf("extra %s", p)
		}
	}
	return false
}

func TestRunSuccessAndFailure(t *testing.T) {
	drv, dir, opts := fstest.Driver(t, fssnap.NameCopy, func(d string) { fstest.GenTree(t, d, 30, 100, 7) })
	rec := &recorder{}
	ctx := context.Background()
	rep, err := txrun.Run(ctx, txrun.Options{Workspace: "ws", Dir: dir, Args: []string{"sh", "-c", "echo ok > out.txt"},
		Driver: drv, Snap: opts, Checkpointer: rec, CommitOnSuccess: true})
	if err != nil || !rep.Succeeded || rep.RolledBack || !rep.Committed || rec.last() != "commit" {
		t.Fatalf("success run: %v %+v %v", err, rep, rec.calls)
	}
	if _, err := os.Stat(dir + "/out.txt"); err != nil {
		t.Fatal("success run lost its output")
	}
	before, _ := fssnap.BuildManifest(dir, nil)
	rep, err = txrun.Run(ctx, txrun.Options{Workspace: "ws", Dir: dir, Args: []string{"sh", "-c",
		"rm -rf d*; echo x > new; seq 1 3000; echo 'disk full: giving up' >&2; setsid sleep 1000 & exit 2"},
		Driver: drv, Snap: opts, Checkpointer: rec, OutputTail: 100})
	if err != nil || rep.Succeeded || !rep.RolledBack || !rep.Purity.Clean || rep.Status.ExitCode != 2 {
		t.Fatalf("failed run: %v %+v", err, rep)
	}
	// The server hears why: exit code, duration and the output's tail.
	f := rec.failure
	if f == nil || f.Status.ExitCode != 2 || f.Status.DurationMs <= 0 || f.StderrTail != "disk full: giving up\n" ||
		!strings.HasSuffix(f.StdoutTail, "2999\n3000\n") || len(f.StdoutTail) > 100 || strings.Join(f.Command, " ") != "sh -c "+rep.Command[2] {
		t.Fatalf("restore got failure %+v", f)
	}
	if rep.StdoutTail != f.StdoutTail || rep.StderrTail != f.StderrTail {
		t.Fatalf("report tails %q / %q differ from the failure's", rep.StdoutTail, rep.StderrTail)
	}
	if rep.Restored == nil || !rep.Restored.DBRestored || rec.last() != "restore "+rep.Checkpoint {
		t.Fatalf("server restore not called: %+v %v", rep.Restored, rec.calls)
	}
	after, _ := fssnap.BuildManifest(dir, nil)
	sameTree(t, before, after)
	var names []string
	for _, s := range rep.Steps {
		names = append(names, s.Name)
	}
	if got := strings.Join(names, ","); got != "snapshot,manifest,checkpoint,run,restore_fs,verify,restore_checkpoint" {
		t.Fatalf("steps %s", got)
	}
}

// TestResidueDetected makes a driver that restores nothing: the run must
// fail loudly with ErrResidue.
func TestResidueDetected(t *testing.T) {
	drv, dir, opts := fstest.Driver(t, fssnap.NameCopy, func(d string) { fstest.GenTree(t, d, 10, 100, 3) })
	rep, err := txrun.Run(context.Background(), txrun.Options{Dir: dir, Args: []string{"sh", "-c", "echo x > new; exit 1"},
		Driver: noRestore{drv}, Snap: opts})
	if !errors.Is(err, txrun.ErrResidue) || rep.Purity.Clean || len(rep.Purity.Files.Added) != 1 {
		t.Fatalf("err %v purity %+v", err, rep.Purity)
	}
}

type noRestore struct{ fssnap.Driver }

// wrongRestore restores, then writes where it should not: a new file in a
// directory the run did not touch, whose times it then sets back, and a
// same-size rewrite of an untouched file, its mtime set back.
type wrongRestore struct {
	fssnap.Driver
	subdir, file string
}

func (w wrongRestore) Restore(ctx context.Context, dir, id string) error {
	if err := w.Driver.Restore(ctx, dir, id); err != nil {
		return err
	}
	fi, err := os.Lstat(w.subdir)
	if err != nil {
		return err
	}
	if err := os.WriteFile(w.subdir+"/stray", []byte("s"), 0o644); err != nil {
		return err
	}
	if err := os.Chtimes(w.subdir, fi.ModTime(), fi.ModTime()); err != nil {
		return err
	}
	data, err := os.ReadFile(w.file)
	if err != nil {
		return err
	}
	ffi, _ := os.Lstat(w.file)
	data[0] ^= 1
	if err := os.WriteFile(w.file, data, 0o644); err != nil {
		return err
	}
	return os.Chtimes(w.file, ffi.ModTime(), ffi.ModTime())
}

// TestWrongRestoreDetected: the verify after a restore reads only the
// directories whose stat changed since the take (their names are the
// manifest's otherwise), and it still catches a restore that writes in a
// directory the run did not touch, even with the directory's and the
// file's mtime set back (forensics on: the run's comparison is shared).
func TestWrongRestoreDetected(t *testing.T) {
	drv, dir, opts := fstest.Driver(t, fssnap.NameCopy, func(d string) { fstest.GenTree(t, d, 40, 100, 5) })
	time.Sleep(50 * time.Millisecond) // past the racy window: the take's names are trusted
	m, err := fssnap.BuildManifest(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	var subdir, file string
	for _, e := range m.Entries {
		if e.Type == fssnap.TypeDir && e.Path != "." && subdir == "" {
			subdir = dir + "/" + e.Path
		}
		if e.Type == fssnap.TypeFile && e.Size > 0 && strings.Contains(e.Path, "/") && file == "" {
			file = dir + "/" + e.Path
		}
	}
	if subdir == "" || file == "" {
		t.Fatal("tree without a subdirectory or a file in one")
	}
	rep, err := txrun.Run(context.Background(), txrun.Options{Dir: dir, Args: []string{"sh", "-c", "echo x > new; exit 1"},
		Driver: wrongRestore{drv, subdir, file}, Snap: opts, Forensics: t.TempDir()})
	if !errors.Is(err, txrun.ErrResidue) || rep.Purity.Clean {
		t.Fatalf("err %v purity %+v", err, rep.Purity)
	}
	rel := func(p string) string { return strings.TrimPrefix(p, dir+"/") }
	if f := rep.Purity.Files; !reflect.DeepEqual(f.Added, []string{rel(subdir) + "/stray"}) || len(f.Removed) != 0 ||
		len(f.Changed) != 1 || f.Changed[0].Path != rel(file) || f.Changed[0].What != "content" {
		t.Fatalf("residue %+v, want %s/stray added and %s's content changed", f, rel(subdir), rel(file))
	}
}

func (noRestore) Restore(context.Context, string, string) error { return nil }

// TestRandomizedResidue: 200 failing runs per driver, each doing random
// filesystem damage and leaving background processes; after every rollback
// the tree must equal the initial one and no process may survive.
func TestRandomizedResidue(t *testing.T) {
	runs := 200
	if testing.Short() {
		runs = 20
	}
	for di, name := range fstest.Drivers {
		t.Run(name, func(t *testing.T) {
			drv, dir, opts := fstest.Driver(t, name, func(d string) { fstest.GenTree(t, d, 60, 300, uint64(di+1)) })
			initial, err := fssnap.BuildManifest(dir, nil)
			if err != nil {
				t.Fatal(err)
			}
			rnd := rand.New(rand.NewPCG(42, uint64(di)))
			rec := &recorder{}
			pure, hashed := 0, 0
			modes := map[string]int{}
			var restoreMs, verifyMs float64
			for i := 0; i < runs; i++ {
				script, timeout := genScript(rnd, initial, i)
				cg := "off"
				if i%2 == 0 {
					cg = "" // auto-detect: cgroup v2 when mounted
				}
				rep, err := txrun.Run(context.Background(), txrun.Options{
					Dir: dir, Args: []string{"sh", "-c", script}, Timeout: timeout,
					Driver: drv, Snap: opts, Checkpointer: rec, KillGrace: 20 * time.Millisecond, CgroupRoot: cg,
				})
				if err != nil {
					t.Fatalf("run %d: %v\nscript:\n%s\nreport: %+v", i, err, script, rep)
				}
				if rep.Succeeded || !rep.RolledBack {
					t.Fatalf("run %d should have failed: %+v", i, rep.Status)
				}
				full, err := fssnap.BuildManifest(dir, nil)
				if err != nil {
					t.Fatal(err)
				}
				if !sameTree(t, initial, full) {
					t.Fatalf("run %d: tree differs after rollback (report said %+v)\nscript:\n%s", i, rep.Purity, script)
				}
				if a := alive(rep.RunID); len(a) > 0 || len(rep.Purity.Processes) > 0 {
					t.Fatalf("run %d: processes survived: %v %+v", i, a, rep.Purity.Processes)
				}
				if !rep.Purity.Clean {
					t.Fatalf("run %d: purity %+v", i, rep.Purity)
				}
				pure++
				modes[rep.Status.Isolation]++
				hashed += rep.Purity.Files.Hashed
				for _, s := range rep.Steps {
					switch s.Name {
					case "restore_fs":
						restoreMs += s.DurationMs
					case "verify":
						verifyMs += s.DurationMs
					}
				}
				if err := drv.Drop(dir, rep.FSSnapshot); err != nil {
					t.Fatal(err)
				}
			}
			t.Logf("%s: %d/%d runs pure (isolation %v); mean restore %.2f ms, verify %.2f ms, %.1f files hashed per verify",
				name, pure, runs, modes, restoreMs/float64(runs), verifyMs/float64(runs), float64(hashed)/float64(runs))
		})
	}
}

// genScript writes a shell script that damages the tree described by m at
// random and leaves background processes; it always fails (exit, signal or
// timeout).
func genScript(r *rand.Rand, m *fssnap.Manifest, i int) (string, time.Duration) {
	var files, dirs []string
	for _, e := range m.Entries {
		switch e.Type {
		case fssnap.TypeFile:
			files = append(files, e.Path)
		case fssnap.TypeDir:
			dirs = append(dirs, e.Path)
		}
	}
	pick := func(s []string) string { return s[r.IntN(len(s))] }
	q := func(p string) string { return "'" + p + "'" }
	var b strings.Builder
	n := 0
	fresh := func() string { n++; return fmt.Sprintf("n%d_%d", i, n) }
	ops := 4 + r.IntN(8)
	for k := 0; k < ops; k++ {
		f, d := pick(files), pick(dirs)
		switch r.IntN(14) {
		case 0:
			nd := path.Join(d, fresh(), fresh())
			fmt.Fprintf(&b, "mkdir -p %s && printf 'new %d' > %s/f\n", q(nd), k, q(nd))
		case 1:
			fmt.Fprintf(&b, "printf 'more' >> %s\n", q(f))
		case 2: // same size, same mtime: only ctime betrays it
			fmt.Fprintf(&b, "touch -r %s ref.$$; printf 'Z' | dd of=%s bs=1 conv=notrunc 2>/dev/null; touch -r ref.$$ %s; rm -f ref.$$\n", q(f), q(f), q(f))
		case 3:
			fmt.Fprintf(&b, "rm -f %s\n", q(f))
		case 4:
			if d != "." {
				fmt.Fprintf(&b, "rm -rf %s\n", q(d))
			}
		case 5:
			fmt.Fprintf(&b, "chmod %s %s\n", pick([]string{"600", "755", "000", "4755", "444"}), q(f))
		case 6:
			fmt.Fprintf(&b, "chmod %s %s\n", pick([]string{"700", "555", "1777"}), q(d))
		case 7:
			fmt.Fprintf(&b, "mv %s %s\n", q(f), q(path.Join(pick(dirs), fresh())))
		case 8:
			if d != "." {
				fmt.Fprintf(&b, "mv %s %s\n", q(d), q(fresh()))
			}
		case 9:
			fmt.Fprintf(&b, "ln -sfn %s %s\n", q(pick([]string{"../x", f, "/etc/passwd"})), q(path.Join(d, fresh())))
		case 10: // file replaced by a symlink, or by a directory
			if r.IntN(2) == 0 {
				fmt.Fprintf(&b, "rm -f %s && ln -s elsewhere %s\n", q(f), q(f))
			} else {
				fmt.Fprintf(&b, "rm -f %s && mkdir %s && echo in > %s/x\n", q(f), q(f), q(f))
			}
		case 11:
			fmt.Fprintf(&b, "truncate -s 0 %s\n", q(f))
		case 12:
			fmt.Fprintf(&b, "touch -d '2001-02-03 04:05:06' %s\n", q(f))
		case 13:
			fmt.Fprintf(&b, "mkfifo %s\n", q(path.Join(d, fresh())))
		}
	}
	bg := 1 + r.IntN(3)
	for k := 0; k < bg; k++ {
		switch r.IntN(6) {
		case 0:
			b.WriteString("sleep 1000 &\n")
		case 1:
			b.WriteString("setsid sleep 1000 &\n")
		case 2:
			b.WriteString("nohup sleep 1000 >/dev/null 2>&1 &\n")
		case 3: // double fork, new session, cwd inside the tree
			fmt.Fprintf(&b, "(cd %s && setsid sh -c 'sleep 1000 &' &)\n", q(pick(dirs)))
		case 4: // keeps writing into the tree until killed
			b.WriteString("(while :; do echo x >> bg.log; sleep 0.002; done) &\n")
		case 5: // holds a file open inside the tree
			fmt.Fprintf(&b, "(exec 3>%s; sleep 1000) &\n", q(fresh()))
		}
	}
	b.WriteString("sleep 0.01\n")
	switch {
	case i%20 == 7:
		b.WriteString("sleep 1000\n") // killed by the timeout
		return b.String(), 150 * time.Millisecond
	case i%20 == 13:
		b.WriteString("kill -9 $$\n")
	default:
		fmt.Fprintf(&b, "exit %d\n", 1+r.IntN(100))
	}
	return b.String(), 30 * time.Second
}
