package worktree

import (
	"crypto/sha1"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"golang.org/x/sys/unix"

	"github.com/lockstep-hq/lockstep"
)

// ScanOptions configures Scan. The zero value scans without a cache and
// without limits.
type ScanOptions struct {
	// Cache, if set, lets Scan skip reading files whose stat is unchanged,
	// and is updated with what Scan saw (call Cache.Save afterwards).
	Cache *StatCache
	// MaxFileBytes refuses any regular file larger than this; 0 means no
	// limit.
	MaxFileBytes int64
	// MaxFiles refuses a tree with more files (regular files and symlinks);
	// 0 means no limit.
	MaxFiles int
	// Ignore, if set, is asked about every entry (slash-separated path
	// relative to the scanned directory, and whether it is a directory)
	// and leaves it out when it returns true. It is the hook for a future
	// ignore file. ".git" entries (git cannot store one) and ".lockstep"
	// directories are left out before Ignore is asked.
	Ignore func(rel string, isDir bool) bool
	// WatchTimeout bounds the query to Watcher (0: DefaultWatchTimeout);
	// on timeout Scan walks everything.
	WatchTimeout time.Duration
	// Watcher, with Cache, is the socket of a `lockstep watch` daemon
	// (WatchSocketPath): when one answers there with the changes since
	// the token saved with the cache, Scan stats and hashes only the
	// changed paths and takes the rest from the cache. Without an answer,
	// or when the daemon cannot vouch for every change (restarted,
	// overflowed, unknown token), Scan walks everything.
	Watcher string
}

// Snapshot is a scanned directory as git objects. The trees are held in
// memory; a blob is only a path and the stat it had during Scan, its
// content is read again by WritePack if the server needs it. A Snapshot is
// read-only after Scan and safe for concurrent use, except that Plan, All
// and Objects complete a watched Scan's partial snapshot the first time
// they need to: call them before sharing it (the CLI's push plans, then
// packs).
type Snapshot struct {
	// Tree is the root tree oid, equal to `git add -A && git write-tree`.
	Tree plumbing.Hash
	// Files is the number of blob entries (files and symlinks) scanned.
	Files int
	// Hashed is the number of files Scan read and hashed because the cache
	// had no valid entry for them.
	Hashed int
	// Watched is true when the watcher's changed paths replaced the walk.
	Watched bool

	dir   string
	trees map[plumbing.Hash]*treeObj
	blobs map[plumbing.Hash]*blobRef

	// A watched Scan's snapshot is partial: trees and blobs hold only the
	// trees it re-encoded and the blobs of their directories; allTrees is
	// every tree oid of the snapshot (for Known), and complete, run once
	// by whatever needs the rest (Plan without a usable hint, All,
	// Objects), builds the other trees from the stat cache.
	allTrees     []plumbing.Hash
	complete     func(*Snapshot) error
	completeOnce sync.Once
	completeErr  error
}

// full makes a partial snapshot complete (see Snapshot.complete).
func (snap *Snapshot) full() error {
	snap.completeOnce.Do(func() {
		if snap.complete != nil {
			snap.completeErr = snap.complete(snap)
		}
	})
	return snap.completeErr
}

// treeObj is one tree kept for negotiation and packing: its sorted
// entries (WritePack encodes it again if it is sent).
type treeObj struct {
	entries []treeEntry
}

// fileStat is the part of lstat the cache compares.
type fileStat struct {
	size, mtime, ctime int64
	ino, dev           uint64
	mode               uint32
}

// blobRef is a blob whose content stays on disk.
type blobRef struct {
	rel    string // slash-separated, relative to the snapshot dir
	st     fileStat
	link   bool   // symlink: content is target
	target string // symlink target
	oid    plumbing.Hash
}

// readCount counts files opened for their content (Scan hashing and
// WritePack); tests use it to prove the stat cache skips unchanged files.
var readCount atomic.Int64

