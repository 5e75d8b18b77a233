// Package redisbranch gives every workspace its own Redis: one
// redis-server process per workspace (lockstep.RedisBrancher).
//
// Layout under Config.Dir:
//
//	templates/<repo>.rdb          a base repository's template dataset (put
//	                              there by the operator, e.g. with
//	                              `redis-cli --rdb`); absent: branches start empty
//	branches/<ws>/dump.rdb        the instance's dataset on disk
//	branches/<ws>/port            its 127.0.0.1 port (kept for its life)
//	branches/<ws>/repo            the base repository it was seeded from
//	branches/<ws>/snapshots/<id>.rdb
//
// An instance listens on 127.0.0.1 only, requires a password derived from
// the branch secret (HMAC, like Postgres branch roles), and persists
// nothing by itself (save "", appendonly no): its dataset reaches the disk
// only through Snapshot (SAVE, then a hard link of the RDB) and Close
// (SHUTDOWN SAVE, so a server restart loses nothing). Restore stops the
// instance, puts the snapshot in place of dump.rdb and starts it again on
// the same port with the same password. After a restart of Lockstep, an
// instance still running (Lockstep crashed) is adopted; a stopped one is
// started lazily, from its last dump.rdb, on first use.
package redisbranch

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/internal/lazyre"
	"github.com/redis/go-redis/v9"
)

// Config configures a Manager.
type Config struct {
	Binary  string // redis-server's path ("" or "on": looked up on PATH)
	Dir     string // data directory (created)
	Secret  []byte // derives the instances' passwords
	PortMin int    // first port of the range (default 16400)
	PortMax int    // last port of the range (default 16999)
	// MaxSnapshots bounds the snapshots kept per workspace: a snapshot
	// beyond it drops the oldest (0: 20).
	MaxSnapshots int
	StartTTL     time.Duration
}

// Manager runs the instances.
type Manager struct {
	cfg  Config
	bin  string
	mu   sync.Mutex // guards locks, procs and port allocation
	lock map[string]*sync.Mutex
	proc map[string]*exec.Cmd // instances this process started
	done map[string]chan struct{}
}

var _ lockstep.RedisBrancher = (*Manager)(nil)

// New checks the binary and creates the directories.
func New(cfg Config) (*Manager, error) {
	bin := cfg.Binary
	if bin == "" || bin == "on" || bin == "true" {
		bin = "redis-server"
	}
	p, err := exec.LookPath(bin)
	if err != nil {
		return nil, fmt.Errorf("redis branching: %s not found: %w", bin, err)
	}
	if cfg.Dir == "" {
		return nil, errors.New("redis branching: no data directory")
	}
	// redis-server runs in the branch directory: a relative dir in its
	// config (the default data directory is ./lockstep-data) would name a
	// path below that, and it would exit at start without a log.
	abs, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("redis branching: %w", err)
	}
	cfg.Dir = abs
	if len(cfg.Secret) == 0 {
		return nil, errors.New("redis branching: no secret")
	}
	if cfg.PortMin == 0 {
		cfg.PortMin = 16400
	}
	if cfg.PortMax == 0 {
		cfg.PortMax = 16999
	}
	if cfg.PortMin < 1024 || cfg.PortMax > 65535 || cfg.PortMin > cfg.PortMax {
		return nil, fmt.Errorf("redis branching: bad port range %d-%d", cfg.PortMin, cfg.PortMax)
	}
	if cfg.MaxSnapshots <= 0 {
		cfg.MaxSnapshots = 20
	}
	if cfg.StartTTL == 0 {
		cfg.StartTTL = 30 * time.Second
	}
	for _, d := range []string{"templates", "branches"} {
		if err := os.MkdirAll(filepath.Join(cfg.Dir, d), 0o700); err != nil {
			return nil, err
		}
	}
	return &Manager{cfg: cfg, bin: p, lock: map[string]*sync.Mutex{}, proc: map[string]*exec.Cmd{}, done: map[string]chan struct{}{}}, nil
}

var idRE = lazyre.New(`^[A-Za-z0-9._-]{1,128}$`)

func (m *Manager) wsLock(ws string) *sync.Mutex {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.lock[ws]
	if l == nil {
		l = &sync.Mutex{}
		m.lock[ws] = l
	}
	return l
}

func (m *Manager) branchDir(ws string) string { return filepath.Join(m.cfg.Dir, "branches", ws) }

// TemplatePath is where repo's template RDB is read from.
func (m *Manager) TemplatePath(repo string) string {
	return filepath.Join(m.cfg.Dir, "templates", repo+".rdb")
}

