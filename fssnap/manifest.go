package fssnap

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lockstep-hq/lockstep"
)

// EntryType is the kind of a manifest entry.
type EntryType string

// Entry types.
const (
	TypeFile    EntryType = "file"
	TypeDir     EntryType = "dir"
	TypeSymlink EntryType = "symlink"
	TypeOther   EntryType = "other" // fifo, socket, device: type, mode and rdev only
)

// Entry describes one path of a manifest. Path is slash-separated and
// relative to the root; the root itself is ".".
type Entry struct {
	Path   string    `json:"path"`
	Type   EntryType `json:"type"`
	Mode   uint32    `json:"mode"` // permission bits with setuid, setgid, sticky (07777)
	UID    uint32    `json:"uid"`
	GID    uint32    `json:"gid"`
	Size   int64     `json:"size"`
	Hash   string    `json:"hash,omitempty"`   // sha256 of the content, files only
	Target string    `json:"target,omitempty"` // symlinks only
	Rdev   uint64    `json:"rdev,omitempty"`   // TypeOther only
	// Fast-path fields: when they all match, content is not re-hashed.
	MtimeNs int64  `json:"mtime_ns"`
	CtimeNs int64  `json:"ctime_ns"`
	Ino     uint64 `json:"ino"`
}

// Manifest is the complete description of a directory tree at one moment.
type Manifest struct {
	Root      string    `json:"root"`
	CreatedAt time.Time `json:"created_at"`
	Entries   []Entry   `json:"entries"` // sorted by Path
	// Hashed counts the files BuildManifest read (the others reused the
	// previous manifest's hash); not stored.
	Hashed int `json:"-"`

	index map[string]int
	kids  map[string][]string // see children
}

// Lookup returns the entry for a path.
func (m *Manifest) Lookup(p string) (Entry, bool) {
	if m.index == nil {
		m.index = make(map[string]int, len(m.Entries))
		for i, e := range m.Entries {
			m.index[e.Path] = i
		}
	}
	i, ok := m.index[p]
	if !ok {
		return Entry{}, false
	}
	return m.Entries[i], true
}

// children returns the names of the entries under each directory, built
// once per manifest (a run's forensics and verify walk with the same one;
// like Lookup's index, the first call must not race with another).
func (m *Manifest) children() map[string][]string {
	if m.kids == nil {
		m.kids = make(map[string][]string)
		for _, e := range m.Entries {
			if e.Path != "." {
				d, name := path.Split(e.Path)
				d = strings.TrimSuffix(d, "/")
				if d == "" {
					d = "."
				}
				m.kids[d] = append(m.kids[d], name)
			}
		}
	}
	return m.kids
}

// Files returns the number of regular files and their total size.
func (m *Manifest) Files() (n int, bytes int64) {
	for _, e := range m.Entries {
		if e.Type == TypeFile {
			n++
			bytes += e.Size
		}
	}
	return n, bytes
}

// Change is one path that exists on both sides but differs.
type Change struct {
	Path string `json:"path"`
	What string `json:"what"` // comma-separated: type, mode, owner, size, content, mtime, target, rdev
}

// Residue is what differs between a directory and a manifest.
type Residue struct {
	Added   []string `json:"added,omitempty"`
	Removed []string `json:"removed,omitempty"`
	Changed []Change `json:"changed,omitempty"`
	Hashed  int      `json:"hashed"` // files whose content had to be hashed
}

// Clean reports whether nothing differs.
func (r Residue) Clean() bool {
	return len(r.Added) == 0 && len(r.Removed) == 0 && len(r.Changed) == 0
}

func (r Residue) String() string {
	if r.Clean() {
		return "clean"
	}
	return fmt.Sprintf("%d added, %d removed, %d changed", len(r.Added), len(r.Removed), len(r.Changed))
}

// racyWindow: a file whose ctime is this close to (or after) the moment its
// manifest was started may have been modified within the same timestamp tick
// after it was recorded, so its stat cannot vouch for its content. Kernel
// file timestamps come from a coarse clock (one jiffy, up to 10 ms).
const racyWindow = 20 * time.Millisecond

// BuildManifest walks dir and hashes every file. prev, when not nil, is an
// earlier manifest of the same directory: files whose inode, size, mtime and
// ctime are unchanged (and not racy) reuse its hash instead of being read.
func BuildManifest(dir string, prev *Manifest) (*Manifest, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	return buildManifest(abs, func() *Manifest { return prev })
}