// treeEncodes counts trees encoded and hashed (Scan, and the completion of
// a watched snapshot); tests use it to prove a watched push re-encodes
// only the directories on the paths from the changes to the root.
var treeEncodes atomic.Int64

// dirNode is a directory during the walk.
type dirNode struct {
	rel     string // slash-separated, "" for the root
	entries []nodeEntry
}

// nodeEntry is a file (blob set), a directory walked or rebuilt (sub set),
// or, in a watched Scan, a directory taken whole from the stat cache
// (neither set: oid is its tree).
type nodeEntry struct {
	name   string
	mode   filemode.FileMode
	sub    *dirNode
	blob   *blobRef
	oid    plumbing.Hash
	cached bool // from the stat cache, not stat'ed by this Scan
}

// dirRec is a directory's tree oid, for the stat cache's directory table.
type dirRec struct {
	rel string
	oid plumbing.Hash
}

// scanner walks directories on up to GOMAXPROCS goroutines: a
// subdirectory gets its own goroutine when a token is free, else is walked
// inline. Each dirNode is written by one goroutine only; the results are
// read after wg.Wait.
type scanner struct {
	root  string
	opts  ScanOptions
	files atomic.Int64 // for MaxFiles during the walk
	sem   chan struct{}
	wg    sync.WaitGroup

	errMu  sync.Mutex
	err    error
	failed atomic.Bool

	// filled by collect after the walk
	todo []*blobRef // files to read and hash
	reg  []*blobRef // every regular file and symlink, for the cache
	nblb int        // files and symlinks
}

func (s *scanner) fail(err error) {
	s.errMu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.errMu.Unlock()
	s.failed.Store(true)
}

// Scan walks dir and builds its git objects. It skips ".git" and
// ".lockstep" entries at any level (git cannot store a ".git" entry at all)
// and nothing else unless opts.Ignore says so. It returns invalid_argument,
// naming the path, for a special file (device, fifo, socket), a symlink
// whose target is absolute or leaves dir, or a name that is not valid
// UTF-8; too_large for a file over opts.MaxFileBytes or more than
// opts.MaxFiles files.
func Scan(dir string, opts ScanOptions) (*Snapshot, error) {
	root, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("scan %s: %w", dir, err)
	}
	var dirty []string
	incremental := false
	if c := opts.Cache; c != nil && opts.Watcher != "" {
		tok := c.loadWatchToken()
		c.watchToken = ""
		if r, err := queryWatcher(opts.Watcher, tok, opts.WatchTimeout); err == nil {
			// The token is taken before any file is read: what changes
			// from now on is in the next answer.
			c.watchToken = r.Token
			dirty, incremental = r.Paths, !r.Full && tok != ""
		}
	} else if c != nil {
		c.watchToken = ""
	}
	var started int64 // filesystem clock before any file is read: see StatCache.Save
	if c := opts.Cache; c != nil {
		started = c.clock()
		c.needIndex()
	}
	if incremental {
		if snap, ok, err := scanDirty(root, opts, dirty, started); ok || err != nil {
			return snap, err
		}
	}
	s := &scanner{root: root, opts: opts, sem: make(chan struct{}, runtime.GOMAXPROCS(0)-1)}
	top := &dirNode{}
	if err := s.walk(top, "", -1, ""); err != nil {
		s.fail(err)
	}
	s.wg.Wait()
	if s.err != nil {
		return nil, s.err
	}
	s.collect(top)
	if err := s.hashAll(); err != nil {
		return nil, err
	}
	snap := &Snapshot{
		dir:    root,
		Files:  s.nblb,
		Hashed: len(s.todo),
		trees:  make(map[plumbing.Hash]*treeObj),
		blobs:  make(map[plumbing.Hash]*blobRef, s.nblb),
	}
	tb := &treeBuilder{h: sha1.New(), record: opts.Cache != nil}
	if snap.Tree, _, err = tb.build(snap, top, true); err != nil {
		return nil, err
	}
	if c := opts.Cache; c != nil {
		// Only a complete scan replaces the entries and their reference
		// time: old entries must keep the (earlier) time they were made at.
		c.replace(s.reg, tb.dirs, started)
	}
	return snap, nil
}