// password is the agent's: the "default" user's password, in the URL
// handed to the workspace.
func (m *Manager) password(ws string) string {
	h := hmac.New(sha256.New, m.cfg.Secret)
	h.Write([]byte("redis-branch:" + ws))
	return hex.EncodeToString(h.Sum(nil))[:40]
}

// adminUser is the ACL user Lockstep itself connects as (SAVE, SHUTDOWN);
// its password is derived like the agent's but never leaves the server.
const adminUser = "lockstep"

func (m *Manager) adminPassword(ws string) string {
	h := hmac.New(sha256.New, m.cfg.Secret)
	h.Write([]byte("redis-branch-admin:" + ws))
	return hex.EncodeToString(h.Sum(nil))[:40]
}

// agentACL is what the workspace's "default" user may run: every command
// but the administrative ones (CONFIG SET, ACL SETUSER, SHUTDOWN, SAVE,
// REPLICAOF, MONITOR, CLIENT KILL, …) and MIGRATE. With them an agent
// could lock Lockstep out of its own instance (CONFIG SET requirepass, ACL
// SETUSER), stop it, or open a connection from the server's host to any
// address (REPLICAOF, MIGRATE) outside the run's egress policy. CONFIG GET
// stays: client libraries read settings such as maxmemory-policy.
const agentACL = "+@all -@admin +config|get -migrate"

// aclMarker marks an instance started with the two ACL users; one started
// by an older Lockstep (requirepass only) is still reached as "default"
// until its next start.
func (m *Manager) aclMarker(ws string) string { return filepath.Join(m.branchDir(ws), "acl") }

