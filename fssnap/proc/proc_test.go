package proc_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lockstep-hq/lockstep/fssnap/proc"
)

// cgroupRoot mounts a private cgroup2 hierarchy for the test, or skips.
func cgroupRoot(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("cgroup mode needs root")
	}
	dir := t.TempDir()
	if err := unix.Mount("cgroup2", dir, "cgroup2", 0, ""); err != nil {
		t.Skipf("mount cgroup2: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			t.Errorf("umount cgroup2: %v", err)
		}
	})
	return dir
}

func modes(t *testing.T) map[string]string {
	return map[string]string{proc.ModeSubreaper: "off", proc.ModeCgroup: cgroupRoot(t)}
}

// alive lists processes (not zombies) carrying the run's marker: an
// independent check of Residue.
func alive(t *testing.T, id string) []string {
	t.Helper()
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil || !strings.Contains(string(env), proc.EnvMarker+"="+id) {
			continue
		}
		stat, _ := os.ReadFile("/proc/" + e.Name() + "/stat")
		if i := strings.LastIndexByte(string(stat), ')'); i > 0 && strings.HasPrefix(string(stat[i+2:]), "Z") {
			continue
		}
		cl, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		out = append(out, e.Name()+" "+strings.ReplaceAll(string(cl), "\x00", " "))
	}
	return out
}

func TestDaemonsAreKilled(t *testing.T) {
	for mode, root := range modes(t) {
		t.Run(mode, func(t *testing.T) {
			script := `sleep 1000 & setsid sleep 1000 & nohup sleep 1000 >/dev/null 2>&1 &
(sh -c 'sleep 1000 &' &)
setsid sh -c 'setsid sleep 1000 & exit 0' &
sleep 0.05; exit 3`
			r, err := proc.Start(context.Background(), proc.Spec{Args: []string{"sh", "-c", script}, CgroupRoot: root})
			if err != nil {
				t.Fatal(err)
			}
			st, err := r.Wait(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			res := r.Residue()
			if err := r.Close(); err != nil {
				t.Fatal(err)
			}
			if st.ExitCode != 3 || st.Isolation != mode || st.Success() {
				t.Fatalf("status %+v", st)
			}
			if st.Leftover < 5 {
				t.Errorf("leftover = %d, want >= 5 background sleeps", st.Leftover)
			}
			if len(res) != 0 {
				t.Fatalf("residue: %+v", res)
			}
			if a := alive(t, r.ID); len(a) != 0 {
				t.Fatalf("still alive: %v", a)
			}
		})
	}
}

func TestTimeoutKillsTree(t *testing.T) {
	for mode, root := range modes(t) {
		t.Run(mode, func(t *testing.T) {
			script := `trap '' TERM; sleep 1000 & setsid sleep 1000 & sleep 1000`
			start := time.Now()
			r, err := proc.Start(context.Background(), proc.Spec{
				Args: []string{"sh", "-c", script}, CgroupRoot: root,
				Timeout: 100 * time.Millisecond, KillGrace: 50 * time.Millisecond,
			})
			if err != nil {
				t.Fatal(err)
			}
			st, err := r.Wait(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			res := r.Residue()
			r.Close()
			if !st.TimedOut || st.Signal == "" {
				t.Fatalf("status %+v, want timed out and signaled", st)
			}
			if time.Since(start) > 30*time.Second {
				t.Fatal("run was not stopped")
			}
			if len(res) != 0 {
				t.Fatalf("residue: %+v", res)
			}
			if a := alive(t, r.ID); len(a) != 0 {
				t.Fatalf("still alive: %v", a)
			}
		})
	}
}

func TestCancelAndSignal(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	r, err := proc.Start(ctx, proc.Spec{Args: []string{"sh", "-c", "sleep 1000 & kill -9 $$"}, CgroupRoot: "off"})
	if err != nil {
		t.Fatal(err)
	}
	st, err := r.Wait(ctx)
	cancel()
	if err != nil || st.Signal != "killed" || st.ExitCode != -1 {
		t.Fatalf("status %+v %v", st, err)
	}
	if res := r.Residue(); len(res) != 0 {
		t.Fatalf("residue %+v", res)
	}
	ctx, cancel = context.WithCancel(context.Background())
	r, err = proc.Start(ctx, proc.Spec{Args: []string{"sleep", "1000"}, CgroupRoot: "off"})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	st, err = r.Wait(ctx)
	if err != nil || !st.Canceled || st.Signal != "terminated" {
		t.Fatalf("status %+v %v", st, err)
	}
}

func TestRunCmd(t *testing.T) {
	st, res, err := proc.RunCmd(context.Background(), proc.Spec{Args: []string{"sh", "-c", "setsid sleep 1000 & exit 0"}})
	if err != nil || !st.Success() || st.Leftover != 1 || len(res) != 0 {
		t.Fatalf("%+v %+v %v", st, res, err)
	}
	t.Logf("auto-detected isolation: %s", st.Isolation)
}