// collect lists, in walk order, the files to hash and the regular files.
func (s *scanner) collect(n *dirNode) {
	for i := range n.entries {
		e := &n.entries[i]
		if e.sub != nil {
			s.collect(e.sub)
			continue
		}
		if e.cached || e.blob == nil {
			continue // a watched Scan counts and keeps these itself
		}
		s.nblb++
		s.reg = append(s.reg, e.blob) // symlinks too: ScanOptions.Watcher rebuilds from the cache
		if e.blob.link {
			continue
		}
		if e.blob.oid.IsZero() {
			s.todo = append(s.todo, e.blob)
		}
	}
}

// subdir walks the directory rel into n, on a new goroutine if a token is
// free. pfd is its parent directory, open while subdir runs, and name its
// name there.
func (s *scanner) subdir(n *dirNode, rel string, pfd int, name string) error {
	select {
	case s.sem <- struct{}{}:
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer func() { <-s.sem }()
			// pfd may be closed before this runs: open by path.
			if err := s.walk(n, rel, -1, ""); err != nil {
				s.fail(err)
			}
		}()
		return nil
	default:
		return s.walk(n, rel, pfd, name)
	}
}

// walk reads one directory (rel is "" for the root) into n: opened as name
// in the open directory pfd (a one-component lookup, which does not follow
// a symlink put there since the parent was listed), or by path if pfd is
// -1. Directories left empty are pruned by build: git keeps no empty
// directories.
func (s *scanner) walk(n *dirNode, rel string, pfd int, name string) error {
	if s.failed.Load() {
		return nil // another goroutine failed; Scan returns its error
	}
	abs := s.root
	if rel != "" {
		abs = filepath.Join(s.root, filepath.FromSlash(rel))
	}
	var fd int
	var err error
	if pfd >= 0 {
		fd, err = openDirAt(pfd, name)
	} else {
		fd, err = openDir(abs)
	}
	if err != nil {
		return fmt.Errorf("scan: open %s: %w", abs, err)
	}
	defer unix.Close(fd)
	var ferr error // from entry: returned as it is
	err = listDir(fd, func(name string, isDir bool) error {
		ferr = s.entry(n, fd, rel, name, isDir)
		return ferr
	})
	if ferr != nil {
		return ferr
	}
	if err != nil {
		return fmt.Errorf("scan: read dir %s: %w", abs, err)
	}
	return nil
}

