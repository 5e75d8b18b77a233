package worktree

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"golang.org/x/sys/unix"

	"github.com/lockstep-hq/lockstep"
)

// The watcher (`lockstep watch`, like git's fsmonitor--daemon) keeps the
// set of paths changed under a directory so that a push can stat and hash
// only those. Protocol, over the unix socket WatchSocketPath(dir): the
// client writes its last token and a newline; the daemon creates a cookie
// file in dir/.lockstep, waits until its own event for it arrives (inotify
// queues events in order, so every change made before the request has
// then been seen), and answers one JSON line: the new token and either the
// paths changed since the client's token or full=true (unknown token, the
// daemon restarted, the event queue overflowed, a watched directory was
// renamed, or too many changed paths were tracked). A token is
// "<daemon instance>:<sequence>"; the client keeps it next to its stat
// cache and uses it only with the cache it was saved with.

// DefaultWatchTimeout bounds a push's query to the watcher (on timeout
// the push scans everything) and the watcher's wait on one query.
const DefaultWatchTimeout = 2 * time.Second

// DefaultWatchMaxTracked is how many changed paths the watcher remembers;
// past it, the next push of every client scans everything.
const DefaultWatchMaxTracked = 1_000_000

// WatchOptions are the watcher's limits; zero values take the defaults.
type WatchOptions struct {
	// Timeout bounds one query: reading it, and waiting for the event
	// loop and its answer (DefaultWatchTimeout).
	Timeout time.Duration
	// MaxTracked is how many changed paths are remembered before the
	// watcher forgets them all and every next push scans everything
	// (DefaultWatchMaxTracked).
	MaxTracked int
}

func (o WatchOptions) withDefaults() WatchOptions {
	if o.Timeout <= 0 {
		o.Timeout = DefaultWatchTimeout
	}
	if o.MaxTracked <= 0 {
		o.MaxTracked = DefaultWatchMaxTracked
	}
	return o
}

// WatchSocketPath is the watcher's socket for the directory absDir.
func WatchSocketPath(absDir string) string {
	return filepath.Join(absDir, ".lockstep", "watch.sock")
}

type watchReply struct {
	Token string   `json:"token"`
	Full  bool     `json:"full,omitempty"`
	Paths []string `json:"paths,omitempty"`
}

// queryWatcher asks the watcher at sock for the paths changed since token.
func queryWatcher(sock, token string, timeout time.Duration) (*watchReply, error) {
	if timeout <= 0 {
		timeout = DefaultWatchTimeout
	}
	conn, err := net.DialTimeout("unix", sock, timeout)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(timeout))
	if _, err := conn.Write([]byte(token + "\n")); err != nil {
		return nil, err
	}
	var r watchReply
	if err := json.NewDecoder(conn).Decode(&r); err != nil {
		return nil, err
	}
	if r.Token == "" {
		return nil, errors.New("watcher: empty token")
	}
	return &r, nil
}

// Watch runs the watcher for dir until ctx ends or dir goes away. ready,
// if set, is called once the socket is listening.
func Watch(ctx context.Context, dir string, opts WatchOptions, ready func()) error {
	opts = opts.withDefaults()
	root, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	root, err = filepath.EvalSymlinks(root)
	if err != nil {
		return lockstep.Errorf(lockstep.EINVALID, "watch: %v", err)
	}
	state := filepath.Join(root, ".lockstep")
	if err := os.MkdirAll(state, 0o755); err != nil {
		return fmt.Errorf("watch: %w", err)
	}
	sock := WatchSocketPath(root)
	if len(sock) >= 108 {
		return lockstep.Errorf(lockstep.EINVALID, "watch: socket path %q is longer than a unix socket path can be", sock)
	}
	if c, err := net.DialTimeout("unix", sock, time.Second); err == nil {
		c.Close()
		return lockstep.Errorf(lockstep.EINVALID, "watch: a watcher is already running for %s", root)
	}
	os.Remove(sock) // left by a killed watcher
	var idb [8]byte
	rand.Read(idb[:])
	d := &watchd{opts: opts, root: root, state: state, id: hex.EncodeToString(idb[:]), changed: map[string]uint64{},
		queries: make(chan *watchQuery), pending: map[string]*watchQuery{}}
	if err := d.resync(); err != nil {
		return err
	}
	defer func() { d.w.Close() }()
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return fmt.Errorf("watch: %w", err)
	}
	defer os.Remove(sock)
	defer ln.Close()
	go d.serve(ln)
	if ready != nil {
		ready()
	}
	return d.loop(ctx)
}