// buildManifest is BuildManifest with the previous manifest asked for
// when the walk starts (it may still be loading).
func buildManifest(abs string, prevOf func() *Manifest) (*Manifest, error) {
	return buildManifestAt(abs, time.Now(), prevOf)
}

// buildManifestAt walks abs with start as the manifest's racy reference:
// a moment no later than the one from which abs's content was fixed (the
// walk's start, or a read-only snapshot's creation).
func buildManifestAt(abs string, start time.Time, prevOf func() *Manifest) (*Manifest, error) {
	prev := prevOf()
	entries, err := walkPrev(abs, prev)
	if err != nil {
		return nil, err
	}
	var todo []int
	for i := range entries {
		e := &entries[i]
		if e.Type != TypeFile {
			continue
		}
		if prev != nil {
			if p, ok := prev.Lookup(e.Path); ok && p.Type == TypeFile && statSame(p, *e) && !racy(p, prev.CreatedAt) {
				e.Hash = p.Hash
				continue
			}
		}
		todo = append(todo, i)
	}
	if err := hashAll(abs, entries, todo); err != nil {
		return nil, err
	}
	return &Manifest{Root: abs, CreatedAt: start, Entries: entries, Hashed: len(todo)}, nil
}

// Verify compares dir with want. Metadata is compared for every path;
// content is hashed only for files whose inode, size, mtime or ctime differ
// from want, or whose entry in want is racy.
func Verify(dir string, want *Manifest) (Residue, error) { return verify(dir, want, false) }

// VerifyKnownDirs is Verify with want's names of the directories that did
// not change: a directory whose inode, mtime and ctime are those want
// recorded (and not racy: want was started more than the racy window
// after its ctime) is not read, its entries are lstat'ed by the names
// want lists, as a take's walk does with the previous manifest.
//
// It is the same guard as Verify. Every path want names is still
// lstat'ed and compared (type, mode, owner, size, target; content hashed
// when its stat differs or is racy). A path that is not in want can only
// appear by an operation on its directory (create, link, rename, mkdir,
// mknod, symlink), and every such operation sets the directory's ctime
// to the current time: the directory is then read in full. Setting a
// directory's mtime back (utimes) moves its ctime too; ctime itself can
// only be set back by setting the system clock (CAP_SYS_TIME), the same
// assumption every take makes. A run's rollback can therefore verify
// with it: whatever the restore (or anything else) wrote, wherever it
// wrote it, differs here as it does in Verify.
func VerifyKnownDirs(dir string, want *Manifest) (Residue, error) { return verify(dir, want, true) }

func verify(dir string, want *Manifest, known bool) (Residue, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return Residue{}, err
	}
	var prev *Manifest
	if known {
		prev = want
	}
	got, err := walkPrev(abs, prev)
	if err != nil {
		return Residue{}, err
	}
	return compareWalk(abs, got, want)
}

// verifyLazy is Verify with the manifest built while dir is walked (a
// lazily taken snapshot's manifest is a walk of the snapshot: the two
// walks overlap).
func verifyLazy(abs string, wantOf func() (*Manifest, error)) (*Manifest, Residue, error) {
	type built struct {
		m   *Manifest
		err error
	}
	c := make(chan built, 1)
	go func() {
		m, err := wantOf()
		c <- built{m, err}
	}()
	got, werr := walk(abs)
	b := <-c
	if b.err != nil || b.m == nil {
		return b.m, Residue{}, b.err
	}
	if werr != nil {
		return b.m, Residue{}, werr
	}
	res, err := compareWalk(abs, got, b.m)
	return b.m, res, err
}