func (m *Manager) port(ws string) (int, error) {
	b, err := os.ReadFile(filepath.Join(m.branchDir(ws), "port"))
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

func (m *Manager) out(ws string) (*lockstep.RedisBranch, error) {
	p, err := m.port(ws)
	if err != nil {
		return nil, err
	}
	repo, _ := os.ReadFile(filepath.Join(m.branchDir(ws), "repo"))
	_, terr := os.Stat(filepath.Join(m.branchDir(ws), "template"))
	// "default" spelled out: redis-cli -u sends an empty user name as
	// such (WRONGPASS), go-redis and redis-py read it as the default user.
	return &lockstep.RedisBranch{Workspace: ws, Repo: string(repo), Template: terr == nil,
		URL: fmt.Sprintf("redis://default:%s@127.0.0.1:%d/0", m.password(ws), p)}, nil
}

func (m *Manager) client(ws string, port int) *redis.Client {
	user, pass := adminUser, m.adminPassword(ws)
	if !exists(m.aclMarker(ws)) {
		user, pass = "", m.password(ws)
	}
	return redis.NewClient(&redis.Options{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Username: user, Password: pass,
		MaxRetries: -1, DialTimeout: 2 * time.Second, ReadTimeout: 30 * time.Second, PoolSize: 1})
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

// CreateBranch implements lockstep.RedisBrancher.
func (m *Manager) CreateBranch(ctx context.Context, repo, ws string) (*lockstep.RedisBranch, error) {
	if err := lockstep.ValidateName("workspace name", ws); err != nil {
		return nil, err
	}
	if err := lockstep.ValidateName("repository name", repo); err != nil {
		return nil, err
	}
	l := m.wsLock(ws)
	l.Lock()
	defer l.Unlock()
	dir := m.branchDir(ws)
	if exists(filepath.Join(dir, "port")) {
		if err := m.ensureRunning(ctx, ws); err != nil {
			return nil, err
		}
		return m.out(ws)
	}
	if err := os.MkdirAll(filepath.Join(dir, "snapshots"), 0o700); err != nil {
		return nil, err
	}
	fail := func(err error) (*lockstep.RedisBranch, error) {
		m.stop(ws)
		os.RemoveAll(dir)
		return nil, err
	}
	if t := m.TemplatePath(repo); exists(t) {
		if err := copyFile(t, filepath.Join(dir, "dump.rdb")); err != nil {
			return fail(fmt.Errorf("copy template %s: %w", t, err))
		}
		if err := os.WriteFile(filepath.Join(dir, "template"), nil, 0o600); err != nil {
			return fail(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "repo"), []byte(repo), 0o600); err != nil {
		return fail(err)
	}
	// Port allocation and the port file under m.mu: two creations never
	// pick the same port.
	m.mu.Lock()
	port, err := m.freePort()
	if err == nil {
		err = writeAtomic(filepath.Join(dir, "port"), []byte(strconv.Itoa(port)))
	}
	m.mu.Unlock()
	if err != nil {
		return fail(err)
	}
	if err := m.start(ctx, ws, port); err != nil {
		return fail(err)
	}
	return m.out(ws)
}

// freePort returns the first port of the range no branch holds and that
// can be bound now. Caller holds m.mu.
func (m *Manager) freePort() (int, error) {
	used := map[int]bool{}
	ents, _ := os.ReadDir(filepath.Join(m.cfg.Dir, "branches"))
	for _, e := range ents {
		if p, err := m.port(e.Name()); err == nil {
			used[p] = true
		}
	}
	for p := m.cfg.PortMin; p <= m.cfg.PortMax; p++ {
		if used[p] {
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue
		}
		ln.Close()
		return p, nil
	}
	return 0, lockstep.Errorf(lockstep.EUNAVAILABLE, "redis branching: no free port in %d-%d", m.cfg.PortMin, m.cfg.PortMax)
}

// start runs redis-server for ws on port and waits until it answers.
func (m *Manager) start(ctx context.Context, ws string, port int) error {
	dir := m.branchDir(ws)
	// The password goes through the config read on stdin, not argv (ps
	// shows argv to every user of the machine).
	conf := strings.Join([]string{
		"bind 127.0.0.1", "port " + strconv.Itoa(port), "protected-mode yes",
		// Two users: the agent's (the URL's "default", limited by
		// agentACL) and Lockstep's own.
		"user default reset on >" + m.password(ws) + " ~* &* " + agentACL,
		"user " + adminUser + " reset on >" + m.adminPassword(ws) + " ~* &* +@all",
		"dir " + dir, "dbfilename dump.rdb",
		`save ""`, "appendonly no", "daemonize no", "logfile " + filepath.Join(dir, "redis.log"),
		"pidfile " + filepath.Join(dir, "redis.pid"),
		// The agent holds the password: it must not move the RDB out of
		// the branch directory (CONFIG SET dir/dbfilename then SAVE would
		// write any file as this process's user), load a module or use
		// DEBUG. Redis 7 has these switches (and these defaults); an older
		// redis-server refuses the directives and the branch is not made.
		"enable-protected-configs no", "enable-debug-command no", "enable-module-command no",
		// RESTORE takes a payload the agent built: by default only its
		// checksum and version are checked, and crafted ziplists,
		// listpacks and intsets that pass have corrupted redis-server's
		// memory (it runs as this process's user). Deep-check what
		// clients send; the RDB files it loads are its own SAVEs.
		"sanitize-dump-payload clients",
	}, "\n") + "\n"
	if err := os.WriteFile(m.aclMarker(ws), nil, 0o600); err != nil {
		return err
	}
	cmd := exec.Command(m.bin, "-")
	cmd.Stdin = strings.NewReader(conf)
	cmd.Dir = dir
	// redis-server reports a configuration it refuses on stderr, before
	// it opens its log file: a file (no pipe for its forks to hold open)
	// keeps that for the error below.
	out, err := os.OpenFile(filepath.Join(dir, "redis.stderr"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = out, out
	// Its own process group: a Ctrl-C meant for the server must not kill
	// the instance before Close saves its dataset.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	out.Close()
	if err != nil {
		return lockstep.Errorf(lockstep.EUNAVAILABLE, "start redis-server for %s: %v", ws, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	m.mu.Lock()
	m.proc[ws], m.done[ws] = cmd, done
	m.mu.Unlock()
	c := m.client(ws, port)
	defer c.Close()
	deadline := time.Now().Add(m.cfg.StartTTL)
	for {
		err := c.Ping(ctx).Err()
		if err == nil {
			return nil
		}
		select {
		case <-done:
			log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
			why := lastLine(string(log))
			if stderr, _ := os.ReadFile(filepath.Join(dir, "redis.stderr")); why == "" && len(bytes.TrimSpace(stderr)) > 0 {
				why = strings.Join(strings.Fields(strings.Join(lastLines(string(stderr), 2), " ")), " ")
			}
			return lockstep.Errorf(lockstep.EUNAVAILABLE, "redis-server for %s exited at start: %s", ws, why)
		case <-ctx.Done():
			m.stop(ws)
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			m.stop(ws)
			return lockstep.Errorf(lockstep.EUNAVAILABLE, "redis-server for %s did not answer within %s: %v", ws, m.cfg.StartTTL, err)
		}
	}
}

// lastLines returns the last n non-empty lines of s.
func lastLines(s string, n int) []string {
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out[max(0, len(out)-n):]
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return s
}

// ensureRunning pings ws's instance and starts it from its dump.rdb when
// it does not answer (after a restart of Lockstep). Caller holds ws's lock.
func (m *Manager) ensureRunning(ctx context.Context, ws string) error {
	port, err := m.port(ws)
	if err != nil {
		return err
	}
	c := m.client(ws, port)
	err = c.Ping(ctx).Err()
	c.Close()
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return m.start(ctx, ws, port)
}

// stop shuts ws's instance down without saving and waits until it is
// gone. Caller holds ws's lock.
func (m *Manager) stop(ws string) error {
	m.mu.Lock()
	done := m.done[ws]
	cmd := m.proc[ws]
	delete(m.proc, ws)
	delete(m.done, ws)
	m.mu.Unlock()
	return m.shutdown(ws, "NOSAVE", cmd, done)
}

func (m *Manager) shutdown(ws, mode string, cmd *exec.Cmd, done chan struct{}) error {
	port, err := m.port(ws)
	if err == nil {
		c := m.client(ws, port)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		c.Do(ctx, "SHUTDOWN", mode) // the connection closes: the error says nothing
		cancel()
		c.Close()
	}
	if done != nil {
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		return nil
	}
	// An adopted instance (started by an earlier Lockstep process): wait
	// until its port no longer answers.
	if err != nil {
		return nil
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		cn, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second)
		if err != nil {
			return nil
		}
		cn.Close()
		time.Sleep(10 * time.Millisecond)
	}
	return lockstep.Errorf(lockstep.EUNAVAILABLE, "redis-server of %s did not stop", ws)
}

// Branch implements lockstep.RedisBrancher.
func (m *Manager) Branch(ctx context.Context, ws string) (*lockstep.RedisBranch, error) {
	if err := lockstep.ValidateName("workspace name", ws); err != nil {
		return nil, err
	}
	l := m.wsLock(ws)
	l.Lock()
	defer l.Unlock()
	if !exists(filepath.Join(m.branchDir(ws), "port")) {
		return nil, lockstep.Errorf(lockstep.ENOTFOUND, "workspace %s has no redis branch", ws)
	}
	if err := m.ensureRunning(ctx, ws); err != nil {
		return nil, err
	}
	return m.out(ws)
}

// DropBranch implements lockstep.RedisBrancher.
func (m *Manager) DropBranch(ctx context.Context, ws string) error {
	if err := lockstep.ValidateName("workspace name", ws); err != nil {
		return err
	}
	l := m.wsLock(ws)
	l.Lock()
	defer l.Unlock()
	dir := m.branchDir(ws)
	if !exists(dir) {
		return lockstep.Errorf(lockstep.ENOTFOUND, "workspace %s has no redis branch", ws)
	}
	if err := m.stop(ws); err != nil {
		return err
	}
	return os.RemoveAll(dir)
}

func (m *Manager) snapPath(ws, id string) string {
	return filepath.Join(m.branchDir(ws), "snapshots", id+".rdb")
}

// Snapshot implements lockstep.RedisBrancher: SAVE writes dump.rdb (to a
// temporary file renamed into place, so the link below never sees a half
// file and a later SAVE never changes the snapshot's inode).
func (m *Manager) Snapshot(ctx context.Context, ws, id string) error {
	if !idRE.MatchString(id) {
		return lockstep.Errorf(lockstep.EINVALID, "invalid snapshot id %q", id)
	}
	l := m.wsLock(ws)
	l.Lock()
	defer l.Unlock()
	if !exists(filepath.Join(m.branchDir(ws), "port")) {
		return lockstep.Errorf(lockstep.ENOTFOUND, "workspace %s has no redis branch", ws)
	}
	if err := m.ensureRunning(ctx, ws); err != nil {
		return err
	}
	port, err := m.port(ws)
	if err != nil {
		return err
	}
	c := m.client(ws, port)
	defer c.Close()
	if err := c.Save(ctx).Err(); err != nil {
		return lockstep.Errorf(lockstep.EUNAVAILABLE, "redis SAVE of %s: %v", ws, err)
	}
	dst := m.snapPath(ws, id)
	os.Remove(dst)
	if err := os.Link(filepath.Join(m.branchDir(ws), "dump.rdb"), dst); err != nil {
		if err := copyFile(filepath.Join(m.branchDir(ws), "dump.rdb"), dst); err != nil {
			return err
		}
	}
	m.prune(ws, id)
	return nil
}

// prune drops the oldest snapshots of ws beyond MaxSnapshots (never
// keep, the one just taken). Caller holds ws's lock.
func (m *Manager) prune(ws, keep string) {
	dir := filepath.Join(m.branchDir(ws), "snapshots")
	ents, err := os.ReadDir(dir)
	if err != nil || len(ents) <= m.cfg.MaxSnapshots {
		return
	}
	type snap struct {
		name string
		at   time.Time
	}
	var ss []snap
	for _, e := range ents {
		if e.Name() == keep+".rdb" {
			continue
		}
		if fi, err := e.Info(); err == nil {
			ss = append(ss, snap{e.Name(), fi.ModTime()})
		}
	}
	sort.Slice(ss, func(i, j int) bool { return ss[i].at.Before(ss[j].at) })
	for i := 0; i < len(ss)-(m.cfg.MaxSnapshots-1); i++ {
		os.Remove(filepath.Join(dir, ss[i].name))
	}
}

// DropSnapshot implements lockstep.RedisBrancher.
func (m *Manager) DropSnapshot(ctx context.Context, ws, id string) error {
	if !idRE.MatchString(id) {
		return lockstep.Errorf(lockstep.EINVALID, "invalid snapshot id %q", id)
	}
	l := m.wsLock(ws)
	l.Lock()
	defer l.Unlock()
	err := os.Remove(m.snapPath(ws, id))
	if errors.Is(err, os.ErrNotExist) {
		return lockstep.Errorf(lockstep.ENOTFOUND, "redis snapshot %s of %s not found", id, ws)
	}
	return err
}

// Restore implements lockstep.RedisBrancher.
func (m *Manager) Restore(ctx context.Context, ws, id string) error {
	if !idRE.MatchString(id) {
		return lockstep.Errorf(lockstep.EINVALID, "invalid snapshot id %q", id)
	}
	l := m.wsLock(ws)
	l.Lock()
	defer l.Unlock()
	src := m.snapPath(ws, id)
	if !exists(src) {
		return lockstep.Errorf(lockstep.ENOTFOUND, "redis snapshot %s of %s not found", id, ws)
	}
	port, err := m.port(ws)
	if err != nil {
		return lockstep.Errorf(lockstep.ENOTFOUND, "workspace %s has no redis branch", ws)
	}
	if err := m.stop(ws); err != nil {
		return err
	}
	dump := filepath.Join(m.branchDir(ws), "dump.rdb")
	tmp := dump + ".restore"
	os.Remove(tmp)
	if err := os.Link(src, tmp); err != nil {
		if err := copyFile(src, tmp); err != nil {
			return err
		}
	}
	if err := os.Rename(tmp, dump); err != nil {
		return err
	}
	return m.start(ctx, ws, port)
}

// Close shuts every instance this process started down, saving its
// dataset so that the next start of Lockstep continues from it.
func (m *Manager) Close() {
	m.mu.Lock()
	ws := make([]string, 0, len(m.proc))
	for w := range m.proc {
		ws = append(ws, w)
	}
	m.mu.Unlock()
	for _, w := range ws {
		l := m.wsLock(w)
		l.Lock()
		m.mu.Lock()
		cmd, done := m.proc[w], m.done[w]
		delete(m.proc, w)
		delete(m.done, w)
		m.mu.Unlock()
		if cmd != nil {
			m.shutdown(w, "SAVE", cmd, done)
		}
		l.Unlock()
	}
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func writeAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// Usage implements lockstep.BranchUsager: the instance's dataset on disk
// (dump.rdb, as of its last save) and its RDB snapshots; a snapshot that
// still shares dump.rdb's file (no save since) is counted once.
func (m *Manager) Usage(ctx context.Context, ws string) (lockstep.BranchSize, error) {
	l := m.wsLock(ws)
	l.Lock()
	defer l.Unlock()
	dir := m.branchDir(ws)
	if !exists(dir) {
		return lockstep.BranchSize{}, lockstep.Errorf(lockstep.ENOTFOUND, "workspace %s has no redis branch", ws)
	}
	var out lockstep.BranchSize
	dump, err := os.Stat(filepath.Join(dir, "dump.rdb"))
	if err == nil {
		out.Bytes = dump.Size()
	}
	ents, err := os.ReadDir(filepath.Join(dir, "snapshots"))
	if err != nil && !os.IsNotExist(err) {
		return out, err
	}
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil || !strings.HasSuffix(e.Name(), ".rdb") {
			continue
		}
		out.Snapshots++
		if dump == nil || !os.SameFile(dump, fi) {
			out.SnapshotBytes += fi.Size()
		}
	}
	return out, nil
}

var _ lockstep.BranchUsager = (*Manager)(nil)
