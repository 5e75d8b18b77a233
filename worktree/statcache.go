package worktree

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/go-git/go-git/v5/plumbing"
	"golang.org/x/sys/unix"
)

// StatCache maps a path and its lstat to the blob oid of its content, so
// that Scan need not read files that did not change. It also remembers the
// trees of the last push the server accepted (SetKnown), which lets Plan
// negotiate in one round trip. It is not safe for concurrent use; one Scan
// at a time may use it.
//
// File format (varints as encoding/binary): magic "LKSC\x03", a
// little-endian uint32 length of the base, the base, a little-endian
// CRC-32C of everything before it; then any number of delta records.
// The base is: varint racy-git reference time (ns), uvarint count, then
// per entry, in walk order: uvarint length of the prefix shared with the
// previous path, uvarint suffix length, suffix, varint size, mtime, ctime
// (ns), uvarint inode, device, mode, 20-byte oid; then the known root tree
// (20 bytes, zero if none), uvarint count and the known trees (20 bytes
// each). A delta record is a uint32 length, the body and a CRC-32C of
// length and body; the body is what one Save changed: varint reference
// time of its scan, uvarint count of entries put (uvarint path length,
// path, then the entry as in the base), uvarint count of paths deleted
// (length, path), the known root, uvarint count and the trees added to
// the known set, uvarint count and the trees removed from it. Each entry
// keeps the reference time of the record it was written in (the racy-git
// rule is per entry), so a record appended by one push never vouches for
// entries another wrote. Save appends a record (O(changed) bytes) while
// the records stay under a quarter of the base and 32 in number, else
// rewrites the whole file (temporary file, then rename); a torn or
// corrupt record ends the load there (the entries it held are re-hashed)
// and the next Save rewrites the file. The version 2 format (the base
// alone, "LKSC\x02", its CRC at the end) is still read.
type StatCache struct {
	path string
	// written is the racy-git reference time (ns, filesystem clock) of the
	// entries: when the Scan that made them started. 0 (none, or the clock
	// could not be sampled) makes every entry racy.
	written int64
	entries map[string]cacheEntry
	// order lists the paths of entries in the order Save writes them:
	// walk order, which keeps a directory's files together for the prefix
	// compression, without sorting.
	order []string
	known *Known
	// watchToken is the watcher token to save with the cache (see
	// ScanOptions.Watcher); "" removes the saved one.
	watchToken string

	// What was loaded, for Save to append only the difference: the file's
	// valid length, its base's length, the records after the base and
	// their bytes, the entries and known trees as loaded (nil: Save
	// rewrites the file; set to nil by any in-place change).
	fileLen, baseLen, records, recordBytes int64
	prev                                   map[string]cacheEntry
	prevKnown                              *Known
}

type cacheEntry struct {
	st  fileStat
	oid plumbing.Hash
	// at is the racy-git reference time of the record the entry was
	// loaded from; 0: the cache's (written).
	at int64
}

// Records appended before Save rewrites the file whole.
const (
	maxCacheRecords   = 32
	cacheRecordShare  = 4 // records up to 1/cacheRecordShare of the base
	cacheRecordHeader = 4 // uint32 length
)

