package worktree

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"math"
	"os"
	"path/filepath"

	"github.com/go-git/go-git/v5/plumbing"
	"golang.org/x/sys/unix"
)

// StatCache maps a path and its lstat to the blob oid of its content, so
// that Scan need not read files that did not change. It also remembers the
// trees of the last push the server accepted (SetKnown), which lets Plan
// negotiate in one round trip. It is not safe for concurrent use; one Scan
// at a time may use it.
//
// File format (varints as encoding/binary): magic "LKSC\x03", varint
// racy-git reference time (ns), uvarint count, then per entry, in walk
// order: uvarint length of the prefix shared with the previous path,
// uvarint suffix length, suffix, varint size, mtime, ctime (ns), uvarint
// inode, device, mode, 20-byte oid; then the known root tree (20 bytes,
// zero if none), uvarint count and the known trees (20 bytes each); then
// the directory table: uvarint count, then per directory that holds a tree
// (the root is ""), prefix-compressed as the paths above, its tree oid (20
// bytes); then a little-endian CRC-32C of everything before it. A version
// 2 file ("LKSC\x02", no directory table) is read with an empty table.
type StatCache struct {
	path string
	// written is the racy-git reference time (ns, filesystem clock) of the
	// entries: when the Scan that made them started. 0 (none, or the clock
	// could not be sampled) makes every entry racy.
	written int64
	// order lists the paths in the order Save writes them: walk order,
	// which keeps a directory's files together for the prefix
	// compression, without sorting; vals[i] is the entry of order[i].
	order []string
	vals  []cacheEntry
	// index maps a path to its position in order: built from the loaded
	// file only (lookup needs it), never for what a Scan records, which
	// is only saved.
	index map[string]int32
	known *Known
	// dirs and dirOIDs are the directory table: every directory of the
	// last scan that holds a tree, and that tree's oid. A watched Scan
	// re-encodes only the directories above its changed paths and takes
	// every other tree oid from here. Empty means unknown: a watched Scan
	// then walks everything.
	dirs    []string
	dirOIDs []plumbing.Hash
	// watchToken is the watcher token to save with the cache (see
	// ScanOptions.Watcher); "" removes the saved one.
	watchToken string
}

type cacheEntry struct {
	st  fileStat
	oid plumbing.Hash
}

var (
	cacheMagic   = []byte("LKSC\x03")
	cacheMagicV2 = []byte("LKSC\x02") // no directory table
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// OpenStatCache loads the cache stored at path. A missing, truncated or
// corrupt file gives an empty cache (the price is one full re-hash and one
// level-by-level negotiation), so the only errors are from reading an
// existing file.
func OpenStatCache(path string) (*StatCache, error) {
	c := &StatCache{path: path}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open stat cache: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("open stat cache: %w", err)
	}
	data := make([]byte, fi.Size())
	if _, err := f.ReadAt(data, 0); err != nil {
		return nil, fmt.Errorf("open stat cache: %w", err)
	}
	d, ok := decodeCache(data)
	if !ok {
		return c, nil
	}
	c.order, c.vals, c.index, c.known, c.written = d.order, d.vals, d.index, d.known, d.written
	c.dirs, c.dirOIDs = d.dirs, d.dirOIDs
	return c, nil
}

// clock samples the filesystem clock by setting the cache file's times to
// now (creating it, empty, if needed) and reading them back: file mtimes
// come from that (coarse) clock, not from time.Now. It returns 0 on any
// error.
func (c *StatCache) clock() int64 {
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, c.path, nil, 0); err != nil {
		if os.MkdirAll(filepath.Dir(c.path), 0o755) != nil {
			return 0
		}
		f, err := os.OpenFile(c.path, os.O_WRONLY|os.O_CREATE, 0o644)
		if err != nil {
			return 0
		}
		f.Close()
	}
	var st unix.Stat_t
	if unix.Stat(c.path, &st) != nil {
		return 0
	}
	return st.Mtim.Nano()
}

// decoded is the content of a cache file.
type decoded struct {
	order   []string
	vals    []cacheEntry
	index   map[string]int32
	known   *Known
	written int64
	dirs    []string
	dirOIDs []plumbing.Hash
}

