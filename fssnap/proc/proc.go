// Package proc runs a command so that no process started by the run
// outlives it.
//
// Mechanisms, strongest first:
//
//   - cgroup: with a writable cgroup v2 hierarchy (auto-detected from
//     /proc/self/mountinfo, or Options.CgroupRoot), each run gets a child
//     cgroup and the command is started inside it atomically (clone3
//     CLONE_INTO_CGROUP). Every descendant stays in it whatever it does
//     (setsid, double fork, nohup), so cgroup.procs lists them and
//     cgroup.kill kills them all, race-free against forks.
//   - subreaper: without cgroups, the process makes itself a child
//     subreaper (PR_SET_CHILD_SUBREAPER, process-wide and permanent), so
//     orphans of the run are re-parented to it instead of init. The run's
//     processes are found by walking /proc: same process group, an
//     environment marker (LOCKSTEP_RUN_ID) inherited through fork and exec,
//     or descent from one of those. Processes are killed until none is left.
//     The scan repeats until several consecutive scans find nothing (a
//     child forked by a process exiting during a scan is seen by the next
//     one). A process that clears its environment, leaves the process group
//     and is re-parented outside the run escapes; a fork loop faster than
//     the scans could too. Use cgroups for a hard guarantee.
//
// In both modes the command has its own process group (Setpgid), the main
// process's exit status, the signal that ended it and whether the timeout
// fired are reported, and Residue proves that nothing is left.
package proc

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lockstep-hq/lockstep"
)

// EnvMarker is the environment variable that tags every process of a run.
const EnvMarker = "LOCKSTEP_RUN_ID"

// Isolation modes.
const (
	ModeCgroup    = "cgroup"
	ModeSubreaper = "subreaper"
)

// Spec describes one run.
type Spec struct {
	Args    []string      // program and arguments; Args[0] is looked up in PATH
	Dir     string        // working directory
	Env     []string      // environment (default os.Environ()); the marker is added
	Stdin   *os.File      // nil: /dev/null
	Stdout  *os.File      // nil: /dev/null
	Stderr  *os.File      // nil: /dev/null
	Timeout time.Duration // 0: none
	// KillGrace is how long SIGTERM is given to the process group on
	// timeout or cancellation before everything is killed. Default 200ms.
	KillGrace time.Duration
	// CgroupRoot is the cgroup v2 directory under which per-run cgroups
	// are created. "" detects one; "off" forces the subreaper mode.
	CgroupRoot string
	// Cloneflags are namespace flags the command is started with (e.g.
	// CLONE_NEWNS for a contained run). With CLONE_NEWNS every process
	// in the run's mount namespace belongs to the run, whatever it does
	// (setsid, double fork, a cleared environment).
	Cloneflags uintptr
	// UidMappings, GidMappings and AmbientCaps go with CLONE_NEWUSER (a
	// contained run's helper in an unprivileged user namespace): the
	// maps are written before the exec (setgroups denied), the ambient
	// capabilities survive it.
	UidMappings []syscall.SysProcIDMap
	GidMappings []syscall.SysProcIDMap
	AmbientCaps []uintptr
}

// Status is how a run ended.
type Status struct {
	ExitCode   int     `json:"exit_code"`        // -1 when killed by a signal
	Signal     string  `json:"signal,omitempty"` // e.g. "killed", "terminated"
	TimedOut   bool    `json:"timed_out"`
	Canceled   bool    `json:"canceled"`
	DurationMs float64 `json:"duration_ms"`
	Leftover   int     `json:"leftover"` // processes still alive when the main one exited, then killed
	Isolation  string  `json:"isolation"`
	CleanupMs  float64 `json:"cleanup_ms"`
}

// Success reports a zero exit without timeout or signal.
func (s Status) Success() bool {
	return s.ExitCode == 0 && s.Signal == "" && !s.TimedOut && !s.Canceled
}

// Process is one process of a run found alive.
type Process struct {
	PID     int    `json:"pid"`
	PPID    int    `json:"ppid"`
	State   string `json:"state"`
	Cmdline string `json:"cmdline"`
}