// compareWalk is Verify's comparison of abs's walk with want.
func compareWalk(abs string, got []Entry, want *Manifest) (Residue, error) {
	var res Residue
	var todo []int
	whats := make(map[string][]string)
	seen := make(map[string]bool, len(got))
	for i, g := range got {
		seen[g.Path] = true
		w, ok := want.Lookup(g.Path)
		if !ok {
			res.Added = append(res.Added, g.Path)
			continue
		}
		if d := metaDiff(w, g); len(d) > 0 {
			whats[g.Path] = d
		}
		if g.Type == TypeFile && w.Type == TypeFile && g.Size == w.Size && (!statSame(w, g) || racy(w, want.CreatedAt)) {
			todo = append(todo, i)
		}
	}
	if err := hashAll(abs, got, todo); err != nil {
		return Residue{}, err
	}
	res.Hashed = len(todo)
	for _, i := range todo {
		g := got[i]
		w, _ := want.Lookup(g.Path)
		switch {
		case g.Hash != w.Hash:
			whats[g.Path] = append(whats[g.Path], "content")
		case g.MtimeNs != w.MtimeNs:
			whats[g.Path] = append(whats[g.Path], "mtime")
		}
	}
	for p, w := range whats {
		res.Changed = append(res.Changed, Change{Path: p, What: strings.Join(w, ",")})
	}
	for _, w := range want.Entries {
		if !seen[w.Path] {
			res.Removed = append(res.Removed, w.Path)
		}
	}
	sort.Slice(res.Changed, func(i, j int) bool { return res.Changed[i].Path < res.Changed[j].Path })
	return res, nil
}

// metaDiff compares everything but content and mtime.
func metaDiff(w, g Entry) []string {
	if w.Type != g.Type {
		return []string{"type"}
	}
	var d []string
	if w.Mode != g.Mode {
		d = append(d, "mode")
	}
	if w.UID != g.UID || w.GID != g.GID {
		d = append(d, "owner")
	}
	if w.Type == TypeFile && w.Size != g.Size {
		d = append(d, "size")
	}
	if w.Type == TypeSymlink && w.Target != g.Target {
		d = append(d, "target")
	}
	if w.Type == TypeOther && w.Rdev != g.Rdev {
		d = append(d, "rdev")
	}
	return d
}

func statSame(a, b Entry) bool {
	return a.Ino == b.Ino && a.Size == b.Size && a.MtimeNs == b.MtimeNs && a.CtimeNs == b.CtimeNs
}

func racy(e Entry, created time.Time) bool {
	return created.IsZero() || e.CtimeNs >= created.Add(-racyWindow).UnixNano()
}

// walk lists the tree under root (root included as "."), sorted by path,
// without hashing.
func walk(root string) ([]Entry, error) { return walkPrev(root, nil) }

// walkPrev is walk for a take: a directory whose inode, mtime and ctime
// are those prev recorded (and not racy: prev was started more than the
// racy window after its ctime) has the names prev lists under it, since
// creating, removing or renaming an entry moves its directory's mtime and
// ctime. Its entries are then lstat'ed by name without opening and
// reading the directory. Everything is still lstat'ed: a file's content
// changes nothing in its directory. Verify never uses prev;
// VerifyKnownDirs uses the manifest it compares with.
func walkPrev(root string, prev *Manifest) ([]Entry, error) {
	var st unix.Stat_t
	if err := unix.Lstat(root, &st); err != nil {
		return nil, lockstep.Errorf(lockstep.ENOTFOUND, "directory %s: %v", root, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return nil, lockstep.Errorf(lockstep.EINVALID, "%s is not a directory", root)
	}
	w := &walker{sem: make(chan struct{}, runtime.GOMAXPROCS(0)*2)}
	if prev != nil {
		w.prev = prev
		prev.Lookup(".") // builds the index before the walkers share it
		w.kids = prev.children()
	}
	top := entryFromStat(".", &st)
	w.out = []Entry{top}
	w.dir(root, top)
	w.wg.Wait()
	if w.err != nil {
		return nil, w.err
	}
	out := w.out
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

// walker lists directories in parallel: on a cold cache (a fresh overlay
// mount, a new btrfs subvolume) every lookup is a real read, and a few in
// flight hide the latency.
type walker struct {
	prev *Manifest
	kids map[string][]string // prev's names by directory
	sem  chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	out  []Entry
	err  error
}

func (w *walker) fail(err error) {
	w.mu.Lock()
	if w.err == nil {
		w.err = err
	}
	w.mu.Unlock()
}

// known returns the names prev lists under directory d when d's stat
// vouches that they are still its names.
func (w *walker) known(d Entry) ([]string, bool) {
	if w.prev == nil {
		return nil, false
	}
	p, ok := w.prev.Lookup(d.Path)
	if !ok || p.Type != TypeDir || p.Ino != d.Ino || p.MtimeNs != d.MtimeNs || p.CtimeNs != d.CtimeNs || racy(p, w.prev.CreatedAt) {
		return nil, false
	}
	return w.kids[d.Path], true
}

func (w *walker) dir(abs string, d Entry) {
	var ents []Entry
	var err error
	if names, ok := w.known(d); ok {
		ents, err = statNames(abs, d.Path, names)
	} else {
		ents, err = readDir(abs, d.Path)
	}
	if err != nil {
		w.fail(err)
		return
	}
	w.mu.Lock()
	w.out = append(w.out, ents...)
	w.mu.Unlock()
	for _, e := range ents {
		if e.Type != TypeDir {
			continue
		}
		a := abs + "/" + path.Base(e.Path)
		select {
		case w.sem <- struct{}{}:
			w.wg.Add(1)
			go func() {
				defer w.wg.Done()
				w.dir(a, e)
				<-w.sem
			}()
		default:
			w.dir(a, e)
		}
	}
}

// statNames lstats the entries of one directory whose names are known.
func statNames(abs, rel string, names []string) ([]Entry, error) {
	ents := make([]Entry, 0, len(names))
	var buf []byte
	for _, name := range names {
		var st unix.Stat_t
		p := abs + "/" + name
		if err := unix.Lstat(p, &st); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue // raced with a deletion; the caller's dir must be quiescent
			}
			return nil, fmt.Errorf("stat %s: %w", p, err)
		}
		e := entryFromStat(path.Join(rel, name), &st)
		if e.Type == TypeSymlink {
			if buf == nil {
				buf = make([]byte, unix.PathMax)
			}
			n, err := unix.Readlink(p, buf)
			if err != nil {
				return nil, fmt.Errorf("readlink %s: %w", p, err)
			}
			e.Target = string(buf[:n])
		}
		ents = append(ents, e)
	}
	return ents, nil
}