func decodeCache(data []byte) (d decoded, ok bool) {
	if len(data) < len(cacheMagic)+4 {
		return
	}
	v3 := bytes.HasPrefix(data, cacheMagic)
	if !v3 && !bytes.HasPrefix(data, cacheMagicV2) {
		return
	}
	var (
		order   []string
		vals    []cacheEntry
		index   map[string]int32
		known   *Known
		written int64
	)
	body, sum := data[:len(data)-4], data[len(data)-4:]
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(sum) {
		return
	}
	r := &reader{b: body[len(cacheMagic):]}
	written = r.varint()
	n := r.uvarint()
	if r.bad || n > uint64(len(r.b)) || n > math.MaxInt32 {
		return
	}
	// The paths are rebuilt into one arena, converted to a string once and
	// sliced: one allocation instead of one per path.
	arena := make([]byte, 0, len(r.b))
	ends := make([]int, n)
	vals = make([]cacheEntry, n)
	prevStart := 0
	for i := range n {
		shared, suffix := r.uvarint(), r.uvarint()
		prevLen := 0
		if i > 0 {
			prevLen = ends[i-1] - prevStart
		}
		if r.bad || shared > uint64(prevLen) || suffix > uint64(len(r.b)) {
			return
		}
		start := len(arena)
		arena = append(arena, arena[prevStart:prevStart+int(shared)]...)
		arena = append(arena, r.b[:suffix]...)
		r.b = r.b[suffix:]
		ends[i], prevStart = len(arena), start
		e := &vals[i]
		e.st.size, e.st.mtime, e.st.ctime = r.varint(), r.varint(), r.varint()
		e.st.ino, e.st.dev, e.st.mode = r.uvarint(), r.uvarint(), uint32(r.uvarint())
		e.oid = r.hash()
		if r.bad {
			return
		}
	}
	root := r.hash()
	nt := r.uvarint()
	if r.bad || nt > uint64(len(r.b))/20 {
		return
	}
	if !root.IsZero() {
		known = &Known{Root: root, trees: make(map[plumbing.Hash]struct{}, nt)}
	}
	for range nt {
		h := r.hash()
		if known != nil {
			known.trees[h] = struct{}{}
		}
	}
	var dirs []string
	var dirOIDs []plumbing.Hash
	if v3 {
		nd := r.uvarint()
		if r.bad || nd > uint64(len(r.b))/22 {
			return
		}
		dirs, dirOIDs = make([]string, nd), make([]plumbing.Hash, nd)
		prev := ""
		for i := range nd {
			shared, suffix := r.uvarint(), r.uvarint()
			if r.bad || shared > uint64(len(prev)) || suffix > uint64(len(r.b)) {
				return
			}
			p := prev[:shared] + string(r.b[:suffix])
			r.b = r.b[suffix:]
			dirs[i], dirOIDs[i], prev = p, r.hash(), p
		}
	}
	if r.bad || len(r.b) != 0 {
		return decoded{}, false
	}
	names := string(arena)
	index = make(map[string]int32, n)
	order = make([]string, n)
	begin := 0
	for i := range n {
		p := names[begin:ends[i]]
		begin = ends[i]
		order[i] = p
		index[p] = int32(i)
	}
	return decoded{order: order, vals: vals, index: index, known: known, written: written, dirs: dirs, dirOIDs: dirOIDs}, true
}

type reader struct {
	b   []byte
	bad bool
}

func (r *reader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.bad = true
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) hash() (h plumbing.Hash) {
	if len(r.b) < len(h) {
		r.bad = true
		return h
	}
	copy(h[:], r.b)
	r.b = r.b[len(h):]
	return h
}

func (r *reader) varint() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.bad = true
		return 0
	}
	r.b = r.b[n:]
	return v
}

// Len returns the number of paths in the cache (regular files and
// symlinks: the watcher rebuilds a tree from it).
func (c *StatCache) Len() int { return len(c.order) }

// get returns the entry of rel, stat unchecked.
func (c *StatCache) get(rel string) (cacheEntry, bool) {
	i, ok := c.index[rel]
	if !ok {
		return cacheEntry{}, false
	}
	return c.vals[i], true
}

// set records e for rel (tests and Redevice; a Scan replaces all).
func (c *StatCache) set(rel string, e cacheEntry) {
	c.needIndex()
	if i, ok := c.index[rel]; ok {
		c.vals[i] = e
		return
	}
	if c.index == nil { // empty
		c.index = map[string]int32{}
	}
	c.index[rel] = int32(len(c.order))
	c.order = append(c.order, rel)
	c.vals = append(c.vals, e)
}

// reindex rebuilds index from order.
func (c *StatCache) reindex() {
	c.index = make(map[string]int32, len(c.order))
	for i, p := range c.order {
		c.index[p] = int32(i)
	}
}

// Known returns the trees recorded by SetKnown (saved with the cache), or
// nil: the hint for PlanOptions.Known.
func (c *StatCache) Known() *Known { return c.known }

// SetKnown records k, normally Snapshot.Known of the snapshot the server
// has just committed, to be saved with the cache.
func (c *StatCache) SetKnown(k *Known) { c.known = k }

// lookup returns the entry for rel if its stat matches st and the entry is
// not racy: the file's mtime must be strictly older than the cache's write
// time, or a same-size rewrite within the same timestamp tick could hide.
func (c *StatCache) lookup(rel string, st fileStat) (cacheEntry, bool) {
	if c == nil {
		return cacheEntry{}, false
	}
	e, ok := c.get(rel)
	if !ok || e.st != st || st.mtime >= c.written {
		return cacheEntry{}, false
	}
	return e, true
}

