package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/api"
	"github.com/lockstep-hq/lockstep/client"
	"github.com/lockstep-hq/lockstep/internal/e2ekit"
)

// keyScan is a command that prints, for its ancestors and every process
// they started (the runner, the run's egress proxy), each readable
// LOCKSTEP_KEY in their /proc/PID/environ, and the ancestors it walked.
const keyScan = `anc=""; p=$$
while [ "$p" -gt 1 ]; do anc="$anc $p"; p=$(awk '{print $4}' /proc/$p/stat); done
echo "ancestors:$anc "
for d in /proc/[0-9]*; do
  pid=${d#/proc/}; pp=$(awk '{print $4}' $d/stat 2>/dev/null)
  for a in $anc; do
    if [ "$pp" = "$a" ] || [ "$pid" = "$a" ]; then
      tr '\0' '\n' < $d/environ 2>/dev/null | grep '^LOCKSTEP_KEY' | sed "s|^|found in $pid: |"
      break
    fi
  done
done
true`

// TestRunnerKeysNotReadableByCommands: a runner runs an agent's command
// as its own user. Its key was in its environment, readable by the
// command from /proc/$PPID/environ, and the run's egress proxy held the
// job's key the same way: with the runner key a command could take
// other workspaces' jobs and their keys. The runner and the proxy are
// now not dumpable (procenv.Hide), so those files are the kernel's.
func TestRunnerKeysNotReadableByCommands(t *testing.T) {
	s := e2ekit.StartServer(t, e2ekit.ServerOpts{})
	s.CreateRepo(t, "shop")
	s.PushWith(t, s.AdminKey, "shop", e2ekit.PushQuery("main", "", "force=true"), map[string]string{"a.txt": "a\n"})
	agentKey := s.CreateKey(t, "agent-sec", "agent")
	runnerKey := s.CreateKey(t, "box-sec", "runner")
	ctx := context.Background()
	agent := client.New(s.URL, agentKey.Secret)
	if _, err := agent.Fork(ctx, "shop", "sec"); err != nil {
		t.Fatal(err)
	}
	// The runner runs as an unprivileged user, as it should: root reads
	// every process's memory whatever this change does. Run as root, the
	// test starts it as nobody, in directories of its own.
	home := t.TempDir()
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		cred = &syscall.Credential{Uid: 65534, Gid: 65534}
		d, err := os.MkdirTemp(e2ekit.TmpRoot, "nobody-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(d) })
		// The binaries' directory and this one are reachable by it.
		for _, p := range []string{filepath.Dir(e2ekit.Binary), e2ekit.TmpRoot, d} {
			if err := os.Chmod(p, 0o711); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chown(d, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		home = d
	}
	dirs := map[string]string{}
	for _, n := range []string{"state", "roots", "work", "cache", "tmp"} {
		dirs[n] = filepath.Join(home, n)
		if err := os.Mkdir(dirs[n], 0o700); err != nil {
			t.Fatal(err)
		}
		if cred != nil {
			if err := os.Chown(dirs[n], 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}
	}
	runner := exec.Command(e2ekit.Binary, "runner", "--jobs", "--workspaces", "sec", "--name", "sec-box",
		"--driver", "copy", "--contain", "dir", "--state-root", dirs["state"], "--instance-roots", dirs["roots"], "--work-dir", dirs["work"])
	runner.Env = append(e2ekit.CleanEnv(), "LOCKSTEP_URL="+s.URL, "LOCKSTEP_KEY="+runnerKey.Secret, "XDG_CACHE_HOME="+dirs["cache"], "TMPDIR="+dirs["tmp"], "HOME="+home)
	runner.Dir = home
	runner.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	startJobRunner(t, runner)
	var lines []string
	job, err := agent.ExecuteRun(ctx, "sec", api.RunJobRequest{Command: []string{"sh", "-c", keyScan}}, func(l lockstep.RunJobLine) { lines = append(lines, l.Text) })
	if err != nil || job.State != lockstep.JobDone || job.Result == nil || job.Result.ExitCode != 0 {
		t.Fatalf("job: %+v, %v", job, err)
	}
	text := strings.Join(lines, "\n")
	if !strings.Contains(text, " "+strconv.Itoa(runner.Process.Pid)+" ") {
		t.Fatalf("the scan did not walk up to the runner (pid %d):\n%s", runner.Process.Pid, text)
	}
	if strings.Contains(text, "found in") || strings.Contains(text, runnerKey.Secret) {
		t.Errorf("the command read a key from another process's environment:\n%s", text)
	}
}
