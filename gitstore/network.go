package gitstore

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/format/idxfile"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
)

// Options configure a Network.
type Options struct {
	// Fsync makes every object write (pack, index, loose object) and every
	// mirrored ref durable, including the directory entries, before the
	// write function returns. Production wiring sets it; tests may not.
	Fsync bool
	// MirrorFsync also fsyncs mirrored ref files. The service leaves it off:
	// the mirror is derived from the metadata store and rewritten from it
	// at start-up, so a mirror write lost in a power failure is repaired
	// before anyone reads it, and each push saves two fsyncs.
	MirrorFsync bool
	// TempGrace: temp files older than this are taken as left by a crash
	// and removed when the network is opened (default DefaultTempGrace).
	TempGrace time.Duration
	// CacheBytes bounds the shared cache of decoded pack objects
	// (default 32 MiB).
	CacheBytes int64
	// OnPack, when set, is called for every pack a write produces, with
	// the pack and its index complete and durable in objects/pack, before
	// the pack is visible to this Network's readers and before the write
	// returns. An error fails the write: the pack's files are removed and
	// the error is returned as is. With OnPack set, writes that would
	// store a loose object (WriteCommit, Objects().SetEncodedObject) store
	// a one-object pack instead, so every object reaches OnPack. Object
	// storage uses it to upload and register the pack before any ref can
	// name its objects.
	OnPack func(PackFiles) error
	// OnMiss, when set, is called when a lookup of an object that should
	// exist misses (a read, a commit's parents, Has); true means objects
	// may have arrived and the lookup is tried once more. Object storage
	// uses it to catch up with another replica's write that committed
	// after this request's own catch-up (a ref read later in the request
	// can name it). Lookups that expect misses (Missing, the dedup of
	// writes) do not call it.
	OnMiss func() bool
}

// PackFiles describes a pack just written (Options.OnPack).
type PackFiles struct {
	Hash      plumbing.Hash
	PackPath  string
	IdxPath   string
	PackBytes int64
	IdxBytes  int64
	Objects   int
}

// packHook runs Options.OnPack for pack h (files in objects/pack); on its
// error the files are removed.
func (n *Network) packHook(h plumbing.Hash, objects int) error {
	if n.opts.OnPack == nil {
		return nil
	}
	pf := PackFiles{Hash: h, PackPath: n.packPath(h, "pack"), IdxPath: n.packPath(h, "idx"), Objects: objects}
	if fi, err := os.Stat(pf.PackPath); err == nil {
		pf.PackBytes = fi.Size()
	}
	if fi, err := os.Stat(pf.IdxPath); err == nil {
		pf.IdxBytes = fi.Size()
	}
	if err := n.opts.OnPack(pf); err != nil {
		os.Remove(pf.IdxPath) // index first: a pack without one is invisible
		os.Remove(pf.PackPath)
		return err
	}
	return nil
}

// Network is one bare git repository holding the objects of a fork network
// and, as git namespaces, the mirrored refs of each of its repositories.
// It is safe for concurrent use.
type Network struct {
	dir  string
	opts Options
	// openedAt is when Open began: a ref lock file older than this was
	// left by a crashed process, not by a writer of this one (writeRefFile).
	openedAt time.Time

	mu    sync.RWMutex            // guards packs and where
	packs []*pack                 // newest first
	where map[plumbing.Hash]*pack // every packed object -> a pack holding it

	writeMu sync.Mutex // serialises pack writers and Reload (a Reload must not miss a pack being published)
	gcMu    sync.Mutex // one CollectGarbage or Compact at a time

	packDirMod atomic.Int64 // objects/pack mtime (ns) seen by the last Reload
	compacting atomic.Int32 // Compacts running: a lookup miss reloads
	// reloads counts completed Reloads. A lookup reads it before it
	// looks, and a miss retries when it moved: between a pack-map miss
	// and the read of the loose file, a compaction may have packed the
	// object, pruned the loose copy and reloaded (see retryMiss).
	reloads atomic.Uint64
	// indexed counts the object entries Reloads wrote into where (tests:
	// a Reload that only adds packs indexes only theirs).
	indexed atomic.Int64
	// listings and opened count the listings of objects/pack and the packs
	// opened by Reload and AddPacks (ReloadCounts).
	listings atomic.Int64
	opened   atomic.Int64
	refMu    sync.Mutex // serialises ref mirror writes

	cache cache.Object // goroutine-safe LRU shared by all packs

	// beforeLooseRename, set by tests only, runs between creating a loose
	// object's fan-out directory and renaming the object into it.
	beforeLooseRename func(dir string)
	// beforeLooseRead, set by tests only, runs after a lookup found no
	// pack holding the object and before it reads the loose file.
	beforeLooseRead func(h plumbing.Hash)

	ascentMu    sync.Mutex
	ascentCache map[plumbing.Hash]ascentInfo // see ascent in receive.go
}