// dirReads counts the directories readDir opened (tests: which walks
// took the names from a manifest).
var dirReads atomic.Int64

// readDir lstats the entries of one directory.
func readDir(abs, rel string) (ents []Entry, err error) {
	dirReads.Add(1)
	f, err := os.Open(abs)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", abs, err)
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("read dir %s: %w", abs, err)
	}
	fd := int(f.Fd())
	var buf []byte
	for _, name := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue // raced with a deletion; the caller's dir must be quiescent
			}
			return nil, fmt.Errorf("stat %s/%s: %w", abs, name, err)
		}
		e := entryFromStat(path.Join(rel, name), &st)
		if e.Type == TypeSymlink {
			if buf == nil {
				buf = make([]byte, unix.PathMax)
			}
			n, err := unix.Readlinkat(fd, name, buf)
			if err != nil {
				return nil, fmt.Errorf("readlink %s/%s: %w", abs, name, err)
			}
			e.Target = string(buf[:n])
		}
		ents = append(ents, e)
	}
	return ents, nil
}

func entryFromStat(p string, st *unix.Stat_t) Entry {
	e := Entry{
		Path:    p,
		Mode:    st.Mode & 07777,
		UID:     st.Uid,
		GID:     st.Gid,
		MtimeNs: st.Mtim.Nano(),
		CtimeNs: st.Ctim.Nano(),
		Ino:     st.Ino,
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		e.Type, e.Size = TypeFile, st.Size
	case unix.S_IFDIR:
		e.Type = TypeDir
	case unix.S_IFLNK:
		e.Type = TypeSymlink
	default:
		e.Type = TypeOther
		e.Mode = st.Mode & (unix.S_IFMT | 07777)
		e.Rdev = st.Rdev
	}
	return e
}

// hashAll fills entries[i].Hash for every i in todo, in parallel.
func hashAll(root string, entries []Entry, todo []int) error {
	if len(todo) == 0 {
		return nil
	}
	workers := min(runtime.GOMAXPROCS(0)*2, len(todo))
	ch := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 128<<10)
			for i := range ch {
				h, err := hashFile(root+"/"+entries[i].Path, buf)
				if err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					continue
				}
				entries[i].Hash = h
			}
		}()
	}
	for _, i := range todo {
		ch <- i
	}
	close(ch)
	wg.Wait()
	return first
}

func hashFile(p string, buf []byte) (string, error) {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NOATIME|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.EPERM) { // O_NOATIME needs ownership or CAP_FOWNER
		fd, err = unix.Open(p, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		return "", fmt.Errorf("hash %s: %w", p, err)
	}
	defer unix.Close(fd)
	h := sha256.New()
	for {
		n, err := unix.Read(fd, buf)
		if n > 0 {
			h.Write(buf[:n])
		}
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("hash %s: %w", p, err)
		}
		if n == 0 {
			break
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