// watchTestHook, set by tests only, runs before each event is handled (a
// test blocks it to make the kernel's event queue overflow).
var watchTestHook func()

type watchd struct {
	opts            WatchOptions
	root, state, id string
	w               *fsnotify.Watcher
	seq             uint64
	reset           uint64            // tokens older than this get full=true
	changed         map[string]uint64 // path → sequence of its last event
	dirs            map[string]bool   // watched directories (relative)
	queries         chan *watchQuery
	pending         map[string]*watchQuery // by cookie file name
	cookies         int
}

type watchQuery struct {
	since string
	reply chan watchReply
}

// resync (re)creates the watches on every directory: at start, and after
// an event the watches cannot follow. Tokens from before it get full=true.
func (d *watchd) resync() error {
	if d.w != nil {
		d.w.Close()
	}
	w, err := fsnotify.NewBufferedWatcher(4096)
	if err != nil {
		return fmt.Errorf("watch: %w", err)
	}
	d.w, d.dirs = w, map[string]bool{}
	d.seq++
	d.reset = d.seq
	clear(d.changed)
	defer func() {
		// Their cookies may have been lost with the old watches: they
		// scan everything, from the new token on.
		for name, q := range d.pending {
			q.reply <- watchReply{Token: d.token(), Full: true}
			delete(d.pending, name)
		}
	}()
	if err := w.Add(d.state); err != nil {
		return fmt.Errorf("watch: %w", err)
	}
	return d.addTree("")
}

// addTree watches the directory rel and every directory under it.
func (d *watchd) addTree(rel string) error {
	return filepath.WalkDir(filepath.Join(d.root, filepath.FromSlash(rel)), func(p string, de os.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return err
		}
		if !de.IsDir() {
			return nil
		}
		r, _ := filepath.Rel(d.root, p)
		r = filepath.ToSlash(r)
		if n := de.Name(); p != d.root && (n == ".git" || n == ".lockstep") {
			return filepath.SkipDir
		}
		if err := d.w.Add(p); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return fmt.Errorf("watch %s: %w", p, err)
		}
		if r == "." {
			r = ""
		}
		d.dirs[r] = true
		return nil
	})
}

func (d *watchd) serve(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			c.SetDeadline(time.Now().Add(d.opts.Timeout))
			line, err := bufio.NewReader(c).ReadString('\n')
			if err != nil {
				return
			}
			q := &watchQuery{since: strings.TrimSpace(line), reply: make(chan watchReply, 1)}
			select {
			case d.queries <- q:
			case <-time.After(d.opts.Timeout):
				return
			}
			select {
			case r := <-q.reply:
				json.NewEncoder(c).Encode(r)
			case <-time.After(d.opts.Timeout):
			}
		}()
	}
}

func (d *watchd) loop(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case q := <-d.queries:
			d.cookies++
			name := "watch-cookie-" + strconv.Itoa(d.cookies)
			d.pending[name] = q
			if err := os.WriteFile(filepath.Join(d.state, name), nil, 0o644); err != nil {
				delete(d.pending, name)
				q.reply <- watchReply{Token: d.token(), Full: true}
			}
		case err, ok := <-d.w.Errors:
			if !ok {
				return errors.New("watch: watcher closed")
			}
			// ErrEventOverflow or any other: changes may be lost.
			_ = err
			if err := d.resync(); err != nil {
				return err
			}
		case ev, ok := <-d.w.Events:
			if !ok {
				return errors.New("watch: watcher closed")
			}
			if watchTestHook != nil {
				watchTestHook()
			}
			if err := d.event(ev); err != nil {
				return err
			}
		}
	}
}

func (d *watchd) token() string { return d.id + ":" + strconv.FormatUint(d.seq, 10) }