// pack is one packfile with its in-memory index.
type pack struct {
	hash plumbing.Hash
	idx  *idxfile.MemoryIndex

	mu     sync.Mutex // guards pf and f (the packfile scanner is stateful)
	pf     *packfile.Packfile
	f      *os.File
	closed bool
}

// Open opens the network repository at dir, creating a bare repository
// there (objects/, refs/, HEAD, config with core.bare = true) if dir has
// no HEAD yet.
func Open(dir string, opts Options) (*Network, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("open network %s: %w", dir, err)
	}
	if opts.CacheBytes <= 0 {
		opts.CacheBytes = int64(32 * cache.MiByte)
	}
	n := &Network{dir: abs, opts: opts, openedAt: time.Now(), cache: cache.NewObjectLRU(cache.FileSize(opts.CacheBytes))}
	if err := n.initBare(); err != nil {
		return nil, diskError(fmt.Errorf("open network %s: %w", dir, err))
	}
	if opts.TempGrace <= 0 {
		opts.TempGrace = DefaultTempGrace
	}
	n.opts.TempGrace = opts.TempGrace
	RemoveStaleTemps(abs, opts.TempGrace, time.Now())
	restoreGCTrash(abs)
	if err := n.Reload(); err != nil {
		return nil, err
	}
	return n, nil
}

// Dir returns the absolute path of the bare repository.
func (n *Network) Dir() string { return n.dir }

// Close releases the open pack files. The Network must not be used after.
func (n *Network) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, p := range n.packs {
		p.close()
	}
	n.packs = nil
	return nil
}

func (n *Network) initBare() error {
	if _, err := os.Stat(filepath.Join(n.dir, "HEAD")); err == nil {
		return nil
	}
	for _, d := range []string{"objects/pack", "objects/info", "refs/heads", "refs/tags", "refs/namespaces"} {
		if err := os.MkdirAll(filepath.Join(n.dir, d), 0o755); err != nil {
			return err
		}
	}
	config := "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = true\n"
	if err := n.writeFileAtomic(filepath.Join(n.dir, "config"), []byte(config)); err != nil {
		return err
	}
	// HEAD last: its presence marks a complete repository.
	return n.writeFileAtomic(filepath.Join(n.dir, "HEAD"), []byte("ref: refs/heads/main\n"))
}

// Reload rescans objects/pack for packs added or removed outside this
// Network (for example by `git index-pack` on the smart-HTTP push path or
// by a repack). Packs already loaded are kept.
func (n *Network) Reload() error {
	n.writeMu.Lock()
	defer n.writeMu.Unlock()
	return n.reloadLocked()
}

