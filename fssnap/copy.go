package fssnap

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lockstep-hq/lockstep"
)

// Copy is the reflink and the plain-copy driver. A snapshot is a manifest
// (every path's type, mode, owner, times and, for files, the sha256 of the
// content) plus the content of its files in a store shared by the
// directory's snapshots: objects/<sha256> under the data root, each a
// copy (copy) or a clone (reflink) of the file, never written after it
// is stored. A take stats the tree, and reads and stores only the files
// whose inode, size, mtime or ctime changed since the previous snapshot
// (their hash and object are the previous one's): its cost follows the
// tree's entry count in stat calls and what changed in bytes, not a copy
// or a link of every path. Restore verifies the directory against the
// snapshot's manifest and repairs only what differs, copying files back
// from the store. Drop removes the objects no remaining snapshot names.
//
// Snapshots taken by earlier versions (a copy tree at Snapshot.Path, files
// hard-linked from the previous tree) are still restored and dropped.
type Copy struct {
	base
	reflink bool
}

var _ Driver = (*Copy)(nil)

// Name is "reflink" or "copy".
func (c *Copy) Name() string {
	if c.reflink {
		return NameReflink
	}
	return NameCopy
}

func (c *Copy) snapRoot(abs string) (string, error) {
	if !c.reflink {
		return filepath.Join(c.metaDir(abs), "data"), nil
	}
	dr, err := c.dataRoot(abs)
	if err != nil {
		return "", err
	}
	if !sameDevFS(dr, abs) {
		return "", lockstep.Errorf(lockstep.EINVALID, "reflink: no place for snapshots on the filesystem of %s (set a data root)", abs)
	}
	return dr, nil
}

// Take records dir's manifest and stores the content of the files that
// changed since the previous snapshot.
func (c *Copy) Take(ctx context.Context, dir string) (Snapshot, error) {
	abs, err := absDir(dir)
	if err != nil {
		return Snapshot{}, err
	}
	unlock, err := c.lock(abs)
	if err != nil {
		return Snapshot{}, err
	}
	defer unlock()
	root, err := c.snapRoot(abs)
	if err != nil {
		return Snapshot{}, err
	}
	objects := filepath.Join(root, "objects")
	if err := os.MkdirAll(objects, 0o700); err != nil {
		return Snapshot{}, err
	}
	// The previous snapshot's manifest vouches for the hashes of files
	// whose stat did not change, and its objects hold their content;
	// its directories' names spare the walk their reads (walkPrev).
	prevc := make(chan *Manifest, 1)
	if snaps, _ := c.list(abs, c.Name()); len(snaps) > 0 && snaps[len(snaps)-1].Objects == objects {
		id := snaps[len(snaps)-1].ID
		go func() {
			m, err := c.loadManifest(abs, id)
			if err != nil {
				m = nil // damaged or missing: every file is stored again
			}
			prevc <- m
		}()
	} else {
		prevc <- nil
	}
	start := time.Now()
	prev := <-prevc
	entries, err := walkPrev(abs, prev)
	if err != nil {
		return Snapshot{}, err
	}
	var todo []int
	for i := range entries {
		e := &entries[i]
		if e.Type != TypeFile {
			continue
		}
		if prev != nil {
			if p, ok := prev.Lookup(e.Path); ok && p.Type == TypeFile && statSame(p, *e) && !racy(p, prev.CreatedAt) && validHash(p.Hash) {
				e.Hash = p.Hash
				continue
			}
		}
		todo = append(todo, i)
	}
	created, err := storeAll(ctx, abs, objects, entries, todo, c.reflink)
	undo := func() {
		for _, h := range created {
			os.Remove(filepath.Join(objects, h))
		}
	}
	if err != nil {
		undo()
		return Snapshot{}, fmt.Errorf("%s take %s: %w", c.Name(), abs, err)
	}
	m := &Manifest{Root: abs, CreatedAt: start, Entries: entries, Hashed: len(todo)}
	s := Snapshot{ID: newID(), Driver: c.Name(), Dir: abs, CreatedAt: c.opts.Now(), Objects: objects, Manifest: m}
	s.Files, s.Bytes = m.Files()
	if err := c.saveSnapshot(s); err != nil {
		undo()
		c.dropMeta(abs, s.ID)
		return Snapshot{}, err
	}
	return s, nil
}

// validHash reports whether h names an object (64 lower-case hex digits).
func validHash(h string) bool { return len(h) == 64 && hexLower(h) }