// Run is a started command.
type Run struct {
	ID   string
	spec Spec
	mode string
	cg   string // cgroup directory (cgroup mode)
	proc *os.Process
	pgid int

	mntns string // the run's own mount namespace (Cloneflags CLONE_NEWNS), e.g. "mnt:[4026532]"
	// nsfd holds the namespace until Close: while it is open its inode
	// number cannot be given to another run's namespace (whose processes
	// would then look like ours).
	nsfd *os.File

	mu    sync.Mutex
	ended bool         // Wait's last kill is done: nothing is the run's any more
	seen  map[int]bool // every pid ever attributed to the run, to reap it
	start time.Time
	done  chan struct{}
	// startTicks is the first process's start time (clock ticks after
	// boot; 0: unknown): every process the run made started at or after it.
	startTicks uint64
}

// Start starts spec. The caller must call Wait.
//
// Errors: invalid_argument for an empty command or one not found.
func Start(ctx context.Context, spec Spec) (*Run, error) {
	if len(spec.Args) == 0 {
		return nil, lockstep.Errorf(lockstep.EINVALID, "empty command")
	}
	if spec.KillGrace == 0 {
		spec.KillGrace = 200 * time.Millisecond
	}
	path, err := exec.LookPath(spec.Args[0])
	if err != nil {
		return nil, lockstep.Errorf(lockstep.EINVALID, "command %q: %v", spec.Args[0], err)
	}
	r := &Run{ID: newRunID(), spec: spec, seen: map[int]bool{}, done: make(chan struct{})}
	env := spec.Env
	if env == nil {
		env = os.Environ()
	}
	env = append(append([]string(nil), env...), EnvMarker+"="+r.ID)

	files := []*os.File{spec.Stdin, spec.Stdout, spec.Stderr}
	for i, f := range files {
		if f == nil {
			flag := os.O_WRONLY
			if i == 0 {
				flag = os.O_RDONLY
			}
			dn, err := os.OpenFile(os.DevNull, flag, 0)
			if err != nil {
				return nil, err
			}
			defer dn.Close()
			files[i] = dn
		}
	}
	sys := &syscall.SysProcAttr{Setpgid: true, Cloneflags: spec.Cloneflags,
		UidMappings: spec.UidMappings, GidMappings: spec.GidMappings, AmbientCaps: spec.AmbientCaps}
	if cg, err := r.makeCgroup(); err == nil && cg != "" {
		fd, err := unix.Open(cg, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err == nil {
			defer unix.Close(fd)
			sys.UseCgroupFD, sys.CgroupFD = true, fd
			r.cg, r.mode = cg, ModeCgroup
		} else {
			os.Remove(cg)
		}
	}
	if r.mode == "" {
		if err := enableSubreaper(); err != nil {
			return nil, fmt.Errorf("no cgroup v2 and no subreaper: %w", err)
		}
		r.mode = ModeSubreaper
	}
	r.start = time.Now()
	attr := &os.ProcAttr{Dir: spec.Dir, Env: env, Files: files, Sys: sys}
	p, err := os.StartProcess(path, spec.Args, attr)
	if err != nil && r.cg != "" {
		// clone3 into the cgroup refused (e.g. a threaded or domain-invalid
		// cgroup): fall back to the subreaper mode rather than fail the run.
		os.Remove(r.cg)
		r.cg, r.mode = "", ModeSubreaper
		sys.UseCgroupFD = false
		if serr := enableSubreaper(); serr == nil {
			p, err = os.StartProcess(path, spec.Args, attr)
		}
	}
	if err != nil {
		return nil, lockstep.Errorf(lockstep.EINVALID, "start %s: %v", spec.Args[0], err)
	}
	r.proc, r.pgid = p, p.Pid
	// Not reaped before Wait: its stat is there (a zombie's at worst).
	if st, ok := readStat(p.Pid); ok {
		r.startTicks = st.start
	}
	if spec.Cloneflags&unix.CLONE_NEWNS != 0 {
		// The namespace was made by clone itself: the child is in it now.
		nsPath := "/proc/" + strconv.Itoa(p.Pid) + "/ns/mnt"
		if f, err := os.Open(nsPath); err == nil {
			r.mntns, _ = os.Readlink("/proc/self/fd/" + strconv.Itoa(int(f.Fd()))) // the namespace we hold
			self, _ := os.Readlink("/proc/self/ns/mnt")
			if r.mntns == "" || r.mntns == self {
				f.Close()
				r.mntns = "" // already exited (or not ours): nothing to match
			} else {
				r.nsfd = f
			}
		}
	}
	return r, nil
}

// MountNS is the run's own mount namespace ("mnt:[N]") when it was
// started with CLONE_NEWNS, else "".
func (r *Run) MountNS() string { return r.mntns }

// Mode is "cgroup" or "subreaper".
func (r *Run) Mode() string { return r.mode }

// PID is the main process id.
func (r *Run) PID() int { return r.proc.Pid }

// Wait waits for the main process (killing the run on timeout or when ctx
// is done), then kills every process of the run that is still alive and
// reaps what it can. It returns an error only when cleanup failed; the
// command's own failure is in Status.
func (r *Run) Wait(ctx context.Context) (Status, error) {
	var st Status
	st.Isolation = r.mode
	var timer <-chan time.Time
	if r.spec.Timeout > 0 {
		t := time.NewTimer(r.spec.Timeout)
		defer t.Stop()
		timer = t.C
	}
	waited := make(chan *os.ProcessState, 1)
	waitErr := make(chan error, 1)
	go func() {
		ps, err := r.proc.Wait()
		if err != nil {
			waitErr <- err
			return
		}
		waited <- ps
	}()
	var ps *os.ProcessState
	for ps == nil {
		select {
		case ps = <-waited:
		case err := <-waitErr:
			return st, fmt.Errorf("wait: %w", err)
		case <-timer:
			st.TimedOut = true
			timer = nil
			r.terminate()
		case <-ctx.Done():
			st.Canceled = true
			ctx = context.Background()
			r.terminate()
		}
	}
	st.DurationMs = ms(time.Since(r.start))
	ws := ps.Sys().(syscall.WaitStatus)
	switch {
	case ws.Exited():
		st.ExitCode = ws.ExitStatus()
	case ws.Signaled():
		st.ExitCode = -1
		st.Signal = ws.Signal().String()
	}
	t0 := time.Now()
	n, err := r.KillAll()
	st.Leftover = n
	st.CleanupMs = ms(time.Since(t0))
	r.mu.Lock()
	r.ended = true
	r.mu.Unlock()
	close(r.done)
	return st, err
}

// terminate sends SIGTERM to the process group, then after the grace
// period kills everything.
func (r *Run) terminate() {
	unix.Kill(-r.pgid, unix.SIGTERM)
	go func() {
		select {
		case <-r.done:
		case <-time.After(r.spec.KillGrace):
			r.graceKill()
		}
	}()
}

// graceKill is terminate's kill once the grace period is over: the
// leader first (os.Process signals through a pidfd: never a reused pid),
// then the tree: killed after one of its children, a shell would see that
// child die and exit 137 itself, and the status would say it exited
// rather than that it was killed. Once Wait is over it does nothing: when
// the grace period and the end of Wait fall together, select may pick the
// timer, and by then Close may have let the run's mount namespace number
// (or process group) go to the next run, whose processes this kill would
// take for the run's (seen as a next run killed 9 ms after its start).
func (r *Run) graceKill() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ended {
		return
	}
	r.proc.Kill()
	r.killAllLocked()
}