// entry adds the entry name of the directory rel (open as fd) to n, if it
// is stored: isDir is what the directory listing said about it.
func (s *scanner) entry(n *dirNode, fd int, rel, name string, isDir bool) error {
	if name == ".git" || (name == ".lockstep" && isDir) {
		return nil
	}
	p := name
	if rel != "" {
		p = rel + "/" + name
	}
	if !utf8.ValidString(name) {
		return lockstep.Errorf(lockstep.EINVALID, "file name is not valid UTF-8: %q", p)
	}
	if s.opts.Ignore != nil && s.opts.Ignore(p, isDir) {
		return nil
	}
	if isDir {
		sub := &dirNode{rel: p}
		n.entries = append(n.entries, nodeEntry{name: name, mode: filemode.Dir, sub: sub})
		return s.subdir(sub, p, fd, name)
	}
	var st unix.Stat_t
	if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil // deleted while we walk: as if we had come earlier
		}
		return fmt.Errorf("scan: lstat %s: %w", p, err)
	}
	fs := statOf(&st)
	b := &blobRef{rel: p, st: fs}
	var mode filemode.FileMode
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR: // the entry type changed under us; follow the stat
		if name == ".lockstep" {
			return nil
		}
		sub := &dirNode{rel: p}
		n.entries = append(n.entries, nodeEntry{name: name, mode: filemode.Dir, sub: sub})
		return s.subdir(sub, p, fd, name)
	case unix.S_IFREG:
		mode = filemode.Regular
		if st.Mode&0o100 != 0 {
			mode = filemode.Executable
		}
		if s.opts.MaxFileBytes > 0 && st.Size > s.opts.MaxFileBytes {
			return lockstep.Errorf(lockstep.ETOOLARGE, "file %q is %d bytes, over the limit of %d", p, st.Size, s.opts.MaxFileBytes)
		}
		if e, ok := s.opts.Cache.lookup(p, fs); ok {
			b.oid = e.oid // else zero: collect queues it for hashing
		}
	case unix.S_IFLNK:
		mode = filemode.Symlink
		target, err := readlinkat(fd, name)
		if err != nil {
			return fmt.Errorf("scan: readlink %s: %w", p, err)
		}
		if err := checkLink(s.root, p, target); err != nil {
			return err
		}
		b.link, b.target = true, target
		b.oid = plumbing.ComputeHash(plumbing.BlobObject, []byte(target))
	default:
		return lockstep.Errorf(lockstep.EINVALID, "%s %q cannot be pushed: only regular files, symlinks and directories can", kindOf(uint32(st.Mode)), p)
	}
	if nf := s.files.Add(1); s.opts.MaxFiles > 0 && nf > int64(s.opts.MaxFiles) {
		return lockstep.Errorf(lockstep.ETOOLARGE, "more than %d files (at %q)", s.opts.MaxFiles, p)
	}
	n.entries = append(n.entries, nodeEntry{name: name, mode: mode, blob: b})
	return nil
}

func statOf(st *unix.Stat_t) fileStat {
	return fileStat{
		size:  st.Size,
		mtime: st.Mtim.Nano(),
		ctime: st.Ctim.Nano(),
		ino:   st.Ino,
		dev:   uint64(st.Dev),
		mode:  uint32(st.Mode),
	}
}

func kindOf(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFIFO:
		return "fifo"
	case unix.S_IFSOCK:
		return "socket"
	case unix.S_IFCHR:
		return "character device"
	case unix.S_IFBLK:
		return "block device"
	}
	return "special file (mode " + strconv.FormatUint(uint64(mode), 8) + ")"
}

func readlinkat(fd int, name string) (string, error) {
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(fd, name, buf)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
}

// checkLink refuses a symlink the server could not materialize safely: an
// absolute target, or one that leaves the tree. The check is lexical (the
// target is joined to the link's directory and cleaned), plus, for a target
// with a ".." component that exists, a check of where it really resolves,
// which catches ".." applied after another symlink ("up/.." with up -> ..).
// A target without ".." cannot climb: it descends from the link's
// directory, through symlinks that are themselves checked.
func checkLink(root, rel, target string) error {
	if target == "" {
		return lockstep.Errorf(lockstep.EINVALID, "symlink %q has an empty target", rel)
	}
	if path.IsAbs(target) || filepath.IsAbs(target) {
		return lockstep.Errorf(lockstep.EINVALID, "symlink %q has an absolute target %q", rel, target)
	}
	if !utf8.ValidString(target) {
		return lockstep.Errorf(lockstep.EINVALID, "symlink %q target is not valid UTF-8: %q", rel, target)
	}
	joined := path.Join(path.Dir(rel), target)
	if joined == ".." || strings.HasPrefix(joined, "../") {
		return lockstep.Errorf(lockstep.EINVALID, "symlink %q target %q points outside the directory", rel, target)
	}
	if !slices.Contains(strings.Split(target, "/"), "..") {
		return nil
	}
	real, err := filepath.EvalSymlinks(filepath.Join(root, filepath.FromSlash(rel)))
	if err != nil {
		return nil // dangling (or a loop): git stores it; the lexical check holds
	}
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return nil
	}
	if r, err := filepath.Rel(realRoot, real); err != nil || r == ".." || strings.HasPrefix(r, ".."+string(filepath.Separator)) {
		return lockstep.Errorf(lockstep.EINVALID, "symlink %q target %q resolves outside the directory", rel, target)
	}
	return nil
}

