// Package instance proves that a rolled-back run left nothing behind on
// the machine: processes, listening sockets, crontabs, `at` jobs, systemd
// user units, and files changed under the instance roots.
//
// Capture records the state before the run; Check compares after it.
// Attribution is conservative so that a busy machine does not produce
// false residue: a process is the run's residue when it did not exist at
// Capture and either lives in the run's own mount namespace or its first
// ancestor that existed at Capture is the calling process (as the run's
// child subreaper, lockstep adopts every orphan of the run: a daemon that
// double-forked and cleared its environment lands there). Processes of
// other activity descend from other pre-existing processes. Files are
// residue when their ctime or mtime is after Capture; only the configured
// roots are walked (a bounded walk), minus the excluded paths.
package instance

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Item kinds.
const (
	KindProcess = "process"
	KindSocket  = "socket"
	KindCrontab = "crontab"
	KindAtJob   = "at_job"
	KindUnit    = "systemd_unit"
	KindFile    = "file"
	KindLayer   = "overlay_layer"
)

// Item is one piece of residue.
type Item struct {
	Kind   string `json:"kind"`
	Path   string `json:"path,omitempty"`
	PID    int    `json:"pid,omitempty"`
	Detail string `json:"detail"`
}

func (i Item) String() string {
	s := i.Kind
	if i.Path != "" {
		s += " " + i.Path
	}
	if i.PID != 0 {
		s += " pid " + strconv.Itoa(i.PID)
	}
	if i.Detail != "" {
		s += ": " + i.Detail
	}
	return s
}

// Config says where to look.
type Config struct {
	// Roots are walked for files changed after Capture (dir-only runs;
	// a contained run's writes are in its discarded layers).
	Roots []string
	// CrontabDir, AtSpool and UserUnits are compared before and after
	// ("" skips one).
	CrontabDir, AtSpool, UserUnits string
	// Exclude are paths never reported (--dir, --share, the state root).
	Exclude []string
	// MaxEntries bounds the file walk (default 100000); Report.Truncated
	// says when it stopped early.
	MaxEntries int
	// Self is the process that adopts the run's orphans (default
	// os.Getpid()).
	Self int
}

// Defaults are the system locations, under home.
func Defaults(home string) Config {
	c := Config{CrontabDir: "/var/spool/cron/crontabs", AtSpool: "/var/spool/cron/atjobs", Roots: []string{"/tmp", "/var/tmp", "/opt"}}
	if home != "" {
		c.UserUnits = filepath.Join(home, ".config", "systemd", "user")
		c.Roots = append(c.Roots, home)
	}
	return c
}

type fileStamp struct {
	size  int64
	mtime time.Time
	ctime time.Time
}

type procKey struct {
	pid   int
	start uint64
}

// State is what Capture saw.
type State struct {
	Start  time.Time
	procs  map[procKey]bool
	spools map[string]map[string]fileStamp
}

// Capture records the pre-run state.
func Capture(cfg Config) *State {
	s := &State{Start: time.Now(), procs: map[procKey]bool{}, spools: map[string]map[string]fileStamp{}}
	for _, p := range readProcs() {
		s.procs[procKey{p.pid, p.start}] = true
	}
	for _, d := range []string{cfg.CrontabDir, cfg.AtSpool, cfg.UserUnits} {
		if d != "" {
			s.spools[d] = listSpool(d)
		}
	}
	return s
}

// Report is the result of Check.
type Report struct {
	Items     []Item `json:"items"`
	Scanned   int    `json:"scanned"`             // file entries walked
	Truncated bool   `json:"truncated,omitempty"` // the walk hit MaxEntries
}

// Check compares the machine with pre. mntns, when not empty, is the
// run's own mount namespace ("mnt:[N]"); walkFiles turns the file walk on.
func Check(pre *State, cfg Config, mntns string, walkFiles bool) Report {
	var r Report
	self := cfg.Self
	if self == 0 {
		self = os.Getpid()
	}
	procs := readProcs()
	byPID := map[int]proc{}
	for _, p := range procs {
		byPID[p.pid] = p
	}
	existed := func(p proc) bool { return pre.procs[procKey{p.pid, p.start}] }
	for _, p := range procs {
		if p.state == "Z" || p.pid == self || p.pid == 2 || p.ppid == 2 || existed(p) {
			continue
		}
		ours := false
		if mntns != "" {
			if ns, err := os.Readlink("/proc/" + strconv.Itoa(p.pid) + "/ns/mnt"); err == nil && ns == mntns {
				ours = true
			}
		}
		if !ours {
			// The first ancestor that existed before the run.
			a, hops := p, 0
			for !existed(a) && hops < 4096 {
				pa, ok := byPID[a.ppid]
				if !ok {
					break
				}
				a, hops = pa, hops+1
			}
			ours = existed(a) && a.pid == self
		}
		if !ours {
			continue
		}
		if cl, err := os.ReadFile("/proc/" + strconv.Itoa(p.pid) + "/cmdline"); err == nil && len(cl) > 0 {
			p.cmdline = strings.TrimSpace(strings.ReplaceAll(string(cl), "\x00", " "))
		}
		r.Items = append(r.Items, Item{Kind: KindProcess, PID: p.pid, Detail: p.cmdline})
		for _, l := range listeners(p.pid) {
			r.Items = append(r.Items, Item{Kind: KindSocket, PID: p.pid, Detail: l})
		}
	}
	kinds := map[string]string{cfg.CrontabDir: KindCrontab, cfg.AtSpool: KindAtJob, cfg.UserUnits: KindUnit}
	for _, d := range []string{cfg.CrontabDir, cfg.AtSpool, cfg.UserUnits} {
		if d == "" {
			continue
		}
		before, after := pre.spools[d], listSpool(d)
		var names []string
		for n := range after {
			names = append(names, n)
		}
		for n := range before {
			if _, ok := after[n]; !ok {
				names = append(names, n)
			}
		}
		sort.Strings(names)
		for _, n := range names {
			b, inB := before[n]
			a, inA := after[n]
			switch {
			case !inB:
				r.Items = append(r.Items, Item{Kind: kinds[d], Path: n, Detail: "created"})
			case !inA:
				r.Items = append(r.Items, Item{Kind: kinds[d], Path: n, Detail: "deleted"})
			case a != b:
				r.Items = append(r.Items, Item{Kind: kinds[d], Path: n, Detail: "modified"})
			}
		}
	}
	if walkFiles {
		r.walk(pre.Start, cfg)
	}
	return r
}