// KillAll kills every process of the run and returns how many were alive.
// It is safe to call several times and concurrently with Wait.
func (r *Run) KillAll() (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.killAllLocked()
}

func (r *Run) killAllLocked() (int, error) {
	var err error
	var n int
	if r.mode == ModeCgroup {
		n, err = r.killCgroup()
		if r.mntns != "" && err == nil {
			// A process of the run's mount namespace that moved itself
			// out of the cgroup (root may) is still the run's.
			var m int
			m, err = r.killScan()
			n += m
		}
	} else {
		n, err = r.killScan()
	}
	r.reap()
	return n, err
}

// Residue lists processes of the run still alive (zombies excluded). After
// Wait it must be empty.
func (r *Run) Residue() []Process {
	var out []Process
	seen := map[int]bool{}
	if r.mode == ModeCgroup {
		for _, pid := range readPids(filepath.Join(r.cg, "cgroup.procs")) {
			if p, ok := readProc(pid); ok && p.State != "Z" {
				out = append(out, p.Process)
				seen[pid] = true
			}
		}
	}
	for _, p := range r.scan() {
		if !seen[p.PID] && p.State != "Z" {
			out = append(out, p)
		}
	}
	return out
}

// Close removes the run's cgroup and releases its mount namespace. Call
// it after Wait.
func (r *Run) Close() error {
	if r.nsfd != nil {
		r.nsfd.Close()
		r.nsfd = nil
	}
	if r.cg == "" {
		return nil
	}
	var err error
	for i := 0; i < 100; i++ {
		if err = os.Remove(r.cg); err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		time.Sleep(time.Millisecond)
	}
	return fmt.Errorf("remove cgroup %s: %w", r.cg, err)
}