// storeAll stores the content of entries[i] (i in todo) in objects, in
// parallel, and sets their hashes; it returns the objects it created.
func storeAll(ctx context.Context, root, objects string, entries []Entry, todo []int, reflink bool) ([]string, error) {
	if len(todo) == 0 {
		return nil, nil
	}
	workers := min(runtime.GOMAXPROCS(0)*2, len(todo))
	ch := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	var created []string
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 128<<10)
			for i := range ch {
				h, isNew, err := storeObject(root+"/"+entries[i].Path, objects, reflink, buf)
				mu.Lock()
				if err != nil && first == nil {
					first = err
				}
				if isNew {
					created = append(created, h)
				}
				mu.Unlock()
				entries[i].Hash = h
			}
		}()
	}
	for n, i := range todo {
		if n%64 == 0 && ctx.Err() != nil {
			mu.Lock()
			if first == nil {
				first = ctx.Err()
			}
			mu.Unlock()
			break
		}
		ch <- i
	}
	close(ch)
	wg.Wait()
	return created, first
}

// storeObject copies (or clones) the file at p into objects under the
// sha256 of the copy's content, which it returns, with whether the object
// is new. The hash is the copy's, so an object's name always matches its
// content even if p changed meanwhile.
func storeObject(p, objects string, reflink bool, buf []byte) (hash string, created bool, err error) {
	in, err := os.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return "", false, fmt.Errorf("store %s: %w", p, err)
	}
	defer in.Close()
	tmp, err := os.CreateTemp(objects, ".tmp-")
	if err != nil {
		return "", false, err
	}
	defer func() {
		if tmp != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	h := sha256.New()
	if reflink {
		if err := unix.IoctlFileClone(int(tmp.Fd()), int(in.Fd())); err != nil {
			return "", false, fmt.Errorf("clone %s: %w", p, err)
		}
		if _, err := io.CopyBuffer(h, tmp, buf); err != nil {
			return "", false, fmt.Errorf("hash %s: %w", p, err)
		}
	} else {
		for {
			n, rerr := in.Read(buf)
			if n > 0 {
				h.Write(buf[:n])
				if _, err := tmp.Write(buf[:n]); err != nil {
					return "", false, fmt.Errorf("store %s: %w", p, err)
				}
			}
			if rerr == io.EOF {
				break
			}
			if rerr != nil {
				return "", false, fmt.Errorf("store %s: %w", p, rerr)
			}
		}
	}
	if err := tmp.Close(); err != nil {
		return "", false, err
	}
	hash = hex.EncodeToString(h.Sum(nil))
	obj := filepath.Join(objects, hash)
	if _, err := os.Lstat(obj); err == nil {
		return hash, false, nil // the same content is stored already; the deferred cleanup drops the copy
	}
	if err := os.Rename(tmp.Name(), obj); err != nil {
		return "", false, err
	}
	tmp = nil
	return hash, true, nil
}

// Restore repairs dir so that it matches snapshot id: extra paths are
// removed, missing and changed ones copied back, modes and owners fixed.
func (c *Copy) Restore(ctx context.Context, dir, id string) error {
	return c.restore(ctx, dir, id, nil, nil)
}

// restore repairs dir to snapshot id under the directory's lock: by res
// when given (m is then its manifest), else by comparing dir with the
// stored manifest first.
func (c *Copy) restore(ctx context.Context, dir, id string, m *Manifest, res *Residue) error {
	abs, err := absDir(dir)
	if err != nil {
		return err
	}
	unlock, err := c.lock(abs)
	if err != nil {
		return err
	}
	defer unlock()
	s, err := c.loadSnapshot(abs, id)
	if err != nil {
		return err
	}
	if res == nil {
		if m, err = c.loadManifest(abs, id); err != nil {
			return err
		}
		r, err := Verify(abs, m)
		if err != nil {
			return err
		}
		res = &r
	}
	if err := repair(ctx, abs, s.source(), m, *res, c.reflink); err != nil {
		return fmt.Errorf("%s restore %s: %w", c.Name(), abs, err)
	}
	return nil
}

// ResidueRestorer is implemented by drivers whose Restore is "verify, then
// repair what differs" (copy, reflink): a caller that has just compared
// the directory with the snapshot's manifest (a failed run's forensics)
// passes that residue instead of having the driver walk and compare again.
type ResidueRestorer interface {
	// RestoreResidue repairs dir by the inverse of res, which must be
	// Verify(dir, m) with m snapshot id's manifest and dir unchanged
	// since; a stale residue leaves what it does not name unrepaired, so
	// the caller verifies afterwards (as a run does).
	RestoreResidue(ctx context.Context, dir, id string, m *Manifest, res Residue) error
}