func (d *watchd) event(ev fsnotify.Event) error {
	if filepath.Dir(ev.Name) == d.state {
		name := filepath.Base(ev.Name)
		if q := d.pending[name]; q != nil && ev.Has(fsnotify.Create) {
			delete(d.pending, name)
			os.Remove(ev.Name)
			q.reply <- d.answer(q.since)
		}
		return nil
	}
	if ev.Name == d.root || ev.Name == d.state {
		if ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename) {
			return lockstep.Errorf(lockstep.EINVALID, "watch: %s was removed or renamed", ev.Name)
		}
		return nil
	}
	rel, err := filepath.Rel(d.root, ev.Name)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return nil
	}
	rel = filepath.ToSlash(rel)
	for _, c := range strings.Split(rel, "/") {
		if c == ".git" || c == ".lockstep" {
			return nil
		}
	}
	d.seq++
	d.changed[rel] = d.seq
	switch {
	case d.dirs[rel] && ev.Has(fsnotify.Rename):
		// The watches under a moved directory would report old names.
		return d.resync()
	case d.dirs[rel] && ev.Has(fsnotify.Remove):
		// Gone with its inode (the kernel drops its watch): no stale
		// names, and the dirty path makes the push drop all under it.
		delete(d.dirs, rel)
	case ev.Has(fsnotify.Create):
		if st, err := os.Lstat(ev.Name); err == nil && st.IsDir() {
			// Files made before the watch is in place are covered: the
			// directory itself is dirty, and a push walks all of it.
			if err := d.addTree(rel); err != nil {
				return d.resync()
			}
		}
	}
	if len(d.changed) > d.opts.MaxTracked {
		return d.resync()
	}
	return nil
}

// answer is the reply to a client whose last token is since.
func (d *watchd) answer(since string) watchReply {
	r := watchReply{Token: d.token()}
	id, s, ok := strings.Cut(since, ":")
	n, err := strconv.ParseUint(s, 10, 64)
	if !ok || err != nil || id != d.id || n < d.reset || n > d.seq {
		r.Full = true
		return r
	}
	for p, at := range d.changed {
		if at > n {
			r.Paths = append(r.Paths, p)
		}
	}
	return r
}

// The client side: the token saved with the stat cache.

func (c *StatCache) watchPath() string { return c.path + ".watch" }

func (c *StatCache) saveWatchToken() error {
	data := c.watchToken + " " + strconv.FormatInt(c.written, 10) + "\n"
	tmp := c.watchPath() + ".tmp"
	if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
		return fmt.Errorf("save watcher token: %w", err)
	}
	return os.Rename(tmp, c.watchPath())
}

// loadWatchToken returns the saved token if it was saved with the cache
// as loaded, else "".
func (c *StatCache) loadWatchToken() string {
	b, err := os.ReadFile(c.watchPath())
	if err != nil {
		return ""
	}
	tok, w, ok := strings.Cut(strings.TrimSpace(string(b)), " ")
	if !ok || c.written == 0 || w != strconv.FormatInt(c.written, 10) {
		return ""
	}
	return tok
}