// RunCmd starts spec and waits for it, returns the residue and removes
// the cgroup.
func RunCmd(ctx context.Context, spec Spec) (Status, []Process, error) {
	r, err := Start(ctx, spec)
	if err != nil {
		return Status{}, nil, err
	}
	st, err := r.Wait(ctx)
	res := r.Residue()
	if cerr := r.Close(); err == nil {
		err = cerr
	}
	return st, res, err
}

// --- cgroup mode ---

func (r *Run) makeCgroup() (string, error) {
	root := r.spec.CgroupRoot
	if root == "off" {
		return "", nil
	}
	if root == "" {
		root = detectCgroup2()
		if root == "" {
			return "", nil
		}
	}
	cg := filepath.Join(root, "lockstep-run-"+r.ID)
	if err := os.Mkdir(cg, 0o755); err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(cg, "cgroup.kill")); err != nil {
		os.Remove(cg) // kernel older than 5.14: no cgroup.kill
		return "", err
	}
	return cg, nil
}

// detectCgroup2 returns the directory of this process's cgroup v2, if a
// writable cgroup2 hierarchy is mounted.
func detectCgroup2() string {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	own := "/"
	if c, err := os.ReadFile("/proc/self/cgroup"); err == nil {
		for _, l := range strings.Split(string(c), "\n") {
			if strings.HasPrefix(l, "0::") {
				own = strings.TrimPrefix(l, "0::")
			}
		}
	}
	for _, l := range strings.Split(string(data), "\n") {
		f := strings.Fields(l)
		sep := 6
		for sep < len(f) && f[sep] != "-" {
			sep++
		}
		if sep+1 >= len(f) || f[sep+1] != "cgroup2" {
			continue
		}
		rel, ok := strings.CutPrefix(own, f[3]) // f[3]: the mount's root in the hierarchy
		if !ok {
			continue
		}
		dir := filepath.Join(f[4], rel)
		if unix.Access(dir, unix.W_OK) != nil {
			continue
		}
		// cgroup.kill (Linux 5.14) exists in non-root cgroups only: probe
		// with the root's cgroup.procs and rely on mkdir to prove we may.
		if _, err := os.Stat(filepath.Join(dir, "cgroup.procs")); err == nil {
			return dir
		}
	}
	return ""
}

func (r *Run) killCgroup() (int, error) {
	procs := filepath.Join(r.cg, "cgroup.procs")
	pids := readPids(procs)
	for _, p := range pids {
		r.seen[p] = true
	}
	if len(pids) == 0 {
		return 0, nil
	}
	if err := os.WriteFile(filepath.Join(r.cg, "cgroup.kill"), []byte("1"), 0); err != nil {
		return len(pids), fmt.Errorf("cgroup.kill %s: %w", r.cg, err)
	}
	deadline := time.Now().Add(killDeadline)
	for time.Now().Before(deadline) {
		left := readPids(procs)
		if len(left) == 0 {
			return len(pids), nil
		}
		for _, p := range left {
			r.seen[p] = true
		}
		r.reap()
		time.Sleep(200 * time.Microsecond)
	}
	return len(pids), lockstep.Errorf(lockstep.EINTERNAL, "cgroup %s still populated %s after cgroup.kill", r.cg, killDeadline)
}

