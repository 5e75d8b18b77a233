package worktree

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha1"
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
	if skippedPath(parentRel(rel)) {
		return nil
	}
	switch _, name := splitRel(rel); name {
	case ".git":
		return nil // never stored, whatever its type
	case ".lockstep":
		// Scan skips a directory of that name but stores a file: a
		// file's change is reported like any other (one that is gone
		// is reported too, and the push finds nothing there).
		if st, err := os.Lstat(ev.Name); err == nil && st.IsDir() {
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
// change (dirty), in O(changed × depth) hashing and encoding: only the
// dirty paths are stat'ed (a dirty directory is walked whole), and only
// the directories on the paths from them to the root are encoded again;
// every other tree keeps the oid the cache's directory table has for it,
// and no file outside those directories is looked at. The cache's file
// entries and directory table are updated in one pass each (copies, no
// hashing). ok is false when it cannot be used and Scan must walk
// everything.
//
// The snapshot holds only the trees it encoded and the blobs of their
// directories. That is all Plan needs with a hint (PlanOptions.Known)
// that holds every unchanged tree those trees point to (the frontier):
// when the hint does not (no hint, or the cache's tree table and the last
// accepted push disagree, e.g. a push that failed after its scan), the
// snapshot is completed from the cache at once (every tree encoded again,
// no file read); without a usable hint at Plan time, Plan completes it.
func scanDirty(root string, opts ScanOptions, dirty []string, started int64) (snap *Snapshot, ok bool, err error) {
	c := opts.Cache
	if opts.Ignore != nil || len(c.dirs) == 0 {
		return nil, false, nil
	}
	set := make(map[string]bool, len(dirty))
	for _, p := range dirty {
		if p != "" && !skippedPath(parentRel(p)) {
			set[p] = true
		}
	}
	for i := range c.vals {
		if c.vals[i].st.mtime >= c.written { // racy: stat it again
			set[c.order[i]] = true
		}
	}
	// tops: the dirty paths with no dirty ancestor. Each is stat'ed (a
	// directory is walked whole); what the cache has under it is dropped.
	tops := make([]string, 0, len(set))
	for p := range set {
		if !dirtyAncestor(set, p) {
			tops = append(tops, p)
		}
	}
	slices.Sort(tops)
	under := func(p string) bool { // p is a top or under one
		if len(tops) <= 16 {
			for _, q := range tops {
				if strings.HasPrefix(p, q) && (len(p) == len(q) || p[len(q)] == '/') {
					return true
				}
			}
			return false
		}
		return set[p] || dirtyAncestor(set, p)
	}

	// The affected directories: those holding a top, and their ancestors.
	aff := dirIndex{"": &dirNode{}}
	top := aff[""]
	for _, p := range tops {
		aff.dir(parentRel(p))
	}

	// Files: keep those not under a top; those directly in an affected
	// directory become its entries.
	var dropAt []int // cache positions of tops that are files
	for _, q := range tops {
		if i, ok := c.index[q]; ok {
			dropAt = append(dropAt, int(i))
		}
	}
	slices.Sort(dropAt)
	order := make([]string, 0, len(c.order)+len(tops))
	vals := make([]cacheEntry, 0, len(c.order)+len(tops))
	lastDir, lastDrop, lastNode := "\x00", false, (*dirNode)(nil)
	for i, p := range c.order {
		if len(dropAt) > 0 && dropAt[0] == i {
			dropAt = dropAt[1:]
			continue
		}
		dir, name := splitRel(p)
		if dir != lastDir {
			lastDir, lastDrop, lastNode = dir, dir != "" && under(dir), aff[dir]
		}
		if lastDrop {
			continue
		}
		e := c.vals[i]
		link := e.st.mode&unix.S_IFMT == unix.S_IFLNK
		if !link && opts.MaxFileBytes > 0 && e.st.size > opts.MaxFileBytes {
			return nil, false, lockstep.Errorf(lockstep.ETOOLARGE, "file %q is %d bytes, over the limit of %d", p, e.st.size, opts.MaxFileBytes)
		}
		order, vals = append(order, p), append(vals, e)
		if lastNode == nil {
			continue
		}
		b, ok, err := cachedBlob(root, p, e)
		if !ok || err != nil {
			return nil, false, err
		}
		lastNode.entries = append(lastNode.entries, nodeEntry{name: name, mode: blobMode(e.st.mode), blob: b, cached: true})
	}

	// Directories: keep those not under a top nor affected (those are
	// encoded again); those directly in an affected directory become its
	// entries, with the tree oid the cache has for them.
	dirs := make([]string, 0, len(c.dirs)+len(aff))
	oids := make([]plumbing.Hash, 0, len(c.dirs)+len(aff))
	var frontier []plumbing.Hash
	for j, d := range c.dirs {
		if d == "" || aff[d] != nil || under(d) {
			continue
		}
		dirs, oids = append(dirs, d), append(oids, c.dirOIDs[j])
		parent, name := splitRel(d)
		if pn := aff[parent]; pn != nil {
			pn.entries = append(pn.entries, nodeEntry{name: name, mode: filemode.Dir, oid: c.dirOIDs[j], cached: true})
			frontier = append(frontier, c.dirOIDs[j])
		}
	}

	// The tops themselves, as a walk would find them.
	s := &scanner{root: root, opts: opts, sem: make(chan struct{}, max(runtime.GOMAXPROCS(0)-1, 0))}
	for _, p := range tops {
		if s.failed.Load() {
			break
		}
		dir, name := splitRel(p)
		fd, err := openDir(filepath.Join(root, filepath.FromSlash(dir)))
		if err != nil {
			if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
				continue // its directory is gone: nothing to store
			}
			s.fail(fmt.Errorf("scan: open %s: %w", dir, err))
			break
		}
		if err := s.entry(aff[dir], fd, dir, name, false); err != nil {
			s.fail(err)
		}
		unix.Close(fd)
	}
	s.wg.Wait()
	if s.err != nil {
		return nil, false, s.err
	}
	s.collect(top) // the files stat'ed now, not the cached ones
	if nf := len(order) + s.nblb; opts.MaxFiles > 0 && nf > opts.MaxFiles {
		return nil, false, lockstep.Errorf(lockstep.ETOOLARGE, "more than %d files", opts.MaxFiles)
	}
	if err := s.hashAll(); err != nil {
		return nil, false, err
	}
	snap = &Snapshot{
		dir:     root,
		Watched: true,
		Hashed:  len(s.todo),
		trees:   make(map[plumbing.Hash]*treeObj, 2*len(aff)),
		blobs:   make(map[plumbing.Hash]*blobRef),
	}
	tb := &treeBuilder{h: sha1.New(), record: true}
	if snap.Tree, _, err = tb.build(snap, top, true); err != nil {
		return nil, false, err
	}
	for _, b := range s.reg {
		order, vals = append(order, b.rel), append(vals, cacheEntry{st: b.st, oid: b.oid})
	}
	for _, d := range tb.dirs {
		dirs, oids = append(dirs, d.rel), append(oids, d.oid)
	}
	c.order, c.vals, c.index, c.written = order, vals, nil, started
	c.dirs, c.dirOIDs = dirs, oids
	snap.Files = len(order)
	snap.allTrees = oids // never changed in place: a later Scan makes new slices
	snap.complete = completeFromCache(root, order, vals)
	k := c.known
	for _, h := range frontier {
		if k == nil || !k.has(h) {
			// The cache's trees are not all the last accepted push's:
			// Plan's hint cannot stand for them.
			if err := snap.full(); err != nil {
				return nil, false, err
			}
			break
		}
	}
	return snap, true, nil
}

// dirtyAncestor reports whether a proper ancestor directory of p is in set.
func dirtyAncestor(set map[string]bool, p string) bool {
	for {
		i := strings.LastIndexByte(p, '/')
		if i < 0 {
			return false
		}
		p = p[:i]
		if set[p] {
			return true
		}
	}
}

// splitRel splits a slash-separated relative path into its directory (""
// for the root) and its last component.
func splitRel(p string) (dir, name string) {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[:i], p[i+1:]
	}
	return "", p
}