var _ ResidueRestorer = (*Copy)(nil)

// RestoreResidue is Restore with the comparison already done.
func (c *Copy) RestoreResidue(ctx context.Context, dir, id string, m *Manifest, res Residue) error {
	if m == nil {
		return lockstep.Errorf(lockstep.EINVALID, "restore of %s: no manifest given", id)
	}
	return c.restore(ctx, dir, id, m, &res)
}

// source names where a copy snapshot keeps the content of file e: its
// object, or (earlier versions) its copy in the snapshot's tree.
func (s Snapshot) source() func(Entry) (string, error) {
	if s.Objects != "" {
		return func(e Entry) (string, error) {
			if !validHash(e.Hash) {
				return "", lockstep.Errorf(lockstep.EINTERNAL, "snapshot %s: no content hash for %s", s.ID, e.Path)
			}
			return filepath.Join(s.Objects, e.Hash), nil
		}
	}
	return func(e Entry) (string, error) { return filepath.Join(s.Path, filepath.FromSlash(e.Path)), nil }
}

// List returns dir's snapshots, oldest first.
func (c *Copy) List(dir string) ([]Snapshot, error) { return c.list(dir, c.Name()) }

// Drop deletes snapshot id and its copy.
func (c *Copy) Drop(dir, id string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	unlock, err := c.lock(abs)
	if err != nil {
		return err
	}
	defer unlock()
	s, err := c.loadSnapshot(abs, id)
	if err != nil {
		return err
	}
	if s.Path != "" {
		if err := forceRemoveAll(s.Path); err != nil {
			return err
		}
	}
	var dropped *Manifest
	if s.Objects != "" {
		dropped, _ = c.loadManifest(abs, id)
	}
	if err := c.dropMeta(abs, id); err != nil {
		return err
	}
	if s.Objects != "" {
		return c.collect(abs, s.Objects, dropped)
	}
	return nil
}