var (
	cacheMagic   = []byte("LKSC\x03")
	cacheMagicV2 = []byte("LKSC\x02")
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// OpenStatCache loads the cache stored at path. A missing, truncated or
// corrupt file gives an empty cache (the price is one full re-hash and one
// level-by-level negotiation), so the only errors are from reading an
// existing file.
func OpenStatCache(path string) (*StatCache, error) {
	c := &StatCache{path: path, entries: map[string]cacheEntry{}}
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
	c.entries, c.order, c.known, c.written = d.entries, d.order, d.known, d.written
	if d.v3 {
		c.fileLen, c.baseLen, c.records, c.recordBytes = d.valid, d.baseLen, d.records, d.recordBytes
		c.prev, c.prevKnown = c.entries, c.known
	}
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

// decoded is a loaded cache file.
type decoded struct {
	entries map[string]cacheEntry
	order   []string
	known   *Known
	written int64 // the last record's reference time
	v3      bool
	// valid is the length of the file up to the last good record; the
	// base's length (header included); the records after it and their
	// bytes.
	valid, baseLen, records, recordBytes int64
}

func decodeCache(data []byte) (d decoded, ok bool) {
	switch {
	case bytes.HasPrefix(data, cacheMagicV2):
		if len(data) < len(cacheMagicV2)+4 {
			return d, false
		}
		body, sum := data[:len(data)-4], data[len(data)-4:]
		if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(sum) {
			return d, false
		}
		d.entries, d.order, d.known, d.written, ok = decodeBase(body[len(cacheMagicV2):])
		return d, ok
	case bytes.HasPrefix(data, cacheMagic):
	default:
		return d, false
	}
	h := len(cacheMagic)
	if len(data) < h+4+4 {
		return d, false
	}
	n := int64(binary.LittleEndian.Uint32(data[h:]))
	end := int64(h) + 4 + n
	if end+4 > int64(len(data)) || crc32.Checksum(data[:end], castagnoli) != binary.LittleEndian.Uint32(data[end:]) {
		return d, false
	}
	d.entries, d.order, d.known, d.written, ok = decodeBase(data[h+4 : end])
	if !ok {
		return d, false
	}
	d.v3, d.baseLen, d.valid = true, end+4, end+4
	base := d.written
	for i := range d.order { // base entries keep the base's time
		e := d.entries[d.order[i]]
		e.at = base
		d.entries[d.order[i]] = e
	}
	rest := data[d.valid:]
	deleted := false
	for len(rest) >= cacheRecordHeader+4 {
		n := int64(binary.LittleEndian.Uint32(rest))
		if n > int64(len(rest))-cacheRecordHeader-4 {
			break // torn
		}
		rec := rest[:cacheRecordHeader+n]
		if crc32.Checksum(rec, castagnoli) != binary.LittleEndian.Uint32(rest[cacheRecordHeader+n:]) {
			break
		}
		del, ok := d.apply(rec[cacheRecordHeader:])
		if !ok {
			break // a record that checks but does not parse: stop, as for a torn one
		}
		deleted = deleted || del
		size := cacheRecordHeader + n + 4
		d.valid += size
		d.records++
		d.recordBytes += size
		rest = rest[size:]
	}
	if deleted {
		d.order = slices.DeleteFunc(d.order, func(p string) bool { _, ok := d.entries[p]; return !ok })
	}
	return d, true
}

// apply applies one delta record's body. A record is applied whole or
// not at all: it is parsed before anything changes.
func (d *decoded) apply(body []byte) (deleted, ok bool) {
	r := &reader{b: body}
	w := r.varint()
	np := r.uvarint()
	if r.bad || np > uint64(len(r.b)) {
		return false, false
	}
	type put struct {
		p string
		e cacheEntry
	}
	puts := make([]put, 0, np)
	for range np {
		l := r.uvarint()
		if r.bad || l > uint64(len(r.b)) {
			return false, false
		}
		p := string(r.b[:l])
		r.b = r.b[l:]
		var e cacheEntry
		e.st.size, e.st.mtime, e.st.ctime = r.varint(), r.varint(), r.varint()
		e.st.ino, e.st.dev, e.st.mode = r.uvarint(), r.uvarint(), uint32(r.uvarint())
		e.oid, e.at = r.hash(), w
		puts = append(puts, put{p, e})
	}
	nd := r.uvarint()
	if r.bad || nd > uint64(len(r.b)) {
		return false, false
	}
	dels := make([]string, 0, nd)
	for range nd {
		l := r.uvarint()
		if r.bad || l > uint64(len(r.b)) {
			return false, false
		}
		dels = append(dels, string(r.b[:l]))
		r.b = r.b[l:]
	}
	root := r.hash()
	var add, rem []plumbing.Hash
	for _, list := range []*[]plumbing.Hash{&add, &rem} {
		n := r.uvarint()
		if r.bad || n > uint64(len(r.b))/20 {
			return false, false
		}
		for range n {
			*list = append(*list, r.hash())
		}
	}
	if r.bad || len(r.b) != 0 {
		return false, false
	}
	for _, x := range puts {
		if _, ok := d.entries[x.p]; !ok {
			d.order = append(d.order, x.p)
		}
		d.entries[x.p] = x.e
	}
	for _, p := range dels {
		if _, ok := d.entries[p]; ok {
			delete(d.entries, p)
			deleted = true
		}
	}
	if root.IsZero() {
		d.known = nil
	} else {
		if d.known == nil {
			d.known = &Known{trees: map[plumbing.Hash]struct{}{}}
		}
		d.known.Root = root
		for _, h := range rem {
			delete(d.known.trees, h)
		}
		for _, h := range add {
			d.known.trees[h] = struct{}{}
		}
	}
	d.written = w
	return deleted, true
}

// decodeBase decodes the base (v2: everything between magic and CRC).
func decodeBase(body []byte) (entries map[string]cacheEntry, order []string, known *Known, written int64, ok bool) {
	r := &reader{b: body}
	written = r.varint()
	n := r.uvarint()
	if r.bad || n > uint64(len(r.b)) {
		return
	}
	// The paths are rebuilt into one arena, converted to a string once and
	// sliced: one allocation instead of one per path.
	arena := make([]byte, 0, len(r.b))
	ends := make([]int, n)
	vals := make([]cacheEntry, n)
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
	if r.bad || len(r.b) != 0 {
		return nil, nil, nil, 0, false
	}
	names := string(arena)
	entries = make(map[string]cacheEntry, n)
	order = make([]string, n)
	begin := 0
	for i := range n {
		p := names[begin:ends[i]]
		begin = ends[i]
		order[i] = p
		entries[p] = vals[i]
	}
	return entries, order, known, written, true
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
func (c *StatCache) Len() int { return len(c.entries) }

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
	e, ok := c.entries[rel]
	if !ok || e.st != st || c.racy(e) {
		return cacheEntry{}, false
	}
	return e, true
}

// racy reports whether e's file may have changed within the timestamp
// tick of the scan that recorded it: its mtime is not strictly older
// than that scan's start.
func (c *StatCache) racy(e cacheEntry) bool {
	at := e.at
	if at == 0 {
		at = c.written
	}
	return e.st.mtime >= at
}

// replace makes the regular files of the last scan the cache's content;
// paths that disappeared are dropped. The entries keep the racy-git time
// of the scan (started), not that of the cache they were loaded with.
func (c *StatCache) replace(files []*blobRef, started int64) {
	c.written = started
	m := make(map[string]cacheEntry, len(files))
	order := make([]string, len(files))
	for i, b := range files {
		m[b.rel] = cacheEntry{st: b.st, oid: b.oid}
		order[i] = b.rel
	}
	c.entries, c.order = m, order
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
	if !c.appendRecord() {
		if err := c.rewrite(); err != nil {
			return err
		}
	}
	if c.watchToken != "" {
		// Written after the cache: a crash in between leaves the older
		// token, whose dirty set is a superset, or none.
		return c.saveWatchToken()
	}
	return nil
}

// rewrite writes the whole cache (temporary file, then rename) as one
// base. Its reference time is the oldest of the entries' (after a scan,
// all of them are the scan's).
func (c *StatCache) rewrite() error {
	paths := c.order
	if len(paths) != len(c.entries) { // entries changed another way (tests)
		paths = slices.Sorted(maps.Keys(c.entries))
	}
	written := c.written
	for _, e := range c.entries {
		if e.at != 0 && e.at < written {
			written = e.at
		}
	}
	buf := make([]byte, 0, 64+len(paths)*48)
	buf = append(buf, cacheMagic...)
	buf = binary.LittleEndian.AppendUint32(buf, 0) // the base's length, below
	buf = binary.AppendVarint(buf, written)
	buf = binary.AppendUvarint(buf, uint64(len(paths)))
	prev := ""
	for _, p := range paths {
		e := c.entries[p]
		shared := commonPrefix(prev, p)
		buf = binary.AppendUvarint(buf, uint64(shared))
		buf = binary.AppendUvarint(buf, uint64(len(p)-shared))
		buf = append(buf, p[shared:]...)
		buf = appendEntry(buf, e)
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
	h := len(cacheMagic)
	if len(buf)-h-4 > 1<<32-1 {
		return fmt.Errorf("save stat cache: %d bytes is too large", len(buf))
	}
	binary.LittleEndian.PutUint32(buf[h:], uint32(len(buf)-h-4))
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
	for p, e := range c.entries {
		if e.at != 0 {
			e.at = 0
			c.entries[p] = e
		}
	}
	c.written = written
	c.fileLen, c.baseLen, c.records, c.recordBytes = int64(len(buf)), int64(len(buf)), 0, 0
	c.prev, c.prevKnown = c.entries, c.known
	return nil
}

func appendEntry(buf []byte, e cacheEntry) []byte {
	buf = binary.AppendVarint(buf, e.st.size)
	buf = binary.AppendVarint(buf, e.st.mtime)
	buf = binary.AppendVarint(buf, e.st.ctime)
	buf = binary.AppendUvarint(buf, e.st.ino)
	buf = binary.AppendUvarint(buf, e.st.dev)
	buf = binary.AppendUvarint(buf, uint64(e.st.mode))
	return append(buf, e.oid[:]...)
}

// appendRecord appends to the file what changed since it was loaded or
// last saved: the entries put (changed, new, or racy before and
// re-checked by this scan), the paths deleted and the known trees' change.
// It reports false, having written nothing or a torn record the next load
// ignores, when the whole file must be rewritten instead: nothing loaded
// to compare with (or the entries changed in place), too many or too
// large records, or a file that is not the one loaded.
func (c *StatCache) appendRecord() bool {
	if c.prev == nil || c.records >= maxCacheRecords {
		return false
	}
	buf := binary.LittleEndian.AppendUint32(nil, 0) // length, below
	buf = binary.AppendVarint(buf, c.written)
	var puts []string
	for _, p := range c.order {
		e := c.entries[p]
		old, ok := c.prev[p]
		if !ok || old.st != e.st || old.oid != e.oid || c.racy(old) {
			puts = append(puts, p)
		}
	}
	if len(c.order) != len(c.entries) {
		return false
	}
	buf = binary.AppendUvarint(buf, uint64(len(puts)))
	for _, p := range puts {
		buf = binary.AppendUvarint(buf, uint64(len(p)))
		buf = append(buf, p...)
		buf = appendEntry(buf, c.entries[p])
	}
	var dels []string
	for p := range c.prev {
		if _, ok := c.entries[p]; !ok {
			dels = append(dels, p)
		}
	}
	buf = binary.AppendUvarint(buf, uint64(len(dels)))
	for _, p := range dels {
		buf = binary.AppendUvarint(buf, uint64(len(p)))
		buf = append(buf, p...)
	}
	var add, rem []plumbing.Hash
	root := plumbing.ZeroHash
	if k := c.known; k != nil {
		root = k.Root
		for h := range k.trees {
			if c.prevKnown == nil || !c.prevKnown.has(h) {
				add = append(add, h)
			}
		}
	}
	if pk := c.prevKnown; pk != nil {
		for h := range pk.trees {
			if c.known == nil || !c.known.has(h) {
				rem = append(rem, h)
			}
		}
	}
	buf = append(buf, root[:]...)
	for _, list := range [][]plumbing.Hash{add, rem} {
		buf = binary.AppendUvarint(buf, uint64(len(list)))
		for _, h := range list {
			buf = append(buf, h[:]...)
		}
	}
	size := int64(len(buf)) + 4
	if (c.recordBytes+size)*cacheRecordShare > c.baseLen {
		return false
	}
	binary.LittleEndian.PutUint32(buf, uint32(len(buf)-cacheRecordHeader))
	buf = binary.LittleEndian.AppendUint32(buf, crc32.Checksum(buf, castagnoli))
	f, err := os.OpenFile(c.path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return false
	}
	st, err := f.Stat()
	if err != nil || st.Size() != c.fileLen {
		f.Close()
		return false
	}
	_, err = f.Write(buf)
	if errors.Join(err, f.Close()) != nil {
		return false // a torn record: ignored by the next load, and rewritten now
	}
	c.fileLen += size
	c.records++
	c.recordBytes += size
	c.prev, c.prevKnown = c.entries, c.known
	return true
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
	for p, e := range c.entries {
		if e.st.dev != from {
			continue
		}
		if e.st.ctime >= notBefore {
			delete(c.entries, p)
			continue
		}
		e.st.dev = to
		c.entries[p] = e
		n++
	}
	if len(c.order) != len(c.entries) {
		c.order = slices.DeleteFunc(c.order, func(p string) bool { _, ok := c.entries[p]; return !ok })
	}
	c.prev = nil // changed in place: the next Save rewrites the file
	return n
}