// hashAll reads and hashes the files the cache could not vouch for, on as
// many goroutines as there are CPUs.
func (s *scanner) hashAll() error {
	workers := min(runtime.GOMAXPROCS(0), len(s.todo))
	var (
		next    atomic.Int64
		wg      sync.WaitGroup
		errOnce sync.Once
		first   error
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := sha1.New()
			buf := make([]byte, 64<<10)
			for {
				i := int(next.Add(1)) - 1
				if i >= len(s.todo) {
					return
				}
				b := s.todo[i]
				if err := hashRetry(s.root, b, h, buf); err != nil {
					errOnce.Do(func() { first = err })
					next.Store(int64(len(s.todo))) // stop the others
					return
				}
			}
		}()
	}
	wg.Wait()
	return first
}

// errChanged is hashFile's report that the file changed while read.
var errChanged = errors.New("changed while read")

// hashRetry hashes b, reading it again (up to 3 times in all) if it changes
// while being read: a log file being appended to should not fail the push
// if it pauses for a moment.
func hashRetry(root string, b *blobRef, h hashWriter, buf []byte) error {
	for range 3 {
		if err := hashFile(root, b, h, buf); err != errChanged {
			return err
		}
	}
	return lockstep.Errorf(lockstep.EINVALID, "file changed during scan: %q", b.rel)
}