// replace makes the regular files and directories of the last scan the
// cache's content; paths that disappeared are dropped. The entries keep
// the racy-git time of the scan (started), not that of the cache they were
// loaded with. It builds no index (a push saves the cache and exits): a
// later Scan with the same StatCache rebuilds it first (needIndex).
func (c *StatCache) replace(files []*blobRef, dirs []dirRec, started int64) {
	c.written = started
	c.dirs, c.dirOIDs = make([]string, len(dirs)), make([]plumbing.Hash, len(dirs))
	for i, d := range dirs {
		c.dirs[i], c.dirOIDs[i] = d.rel, d.oid
	}
	order := make([]string, len(files))
	vals := make([]cacheEntry, len(files))
	for i, b := range files {
		order[i] = b.rel
		vals[i] = cacheEntry{st: b.st, oid: b.oid}
	}
	c.order, c.vals, c.index = order, vals, nil
}

// needIndex builds the index if replace dropped it: before a Scan, which
// looks paths up from several goroutines and must not build it there.
func (c *StatCache) needIndex() {
	if c != nil && c.index == nil && len(c.order) > 0 {
		c.reindex()
	}
}

// Save writes the cache to its path (temporary file, then rename),
// creating the parent directory if needed. The entries are stored with the
// filesystem time sampled when the Scan that produced them started: at
// the next load, an entry is trusted only if the file's mtime is strictly
// older than that (the racy-git rule), so a rewrite at any moment during or
// after that Scan cannot hide behind an unchanged stat.
func (c *StatCache) Save() error {
	if err := os.MkdirAll(filepath.Dir(c.path), 0o755); err != nil {
		return fmt.Errorf("save stat cache: %w", err)
	}
	if c.watchToken == "" {
		// A watcher token must never describe a newer state than the
		// cache: drop it before the cache changes.
		if err := os.Remove(c.watchPath()); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("save stat cache: %w", err)
		}
	}
	paths := c.order
	buf := make([]byte, 0, 64+len(paths)*48)
	buf = append(buf, cacheMagic...)
	buf = binary.AppendVarint(buf, c.written)
	buf = binary.AppendUvarint(buf, uint64(len(paths)))
	prev := ""
	for i, p := range paths {
		e := &c.vals[i]
		shared := commonPrefix(prev, p)
		buf = binary.AppendUvarint(buf, uint64(shared))
		buf = binary.AppendUvarint(buf, uint64(len(p)-shared))
		buf = append(buf, p[shared:]...)
		buf = binary.AppendVarint(buf, e.st.size)
		buf = binary.AppendVarint(buf, e.st.mtime)
		buf = binary.AppendVarint(buf, e.st.ctime)
		buf = binary.AppendUvarint(buf, e.st.ino)
		buf = binary.AppendUvarint(buf, e.st.dev)
		buf = binary.AppendUvarint(buf, uint64(e.st.mode))
		buf = append(buf, e.oid[:]...)
		prev = p
	}
	if k := c.known; k != nil {
		buf = append(buf, k.Root[:]...)
		buf = binary.AppendUvarint(buf, uint64(len(k.trees)))
		for h := range k.trees {
			buf = append(buf, h[:]...)
		}
	} else {
		buf = append(buf, plumbing.ZeroHash[:]...)
		buf = binary.AppendUvarint(buf, 0)
	}
	buf = binary.AppendUvarint(buf, uint64(len(c.dirs)))
	prev = ""
	for i, p := range c.dirs {
		shared := commonPrefix(prev, p)
		buf = binary.AppendUvarint(buf, uint64(shared))
		buf = binary.AppendUvarint(buf, uint64(len(p)-shared))
		buf = append(buf, p[shared:]...)
		buf = append(buf, c.dirOIDs[i][:]...)
		prev = p
	}
	buf = binary.LittleEndian.AppendUint32(buf, crc32.Checksum(buf, castagnoli))

	f, err := os.CreateTemp(filepath.Dir(c.path), filepath.Base(c.path)+".tmp*")
	if err != nil {
		return fmt.Errorf("save stat cache: %w", err)
	}
	tmp := f.Name()
	_, err = f.Write(buf)
	if err = errors.Join(err, f.Close()); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("save stat cache: %w", err)
	}
	if err := os.Rename(tmp, c.path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("save stat cache: %w", err)
	}
	if c.watchToken != "" {
		// Written after the cache: a crash in between leaves the older
		// token, whose dirty set is a superset, or none.
		return c.saveWatchToken()
	}
	return nil
}

func commonPrefix(a, b string) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// Redevice moves the entries on device from to device to, after the
// directory was replaced by a snapshot of itself on another device
// number (a btrfs restore makes the directory a new subvolume, with a
// new st_dev, keeping every inode number, mtime and ctime). Entries whose
// ctime is at or after notBefore (ns) are dropped instead: a file changed
// within the same timestamp tick as the snapshot was taken could come
// back with its cached stat and other content. It returns how many
// entries were moved.
func (c *StatCache) Redevice(from, to uint64, notBefore int64) int {
	n := 0
	order, vals := c.order[:0], c.vals[:0]
	for i, p := range c.order {
		e := c.vals[i]
		if e.st.dev == from {
			if e.st.ctime >= notBefore {
				continue
			}
			e.st.dev = to
			n++
		}
		order, vals = append(order, p), append(vals, e)
	}
	c.order, c.vals = order, vals
	c.reindex()
	// The tree oids held the dropped entries: the next watched Scan walks
	// everything (no file is hashed for it).
	c.dirs, c.dirOIDs = nil, nil
	return n
}