func parentRel(p string) string { d, _ := splitRel(p); return d }

// blobMode is a tree entry's mode for a cached file's st_mode.
func blobMode(m uint32) filemode.FileMode {
	switch {
	case m&unix.S_IFMT == unix.S_IFLNK:
		return filemode.Symlink
	case m&0o100 != 0:
		return filemode.Executable
	}
	return filemode.Regular
}

// cachedBlob is the blob of a cache entry, for a snapshot that may send
// it. A symlink's target is read again (WritePack sends it) and must still
// hash to the cached oid; ok is false if it does not (it changed without
// an event: do not guess).
func cachedBlob(root, p string, e cacheEntry) (b *blobRef, ok bool, err error) {
	b = &blobRef{rel: p, st: e.st, oid: e.oid}
	if e.st.mode&unix.S_IFMT != unix.S_IFLNK {
		return b, true, nil
	}
	target, err := os.Readlink(filepath.Join(root, filepath.FromSlash(p)))
	if err != nil || plumbing.ComputeHash(plumbing.BlobObject, []byte(target)) != e.oid {
		return nil, false, nil
	}
	if err := checkLink(root, p, target); err != nil {
		return nil, false, err
	}
	b.link, b.target = true, target
	return b, true, nil
}

// dirIndex holds the directory nodes of a tree being built again, by
// slash-separated path ("" the root, which it must hold).
type dirIndex map[string]*dirNode

// dir returns the node of rel, making it and its missing ancestors, each
// entered in its parent.
func (d dirIndex) dir(rel string) *dirNode {
	if n := d[rel]; n != nil {
		return n
	}
	parent, name := splitRel(rel)
	pn := d.dir(parent)
	n := &dirNode{rel: rel}
	pn.entries = append(pn.entries, nodeEntry{name: name, mode: filemode.Dir, sub: n})
	d[rel] = n
	return n
}

// completeFromCache returns the completion of a watched Scan's snapshot:
// every tree built again from the file entries the Scan left in the cache
// (order, vals), no file read. The root must come out as the Scan's.
func completeFromCache(root string, order []string, vals []cacheEntry) func(*Snapshot) error {
	return func(snap *Snapshot) error {
		dirs := dirIndex{"": &dirNode{}}
		top := dirs[""]
		for i, p := range order {
			b, ok, err := cachedBlob(root, p, vals[i])
			if err != nil {
				return err
			}
			if !ok {
				return lockstep.Errorf(lockstep.EINVALID, "file changed during push: %q", p)
			}
			dir, name := splitRel(p)
			n := dirs.dir(dir)
			n.entries = append(n.entries, nodeEntry{name: name, mode: blobMode(vals[i].st.mode), blob: b})
		}
		tb := &treeBuilder{h: sha1.New()}
		h, _, err := tb.build(snap, top, true)
		if err != nil {
			return err
		}
		if h != snap.Tree {
			return lockstep.Errorf(lockstep.EINTERNAL, "watched scan: tree %s rebuilt from the stat cache as %s", snap.Tree, h)
		}
		return nil
	}
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