// scanDirty is Scan from the stat cache plus the paths the watcher saw
// change (dirty): only those are stat'ed (a dirty directory is walked),
// the rest is the cache as the last complete scan left it. ok is false
// when it cannot be used and Scan must walk everything.
func scanDirty(root string, opts ScanOptions, dirty []string, started int64) (snap *Snapshot, ok bool, err error) {
	c := opts.Cache
	if opts.Ignore != nil || c.Len() == 0 {
		return nil, false, nil
	}
	set := make(map[string]bool, len(dirty))
	for _, p := range dirty {
		set[p] = true
	}
	for i := range c.vals {
		if c.vals[i].st.mtime >= c.written { // racy: stat it again
			set[c.order[i]] = true
		}
	}
	underDirty := func(p string) bool {
		if len(set) == 0 {
			return false
		}
		for {
			if set[p] {
				return true
			}
			i := strings.LastIndexByte(p, '/')
			if i < 0 {
				return false
			}
			p = p[:i]
		}
	}
	s := &scanner{root: root, opts: opts, sem: make(chan struct{}, max(runtime.GOMAXPROCS(0)-1, 0))}
	top := &dirNode{}
	dirs := map[string]*dirNode{"": top}
	var getDir func(rel string) *dirNode
	getDir = func(rel string) *dirNode {
		if n := dirs[rel]; n != nil {
			return n
		}
		parent, name := "", rel
		if i := strings.LastIndexByte(rel, '/'); i >= 0 {
			parent, name = rel[:i], rel[i+1:]
		}
		pn := getDir(parent)
		n := &dirNode{}
		pn.entries = append(pn.entries, nodeEntry{name: name, mode: filemode.Dir, sub: n})
		dirs[rel] = n
		return n
	}
	for i, p := range c.order {
		if underDirty(p) {
			continue
		}
		e := c.vals[i]
		b := &blobRef{rel: p, st: e.st, oid: e.oid}
		mode := filemode.Regular
		switch {
		case e.st.mode&0o170000 == 0o120000:
			mode = filemode.Symlink
			target, err := os.Readlink(filepath.Join(root, filepath.FromSlash(p)))
			if err != nil {
				return nil, false, nil // changed without an event: do not guess
			}
			if err := checkLink(root, p, target); err != nil {
				return nil, false, err
			}
			b.link, b.target = true, target
			b.oid = plumbing.ComputeHash(plumbing.BlobObject, []byte(target))
		case e.st.mode&0o100 != 0:
			mode = filemode.Executable
		}
		if mode != filemode.Symlink && opts.MaxFileBytes > 0 && e.st.size > opts.MaxFileBytes {
			return nil, false, lockstep.Errorf(lockstep.ETOOLARGE, "file %q is %d bytes, over the limit of %d", p, e.st.size, opts.MaxFileBytes)
		}
		if nf := s.files.Add(1); opts.MaxFiles > 0 && nf > int64(opts.MaxFiles) {
			return nil, false, lockstep.Errorf(lockstep.ETOOLARGE, "more than %d files (at %q)", opts.MaxFiles, p)
		}
		dir, name := "", p
		if i := strings.LastIndexByte(p, '/'); i >= 0 {
			dir, name = p[:i], p[i+1:]
		}
		n := getDir(dir)
		n.entries = append(n.entries, nodeEntry{name: name, mode: mode, blob: b})
	}
	// The dirty paths, outermost first; one under another dirty path is
	// covered by that one's walk.
	paths := make([]string, 0, len(set))
	for p := range set {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	for _, p := range paths {
		if i := strings.LastIndexByte(p, '/'); i >= 0 && underDirty(p[:i]) {
			continue
		}
		if s.failed.Load() {
			break
		}
		dir, name := "", p
		if i := strings.LastIndexByte(p, '/'); i >= 0 {
			dir, name = p[:i], p[i+1:]
		}
		if skippedPath(dir) {
			continue
		}
		f, err := os.Open(filepath.Join(root, filepath.FromSlash(dir)))
		if err != nil {
			if errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ENOTDIR) {
				continue // its directory is gone: nothing to store
			}
			s.fail(fmt.Errorf("scan: %w", err))
			break
		}
		if err := s.entry(getDir(dir), int(f.Fd()), dir, name, false); err != nil {
			s.fail(err)
		}
		f.Close()
	}
	s.wg.Wait()
	if s.err != nil {
		return nil, false, s.err
	}
	s.collect(top)
	if err := s.hashAll(); err != nil {
		return nil, false, err
	}
	snap = &Snapshot{
		dir:     root,
		Watched: true,
		Files:   s.nblb,
		Hashed:  len(s.todo),
		trees:   make(map[plumbing.Hash]*treeObj),
		blobs:   make(map[plumbing.Hash]*blobRef, s.nblb),
	}
	if snap.Tree, _, err = snap.build(top, true); err != nil {
		return nil, false, err
	}
	c.replace(s.reg, started)
	return snap, true, nil
}

// skippedPath reports whether the directory rel is one Scan never enters.
func skippedPath(rel string) bool {
	if rel == "" {
		return false
	}
	for _, c := range strings.Split(rel, "/") {
		if c == ".git" || c == ".lockstep" {
			return true
		}
	}
	return false
}