func readPids(p string) []int {
	data, err := os.ReadFile(p)
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(string(data)) {
		if n, err := strconv.Atoi(f); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// --- subreaper mode ---

var subreaperOnce struct {
	sync.Once
	err error
}

// EnableSubreaper makes this process the child subreaper of everything it
// starts (process-wide and permanent): orphans of a run are re-parented to
// it instead of init, so a whole-instance verification can attribute a
// daemon that double-forked, cleared its environment and left its cgroup.
func EnableSubreaper() error { return enableSubreaper() }

func enableSubreaper() error {
	subreaperOnce.Do(func() {
		subreaperOnce.err = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	})
	return subreaperOnce.err
}

// quietScans is how many consecutive scans must find nothing alive before
// the subreaper mode believes the run is gone: a scan lists /proc and then
// reads each process, so a child forked by a process that exits in between
// is only seen by the next scan (it is then our child, as subreaper).
const quietScans = 3

// killDeadline bounds how long the cleanup keeps killing and waiting for
// the run's processes to be gone. SIGKILL is not instant on a loaded
// machine (a process in uninterruptible sleep dies when its I/O ends; one
// scan of /proc reads every process), so the bound is generous; it only
// matters when something really cannot be killed.
const killDeadline = 30 * time.Second

// unsureSettle bounds how long the cleanup waits for processes started
// after the run whose environment reads as empty (scanUnsure): a process
// mid-exec shows it for a moment, one started with no environment at all
// for good.
const unsureSettle = time.Second

// pfKthread is PF_KTHREAD of <linux/sched.h>, in /proc/PID/stat's flags.
const pfKthread = 0x00200000

func (r *Run) killScan() (int, error) {
	first := -1
	quiet := 0
	start := time.Now()
	deadline := start.Add(killDeadline)
	for time.Now().Before(deadline) {
		live := 0
		procs, unsure := r.scanUnsure()
		for _, p := range procs {
			r.seen[p.PID] = true
			if p.State == "Z" {
				continue
			}
			live++
			unix.Kill(p.PID, unix.SIGKILL)
		}
		if first < 0 {
			first = live
		}
		r.reap()
		switch {
		case live > 0:
			quiet = 0
		case unsure > 0 && time.Since(start) < unsureSettle:
			// A process that may be the run's, caught mid-exec: not a
			// quiet scan until it can be told (or unsureSettle passed:
			// a process whose environment stays unreadable is not the
			// run's, whose processes can read their own).
			quiet = 0
		default:
			if quiet++; quiet >= quietScans {
				return first, nil
			}
		}
		time.Sleep(500 * time.Microsecond)
	}
	return first, lockstep.Errorf(lockstep.EINTERNAL, "run %s: processes still alive %s after SIGKILL", r.ID, killDeadline)
}

type procInfo struct {
	Process
	pgid    int
	start   uint64 // start time, clock ticks after boot (stat field 22)
	kthread bool   // a kernel thread (PF_KTHREAD): no environment, never the run's
}

// scan walks /proc for the run's processes: its process group, the
// environment marker, and their descendants.
func (r *Run) scan() []Process {
	out, _ := r.scanUnsure()
	return out
}

// scanUnsure is scan, and how many processes started after the run (not
// kernel threads, not zombies) it could not tell about: their
// environment read as empty, as it does for a moment while a process
// execs (between the new memory map and its environment), so a
// process of the run that escaped its group (setsid) and was exec'ing
// looked like nobody's.
func (r *Run) scanUnsure() ([]Process, int) {
	ents, _ := os.ReadDir("/proc")
	all := map[int]procInfo{}
	children := map[int][]int{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		p, ok := readStat(pid)
		if !ok {
			continue
		}
		all[pid] = p
		children[p.PPID] = append(children[p.PPID], pid)
	}
	marker := []byte(EnvMarker + "=" + r.ID + "\x00")
	in := map[int]bool{}
	unsure := 0
	var queue []int
	for pid, p := range all {
		if pid == os.Getpid() {
			continue
		}
		// A process that started before the run's first one was not
		// forked by the run (a child starts after its parent; exec keeps
		// the start time): its environment and namespace are not read.
		// Everything the run made, however it escaped (new session,
		// double fork, re-parented), started after it and is read.
		older := r.startTicks > 0 && p.start < r.startTicks
		mine := p.pgid == r.pgid || pid == r.proc.Pid
		if !mine && !older && !p.kthread {
			has, known := hasMarker(pid, marker)
			mine = has || r.inMountNS(pid)
			if !mine && !known && p.State != "Z" {
				unsure++
			}
		}
		if mine {
			in[pid] = true
			queue = append(queue, pid)
		}
	}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		for _, c := range children[pid] {
			if !in[c] {
				in[c] = true
				queue = append(queue, c)
			}
		}
	}
	var out []Process
	for pid := range in {
		p := all[pid].Process
		p.Cmdline = readCmdline(pid) // only for the run's: one read less per process of the machine
		out = append(out, p)
	}
	return out, unsure
}

// inMountNS reports whether pid lives in the run's own mount namespace.
func (r *Run) inMountNS(pid int) bool {
	if r.mntns == "" {
		return false
	}
	ns, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/mnt")
	return err == nil && ns == r.mntns
}

// markerRead, when set (tests), hears every pid whose environment scan reads.
var markerRead func(pid int)

// environRead reads a process's environment (tests replace it).
var environRead = func(pid int) ([]byte, error) {
	return os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
}

// hasMarker reports whether pid's environment holds marker, and whether
// that is known: not when the environment reads as empty, as it does for
// a moment while a process execs. A process that is gone, or whose
// environment may not be read (another user's), is known not to hold it.
func hasMarker(pid int, marker []byte) (has, known bool) {
	if markerRead != nil {
		markerRead(pid)
	}
	data, err := environRead(pid)
	if err != nil {
		return false, true
	}
	if len(data) == 0 {
		return false, false
	}
	return strings.Contains("\x00"+string(data), "\x00"+string(marker)), true
}

func readProc(pid int) (procInfo, bool) {
	p, ok := readStat(pid)
	if ok {
		p.Cmdline = readCmdline(pid)
	}
	return p, ok
}

// readStat reads /proc/<pid>/stat (no command line).
func readStat(pid int) (procInfo, bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procInfo{}, false
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procInfo{}, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 3 {
		return procInfo{}, false
	}
	ppid, _ := strconv.Atoi(f[1])
	pgid, _ := strconv.Atoi(f[2])
	p := procInfo{Process: Process{PID: pid, PPID: ppid, State: f[0]}, pgid: pgid}
	if len(f) > 6 {
		flags, _ := strconv.ParseUint(f[6], 10, 64) // field 9
		p.kthread = flags&pfKthread != 0
	}
	if len(f) > 19 {
		p.start, _ = strconv.ParseUint(f[19], 10, 64) // field 22; 0 (unknown) never counts as older
	}
	return p, true
}

func readCmdline(pid int) string {
	cl, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(strings.ReplaceAll(string(cl), "\x00", " "))
}

// reap collects the exit status of every attributed process that became
// our child (directly, or re-parented to us as subreaper). Only pids of this
// run are waited for, so other os/exec users in the process are not robbed.
func (r *Run) reap() {
	self := os.Getpid()
	for pid := range r.seen {
		if pid == r.proc.Pid {
			continue // os.Process.Wait owns it
		}
		if p, ok := readProc(pid); ok && p.PPID != self {
			continue
		}
		var ws unix.WaitStatus
		wpid, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil)
		if wpid == pid || errors.Is(err, unix.ECHILD) {
			delete(r.seen, pid)
		}
	}
}

func newRunID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