// collect removes from objects what no remaining snapshot of abs names:
// the objects of dropped (the manifest just dropped), or, when it could
// not be read, every unnamed object. A remaining snapshot whose manifest
// cannot be read keeps everything (nothing is known to be garbage).
func (c *Copy) collect(abs, objects string, dropped *Manifest) error {
	snaps, err := c.listAll(abs)
	if err != nil {
		return err
	}
	live := make(map[[32]byte]bool)
	md := filepath.Join(c.metaDir(abs), "snapshots")
	for _, s := range snaps {
		if s.Objects != objects {
			continue
		}
		if err := manifestFileHashes(manifestBase(md, s.ID), live); err != nil {
			return nil
		}
	}
	var candidates []string
	if dropped != nil {
		for _, e := range dropped.Entries {
			if h, ok := rawHash(e); ok && !live[h] {
				candidates = append(candidates, e.Hash)
			}
		}
	} else {
		ents, err := os.ReadDir(objects)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		for _, e := range ents {
			// .tmp- leftovers of a crashed take included
			if h, ok := rawHash(Entry{Type: TypeFile, Hash: e.Name()}); ok && live[h] {
				continue
			}
			candidates = append(candidates, e.Name())
		}
	}
	for _, h := range candidates {
		if err := os.Remove(filepath.Join(objects, h)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// repair applies the inverse of res to dir, taking the content of files
// from where from names (the snapshot's objects or tree).
func repair(ctx context.Context, dir string, from func(Entry) (string, error), m *Manifest, res Residue, reflink bool) error {
	var remove, create, fix []string
	remove = append(remove, res.Added...)
	create = append(create, res.Removed...)
	for _, ch := range res.Changed {
		if recreate(ch.What) {
			remove = append(remove, ch.Path)
			create = append(create, ch.Path)
		} else { // mode, owner, mtime
			fix = append(fix, ch.Path)
		}
	}
	sort.Strings(remove)
	var last string
	for _, p := range remove {
		if last != "" && strings.HasPrefix(p, last+"/") {
			continue // inside a directory already removed
		}
		if err := forceRemoveAll(filepath.Join(dir, filepath.FromSlash(p))); err != nil {
			return err
		}
		last = p
	}
	var ents []Entry
	for _, p := range create {
		e, _ := m.Lookup(p)
		ents = append(ents, e)
	}
	sort.Slice(ents, func(i, j int) bool { return ents[i].Path < ents[j].Path })
	if err := copyEntries(ctx, "", dir, ents, reflink, from); err != nil {
		return err
	}
	for _, p := range fix {
		e, _ := m.Lookup(p)
		if err := setAttrs(filepath.Join(dir, filepath.FromSlash(p)), e); err != nil {
			return err
		}
	}
	return nil
}

// recreate reports whether a change needs the path re-created rather than
// its attributes fixed.
func recreate(what string) bool {
	for _, w := range strings.Split(what, ",") {
		switch w {
		case "type", "target", "rdev", "size", "content":
			return true
		}
	}
	return false
}

// copyEntries creates ents (sorted, parents first; paths relative to src and
// dst) under dst from src, then sets owner, mode and times. from, if not
// nil, names where a file's content is instead of src.
func copyEntries(ctx context.Context, src, dst string, ents []Entry, reflink bool, from func(Entry) (string, error)) error {
	var dirs []Entry
	for i, e := range ents {
		if i%64 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		to := filepath.Join(dst, filepath.FromSlash(e.Path))
		switch e.Type {
		case TypeDir:
			mk := os.Mkdir
			if e.Path == "." {
				mk = os.MkdirAll
			}
			if err := mk(to, 0o700); err != nil {
				return err
			}
			dirs = append(dirs, e)
			continue
		case TypeFile:
			src := filepath.Join(src, filepath.FromSlash(e.Path))
			if from != nil {
				var err error
				if src, err = from(e); err != nil {
					return err
				}
			}
			if err := copyFile(src, to, reflink); err != nil {
				return err
			}
		case TypeSymlink:
			if err := os.Symlink(e.Target, to); err != nil {
				return err
			}
		case TypeOther:
			if err := unix.Mknod(to, e.Mode, int(e.Rdev)); err != nil {
				return fmt.Errorf("mknod %s: %w", to, err)
			}
		}
		if err := setAttrs(to, e); err != nil {
			return err
		}
	}
	for i := len(dirs) - 1; i >= 0; i-- { // deepest first: read-only dirs last
		if err := setAttrs(filepath.Join(dst, filepath.FromSlash(dirs[i].Path)), dirs[i]); err != nil {
			return err
		}
	}
	return nil
}

// setAttrs gives p the owner, mode and (files) mtime of e.
func setAttrs(p string, e Entry) error {
	if err := os.Lchown(p, int(e.UID), int(e.GID)); err != nil && !errors.Is(err, unix.EPERM) {
		return err
	}
	if e.Type == TypeSymlink {
		return nil
	}
	if err := unix.Fchmodat(unix.AT_FDCWD, p, e.Mode&07777, 0); err != nil {
		return fmt.Errorf("chmod %s: %w", p, err)
	}
	if e.Type == TypeFile {
		ts := []unix.Timespec{unix.NsecToTimespec(e.MtimeNs), unix.NsecToTimespec(e.MtimeNs)}
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("utimes %s: %w", p, err)
		}
	}
	return nil
}

func copyFile(from, to string, reflink bool) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if reflink {
		err = unix.IoctlFileClone(int(out.Fd()), int(in.Fd()))
		if err != nil {
			err = fmt.Errorf("clone %s: %w", from, err)
		}
	} else {
		_, err = io.Copy(out, in)
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// forceRemoveAll removes p even when the run left directories without
// write or search permission.
func forceRemoveAll(p string) error {
	err := os.RemoveAll(p)
	if err == nil {
		return nil
	}
	filepath.WalkDir(p, func(q string, d os.DirEntry, err error) error {
		if d != nil && d.IsDir() {
			os.Chmod(q, 0o700)
		}
		return nil
	})
	os.Chmod(p, 0o700)
	return os.RemoveAll(p)
}

// probeReflink reports whether FICLONE works inside dir.
func probeReflink(dir string) bool {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return false
	}
	a, err := os.CreateTemp(dir, ".probe-")
	if err != nil {
		return false
	}
	defer os.Remove(a.Name())
	defer a.Close()
	a.WriteString("probe")
	b, err := os.CreateTemp(dir, ".probe-")
	if err != nil {
		return false
	}
	defer os.Remove(b.Name())
	defer b.Close()
	return unix.IoctlFileClone(int(b.Fd()), int(a.Fd())) == nil
}