// reloadLocked is Reload with n.writeMu held.
func (n *Network) reloadLocked() error {
	n.listings.Add(1)
	packDir := filepath.Join(n.dir, "objects", "pack")
	if fi, err := os.Stat(packDir); err == nil {
		n.packDirMod.Store(fi.ModTime().UnixNano())
	}
	names, err := os.ReadDir(packDir)
	if err != nil {
		return fmt.Errorf("reload %s: %w", n.dir, err)
	}
	// One listing, no stat per pack: an index counts when its pack is
	// listed beside it (an index without its pack is being written by
	// someone else, or half removed).
	listed := make(map[string]bool, len(names))
	for _, e := range names {
		listed[e.Name()] = true
	}
	onDisk := map[plumbing.Hash]bool{}
	for _, e := range names {
		name := e.Name()
		if !strings.HasPrefix(name, "pack-") || !strings.HasSuffix(name, ".idx") {
			continue
		}
		hex := strings.TrimSuffix(strings.TrimPrefix(name, "pack-"), ".idx")
		if !plumbing.IsHash(hex) || !listed["pack-"+hex+".pack"] {
			continue
		}
		onDisk[plumbing.NewHash(hex)] = true
	}

	n.mu.RLock()
	have := map[plumbing.Hash]*pack{}
	for _, p := range n.packs {
		have[p.hash] = p
	}
	n.mu.RUnlock()

	var added []*pack
	for h := range onDisk {
		if have[h] != nil {
			continue
		}
		p, err := n.openPack(h)
		if errors.Is(err, fs.ErrNotExist) {
			// Listed, then removed before the open: a repack beside this
			// process (Compact's, or one a killed server left running)
			// folded it into a pack of its own, written before it deleted
			// this one, which this listing or the next miss's reload finds.
			delete(onDisk, h)
			continue
		}
		if err != nil {
			for _, a := range added {
				a.close()
			}
			return fmt.Errorf("reload %s: %w", n.dir, err)
		}
		added = append(added, p)
	}

	sort.Slice(added, func(i, j int) bool { return added[i].hash.String() < added[j].hash.String() })
	// The new packs' objects, first in the list winning (as below).
	fresh := map[plumbing.Hash]*pack{}
	for i := len(added) - 1; i >= 0; i-- {
		if err := added[i].indexInto(fresh); err != nil {
			for _, a := range added {
				a.close()
			}
			return fmt.Errorf("reload %s: %w", n.dir, err)
		}
	}
	n.opened.Add(int64(len(added)))
	n.mu.Lock()
	var keep, removed []*pack
	for _, p := range n.packs {
		if onDisk[p.hash] {
			keep = append(keep, p)
		} else {
			removed = append(removed, p)
		}
	}
	packs := append(added, keep...)
	if len(removed) == 0 && n.where != nil {
		// Only additions (another replica's writes, a fetched pack): the
		// map takes the new packs' objects in place, so a catch-up costs
		// what arrived, not every object of the network.
		for h, p := range fresh {
			n.where[h] = p
		}
		n.packs = packs
		n.mu.Unlock()
		n.indexed.Add(int64(len(fresh)))
	} else {
		where := make(map[plumbing.Hash]*pack, len(n.where)+len(fresh))
		for i := len(keep) - 1; i >= 0; i-- {
			if err := keep[i].indexInto(where); err != nil {
				n.mu.Unlock()
				for _, a := range added {
					a.close()
				}
				return fmt.Errorf("reload %s: %w", n.dir, err)
			}
		}
		for h, p := range fresh {
			where[h] = p
		}
		n.packs, n.where = packs, where
		n.mu.Unlock()
		n.indexed.Add(int64(len(where)))
	}
	n.reloads.Add(1)
	for _, p := range removed {
		p.close()
	}
	return nil
}

// AddPacks loads packs that were just placed in objects/pack (each pack
// and its index complete there), when the caller knows that is all that
// changed: another replica's writes arriving in a catch-up. Only the
// listed packs are opened and only their objects indexed; the directory
// is not listed. Packs already loaded are skipped. Anything unexpected
// (a listed pack's file missing or unreadable) falls back to a full
// Reload, so the result is never less than Reload's. A pack removed from
// objects/pack is not noticed: removals take Reload.
func (n *Network) AddPacks(hashes []plumbing.Hash) error {
	if len(hashes) == 0 {
		return nil
	}
	n.writeMu.Lock()
	defer n.writeMu.Unlock()
	n.mu.RLock()
	have := make(map[plumbing.Hash]bool, len(n.packs))
	for _, p := range n.packs {
		have[p.hash] = true
	}
	indexed := n.where != nil
	n.mu.RUnlock()
	if !indexed {
		return n.reloadLocked()
	}
	var added []*pack
	fail := func() error {
		for _, a := range added {
			a.close()
		}
		return n.reloadLocked()
	}
	for _, h := range hashes {
		if have[h] {
			continue
		}
		have[h] = true // listed twice: opened once
		p, err := n.openPack(h)
		if err != nil {
			return fail()
		}
		added = append(added, p)
	}
	if len(added) == 0 {
		return nil
	}
	// As Reload orders and indexes what it adds.
	sort.Slice(added, func(i, j int) bool { return added[i].hash.String() < added[j].hash.String() })
	fresh := map[plumbing.Hash]*pack{}
	for i := len(added) - 1; i >= 0; i-- {
		if err := added[i].indexInto(fresh); err != nil {
			return fail()
		}
	}
	n.opened.Add(int64(len(added)))
	n.mu.Lock()
	for h, p := range fresh {
		n.where[h] = p
	}
	n.packs = append(added, n.packs...)
	n.mu.Unlock()
	n.indexed.Add(int64(len(fresh)))
	// A lookup that missed while the packs were loading looks again (see
	// retryMiss). packDirMod stays: it is the directory as the last full
	// listing saw it, so a miss still reloads after any change this call
	// did not list.
	n.reloads.Add(1)
	return nil
}