// hashFile computes b's blob oid from disk and records the stat of the file
// it actually read (fstat of the open file), so that the cache entry
// describes the content hashed.
func hashFile(root string, b *blobRef, h hashWriter, buf []byte) error {
	readCount.Add(1)
	f, err := os.Open(filepath.Join(root, filepath.FromSlash(b.rel)))
	if err != nil {
		return fmt.Errorf("scan: %w", err)
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fmt.Errorf("scan: fstat %s: %w", b.rel, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || uint32(st.Mode)&0o100 != b.st.mode&0o100 {
		// Replaced by something else, or its exec bit flipped: the tree
		// entry's mode came from the walk, so do not guess.
		return lockstep.Errorf(lockstep.EINVALID, "file changed during scan: %q", b.rel)
	}
	h.Reset()
	h.Write(objectHeader(plumbing.BlobObject, st.Size))
	n, err := io.CopyBuffer(h, io.LimitReader(f, st.Size+1), buf)
	if err != nil {
		return fmt.Errorf("scan: read %s: %w", b.rel, err)
	}
	if n != st.Size {
		return errChanged
	}
	h.Sum(b.oid[:0])
	b.st = statOf(&st)
	return nil
}

type hashWriter interface {
	io.Writer
	Reset()
	Sum([]byte) []byte
}

func objectHeader(t plumbing.ObjectType, size int64) []byte {
	hdr := append([]byte(t.String()), ' ')
	hdr = strconv.AppendInt(hdr, size, 10)
	return append(hdr, 0)
}

// build encodes n and its subdirectories bottom-up and records every tree
// and blob in the snapshot. A directory with nothing to store is left out
// (ok false), except the root, which is then the empty tree.
func (snap *Snapshot) build(n *dirNode, root bool) (h plumbing.Hash, ok bool, err error) {
	tb := &treeBuilder{h: sha1.New()}
	return tb.build(snap, n, root)
}

// treeBuilder holds what building the trees reuses: the hash and the
// encoding buffer. A tree's bytes are not kept: WritePack encodes again
// the few trees it sends, from their entries.
type treeBuilder struct {
	h   hashWriter
	buf []byte
	// record: list every directory that holds a tree in dirs (post-order),
	// for the stat cache's directory table.
	record bool
	dirs   []dirRec
}

func (tb *treeBuilder) build(snap *Snapshot, n *dirNode, root bool) (h plumbing.Hash, ok bool, err error) {
	entries := make([]treeEntry, 0, len(n.entries))
	for i := range n.entries {
		e := &n.entries[i]
		if e.sub != nil {
			h, ok, err := tb.build(snap, e.sub, false)
			if err != nil {
				return plumbing.ZeroHash, false, err
			}
			if !ok {
				continue
			}
			e.oid = h
		} else if e.blob == nil {
			// a tree from the stat cache: e.oid already
		} else {
			e.oid = e.blob.oid
			if _, dup := snap.blobs[e.oid]; !dup {
				snap.blobs[e.oid] = e.blob
			}
		}
		entries = append(entries, treeEntry{Name: e.name, Mode: e.mode, Hash: e.oid})
	}
	if len(entries) == 0 && !root {
		return plumbing.ZeroHash, false, nil
	}
	slices.SortFunc(entries, compareEntries)
	if tb.buf, err = appendTree(tb.buf[:0], entries); err != nil {
		return plumbing.ZeroHash, false, fmt.Errorf("scan: encode tree: %w", err)
	}
	treeEncodes.Add(1)
	tb.h.Reset()
	tb.h.Write(objectHeader(plumbing.TreeObject, int64(len(tb.buf))))
	tb.h.Write(tb.buf)
	tb.h.Sum(h[:0])
	if _, dup := snap.trees[h]; !dup {
		snap.trees[h] = &treeObj{entries: entries}
	}
	if tb.record {
		tb.dirs = append(tb.dirs, dirRec{rel: n.rel, oid: h})
	}
	return h, true, nil
}

// compareEntries orders tree entries as git does: byte-wise on the name,
// with a directory compared as if its name ended in "/". It is the order
// go-git's object.TreeEntrySorter checks, without building the "name/"
// strings.
func compareEntries(a, b treeEntry) int {
	an, bn := a.Name, b.Name
	m := min(len(an), len(bn))
	if c := strings.Compare(an[:m], bn[:m]); c != 0 {
		return c
	}
	ac, bc := nextByte(an, m, a.Mode), nextByte(bn, m, b.Mode)
	switch {
	case ac < bc:
		return -1
	case ac > bc:
		return 1
	}
	return len(an) - len(bn)
}

// nextByte is the byte after position m of an entry's sort name: the
// name's own byte, '/' just past a directory name, 0 past a file name.
func nextByte(name string, m int, mode filemode.FileMode) int {
	if m < len(name) {
		return int(name[m])
	}
	if mode == filemode.Dir {
		return '/'
	}
	return 0
}

// treeEntry is one entry of a tree object.
type treeEntry struct {
	Name string
	Mode filemode.FileMode
	Hash plumbing.Hash
}

// encodeTree encodes sorted entries as a git tree object ("MODE NAME\0"
// and the raw hash per entry, the mode in octal without leading zeros),
// byte for byte what go-git's object.Tree.Encode writes; our own so the
// client build does not link go-git's plumbing/object (and, through it,
// encoding/gob and openpgp, whose initialisers run at every start).
func encodeTree(entries []treeEntry) (*plumbing.MemoryObject, error) {
	buf, err := appendTree(nil, entries)
	if err != nil {
		return nil, err
	}
	obj := &plumbing.MemoryObject{}
	obj.SetType(plumbing.TreeObject)
	obj.SetSize(int64(len(buf)))
	if _, err := obj.Write(buf); err != nil {
		return nil, err
	}
	return obj, nil
}

// appendTree appends the encoding of sorted entries to buf.
func appendTree(buf []byte, entries []treeEntry) ([]byte, error) {
	n := 0
	for _, e := range entries {
		n += len(e.Name) + 8 + len(e.Hash)
	}
	buf = slices.Grow(buf, n)
	for _, e := range entries {
		if strings.IndexByte(e.Name, 0) >= 0 {
			return nil, fmt.Errorf("malformed filename %q", e.Name)
		}
		buf = strconv.AppendUint(buf, uint64(e.Mode), 8)
		buf = append(buf, ' ')
		buf = append(buf, e.Name...)
		buf = append(buf, 0)
		buf = append(buf, e.Hash[:]...)
	}
	return buf, nil
}