func (r *Report) walk(start time.Time, cfg Config) {
	max := cfg.MaxEntries
	if max <= 0 {
		max = 100000
	}
	// Coarse kernel timestamps can lag the clock by a tick.
	since := start.Add(-20 * time.Millisecond)
	skip := map[string]bool{}
	for _, d := range []string{cfg.CrontabDir, cfg.AtSpool, cfg.UserUnits} {
		if d != "" {
			skip[d] = true // reported by kind above
		}
	}
	excluded := func(p string) bool {
		if skip[p] {
			return true
		}
		for _, e := range cfg.Exclude {
			if p == e || strings.HasPrefix(p, e+"/") {
				return true
			}
		}
		return false
	}
	for _, root := range cfg.Roots {
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			if r.Scanned >= max {
				r.Truncated = true
				return filepath.SkipAll
			}
			r.Scanned++
			if excluded(p) {
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
			if p == root {
				return nil
			}
			fi, err := d.Info()
			if err != nil {
				return nil
			}
			st, ok := fi.Sys().(*syscall.Stat_t)
			if !ok {
				return nil
			}
			ct := time.Unix(st.Ctim.Unix())
			if fi.ModTime().After(since) || ct.After(since) {
				det := "written during the run"
				if d.IsDir() {
					det = "directory changed during the run"
				}
				r.Items = append(r.Items, Item{Kind: KindFile, Path: p, Detail: det})
			}
			return nil
		})
	}
}

func listSpool(dir string) map[string]fileStamp {
	out := map[string]fileStamp{}
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		st := fileStamp{size: fi.Size(), mtime: fi.ModTime()}
		if s, ok := fi.Sys().(*syscall.Stat_t); ok {
			st.ctime = time.Unix(s.Ctim.Unix())
		}
		out[p] = st
		return nil
	})
	return out
}

type proc struct {
	pid, ppid int
	start     uint64
	state     string
	cmdline   string
}

func readProcs() []proc {
	ents, _ := os.ReadDir("/proc")
	out := make([]proc, 0, len(ents))
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(data)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 20 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		start, _ := strconv.ParseUint(f[19], 10, 64)
		p := proc{pid: pid, ppid: ppid, start: start, state: f[0]}
		if j := strings.IndexByte(s, '('); j >= 0 && j < i {
			p.cmdline = s[j+1 : i]
		}
		out = append(out, p)
	}
	return out
}

// listeners names the listening sockets pid holds ("tcp 0.0.0.0:8080",
// "unix /run/x.sock").
func listeners(pid int) []string {
	fdDir := "/proc/" + strconv.Itoa(pid) + "/fd"
	ents, err := os.ReadDir(fdDir)
	if err != nil {
		return nil
	}
	inodes := map[string]bool{}
	for _, e := range ents {
		l, err := os.Readlink(filepath.Join(fdDir, e.Name()))
		if err == nil && strings.HasPrefix(l, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	if len(inodes) == 0 {
		return nil
	}
	var out []string
	netDir := "/proc/" + strconv.Itoa(pid) + "/net/"
	for _, proto := range []string{"tcp", "tcp6", "udp", "udp6"} {
		eachLine(netDir+proto, func(f []string) {
			if len(f) < 10 || !inodes[f[9]] {
				return
			}
			if strings.HasPrefix(proto, "tcp") && f[3] != "0A" {
				return
			}
			out = append(out, proto+" "+hexAddr(f[1]))
		})
	}
	eachLine(netDir+"unix", func(f []string) {
		if len(f) < 7 || !inodes[f[6]] || f[3] != "00010000" {
			return
		}
		path := "(unnamed)"
		if len(f) > 7 {
			path = f[7]
		}
		out = append(out, "unix "+path)
	})
	return out
}

func eachLine(path string, fn func([]string)) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		fn(strings.Fields(sc.Text()))
	}
}

// hexAddr turns /proc/net's "0100007F:1F90" into "127.0.0.1:8080" (IPv4)
// or keeps the address hex with a decimal port (IPv6).
func hexAddr(s string) string {
	host, port, ok := strings.Cut(s, ":")
	if !ok {
		return s
	}
	p, _ := strconv.ParseUint(port, 16, 16)
	if len(host) == 8 {
		v, _ := strconv.ParseUint(host, 16, 32)
		return fmt.Sprintf("%d.%d.%d.%d:%d", v&0xff, v>>8&0xff, v>>16&0xff, v>>24, p)
	}
	return fmt.Sprintf("[%s]:%d", host, p)
}