// ReloadCounts reports, since the Network was opened, how many times
// objects/pack was listed (Open, Reload) and how many packs Reload and
// AddPacks opened. For tests and diagnostics.
func (n *Network) ReloadCounts() (listings, opened int64) {
	return n.listings.Load(), n.opened.Load()
}

func (n *Network) packPath(h plumbing.Hash, ext string) string {
	return filepath.Join(n.dir, "objects", "pack", "pack-"+h.String()+"."+ext)
}

// openPack loads the index of pack h into memory and opens the pack.
func (n *Network) openPack(h plumbing.Hash) (*pack, error) {
	idxf, err := os.Open(n.packPath(h, "idx"))
	if err != nil {
		return nil, err
	}
	defer idxf.Close()
	idx := idxfile.NewMemoryIndex()
	if err := idxfile.NewDecoder(idxf).Decode(idx); err != nil {
		return nil, fmt.Errorf("decode %s: %w", idxf.Name(), err)
	}
	return n.newPack(h, idx)
}

func (n *Network) newPack(h plumbing.Hash, idx *idxfile.MemoryIndex) (*pack, error) {
	if idx.PackfileChecksum != h {
		return nil, fmt.Errorf("pack %s: index names pack %s", h, idx.PackfileChecksum)
	}
	// Warm the reverse (offset -> hash) map now, once, so concurrent
	// readers never race on its lazy construction.
	if c, _ := idx.Count(); c > 0 {
		if _, err := idx.FindHash(-1); err != nil && !errors.Is(err, plumbing.ErrObjectNotFound) {
			return nil, err
		}
	}
	f, err := os.Open(n.packPath(h, "pack"))
	if err != nil {
		return nil, err
	}
	// No filesystem: the packfile returns fully read MemoryObjects.
	pf := packfile.NewPackfileWithCache(idx, nil, osFile{f}, n.cache, 0)
	return &pack{hash: h, idx: idx, pf: pf, f: f}, nil
}

func (p *pack) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed {
		p.closed = true
		p.f.Close()
	}
}

// snapshot returns the current pack list (newest first).
func (n *Network) snapshot() []*pack {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.packs
}

// reloadIfChanged reloads the pack list when objects/pack changed since
// the last Reload (an external index-pack or repack), and reports whether
// it did. Used on a read miss, so a repack that moved loose objects into a
// new pack heals itself.
func (n *Network) reloadIfChanged() bool {
	fi, err := os.Stat(filepath.Join(n.dir, "objects", "pack"))
	if err != nil || fi.ModTime().UnixNano() == n.packDirMod.Load() {
		return false
	}
	return n.Reload() == nil
}

// packFor returns a pack holding h, or nil. One map lookup, however many
// packs there are.
func (n *Network) packFor(h plumbing.Hash) *pack {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.where[h]
}

// publish makes a newly written pack visible to readers.
func (n *Network) publish(p *pack) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.where == nil {
		n.where = map[plumbing.Hash]*pack{}
	}
	if err := p.indexInto(n.where); err != nil {
		return err
	}
	n.packs = append([]*pack{p}, n.packs...)
	return nil
}

// indexInto records every object of p in where.
func (p *pack) indexInto(where map[plumbing.Hash]*pack) error {
	it, err := p.idx.Entries()
	if err != nil {
		return err
	}
	defer it.Close()
	for {
		e, err := it.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		where[e.Hash] = p
	}
}

// osFile adapts *os.File to billy.File for the packfile reader.
type osFile struct{ *os.File }

func (osFile) Lock() error   { return nil }
func (osFile) Unlock() error { return nil }
