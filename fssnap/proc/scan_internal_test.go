package proc

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"
)

// TestScanSkipsOlderProcesses: the scan for a run's processes reads the
// environment (the run's marker) of the processes that started after the
// run's first one, and not of those that were already there (none of them
// can be the run's); a marked process that started after the run is found.
func TestScanSkipsOlderProcesses(t *testing.T) {
	older := exec.Command("sleep", "30")
	if err := older.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { older.Process.Kill(); older.Wait() })
	time.Sleep(30 * time.Millisecond) // start times count clock ticks (10 ms)
	var mu sync.Mutex
	read := map[int]bool{}
	markerRead = func(pid int) { mu.Lock(); read[pid] = true; mu.Unlock() }
	t.Cleanup(func() { markerRead = nil })
	r, err := Start(context.Background(), Spec{Args: []string{"sleep", "30"}, CgroupRoot: "off"})
	if err != nil {
		t.Fatal(err)
	}
	if r.startTicks == 0 {
		t.Fatal("the run's start time was not read")
	}
	time.Sleep(30 * time.Millisecond)
	// Started after the run, outside its process group, with its marker:
	// what a daemon of the run that left the group looks like.
	marked := exec.Command("sleep", "30")
	marked.Env = append(os.Environ(), EnvMarker+"="+r.ID)
	if err := marked.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { marked.Process.Kill(); marked.Wait() })
	found := map[int]bool{}
	for _, p := range r.scan() {
		found[p.PID] = true
	}
	mu.Lock()
	readOlder, readMarked := read[older.Process.Pid], read[marked.Process.Pid]
	mu.Unlock()
	if readOlder || found[older.Process.Pid] {
		t.Errorf("the process started before the run was read (%v) or found (%v)", readOlder, found[older.Process.Pid])
	}
	if !readMarked || !found[marked.Process.Pid] || !found[r.proc.Pid] {
		t.Errorf("marked process read %v, found %v; the run's own found %v", readMarked, found[marked.Process.Pid], found[r.proc.Pid])
	}
	r.proc.Kill()
	r.Wait(context.Background())
	r.Close()
}

// TestKillWaitsForAProcessMidExec: a process of the run that left its
// group (setsid) is known by the marker in its environment, which reads
// as empty for a moment while it execs. The cleanup took such a process
// for nobody's, counted its scans as quiet and returned with it alive
// (TestRandomizedResidue, a loaded CI machine: "1 processes of the run"
// after the rollback). It now scans again until it can tell.
func TestKillWaitsForAProcessMidExec(t *testing.T) {
	r, err := Start(context.Background(), Spec{Args: []string{"sleep", "30"}, CgroupRoot: "off"})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	time.Sleep(30 * time.Millisecond) // start times count clock ticks (10 ms)
	escaped := exec.Command("sleep", "30")
	escaped.Env = append(os.Environ(), EnvMarker+"="+r.ID)
	if err := escaped.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { escaped.Process.Kill(); escaped.Wait() })
	// Its environment reads as empty for its first 20 reads, as in the
	// middle of an exec.
	var mu sync.Mutex
	reads := 0
	environRead = func(pid int) ([]byte, error) {
		if pid == escaped.Process.Pid {
			mu.Lock()
			reads++
			n := reads
			mu.Unlock()
			if n <= 20 {
				return nil, nil
			}
		}
		return os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	}
	t.Cleanup(func() {
		environRead = func(pid int) ([]byte, error) { return os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ") }
	})
	r.proc.Kill()
	if _, err := r.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if p, ok := readStat(escaped.Process.Pid); ok && p.State != "Z" {
		mu.Lock()
		n := reads
		mu.Unlock()
		t.Fatalf("the run's escaped process is alive after the cleanup (state %s; its environment read %d times)", p.State, n)
	}
}
