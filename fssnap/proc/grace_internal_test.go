package proc

import (
	"context"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// TestGraceKillAfterWaitKillsNothing: the kill that terminate schedules
// after the grace period does nothing once Wait is over. Before, when the
// grace period and the end of Wait fell together, it could run after the
// run was closed and kill the processes of the next run that carried the
// same marker, process group or (reused) mount namespace number: the
// randomized contained runs saw a run killed 9 ms after it started. Here
// a process with the finished run's marker stands for the next run's.
func TestGraceKillAfterWaitKillsNothing(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the run gets its own mount namespace, as a contained run does")
	}
	r, err := Start(context.Background(), Spec{Args: []string{"sleep", "0.1"}, KillGrace: time.Millisecond, Cloneflags: syscall.CLONE_NEWNS})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	r.Close()
	if r.mntns == "" {
		t.Fatal("the run has no mount namespace of its own: the test would prove nothing")
	}
	next := exec.Command("sleep", "30")
	next.Env = append(os.Environ(), EnvMarker+"="+r.ID)
	if err := next.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { next.Process.Kill(); next.Wait() })
	r.graceKill()
	if err := next.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("the grace kill after Wait killed a process that is not the run's: %v", err)
	}
	var ws syscall.WaitStatus
	if pid, _ := syscall.Wait4(next.Process.Pid, &ws, syscall.WNOHANG, nil); pid != 0 {
		t.Fatalf("the grace kill after Wait killed a process that is not the run's: %v", ws)
	}
}
