package fssnap

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/lockstep-hq/lockstep"
)

// Copy is the reflink and the plain-copy driver. A snapshot is a copy of the
// tree under the data root (reflink: FICLONE, sharing extents; copy: bytes).
// Files unchanged since the previous snapshot (same inode, size, mtime,
// ctime, mode, owner) are hard-linked from that snapshot instead of copied:
// snapshot trees are never written after Take. Restore verifies the directory
// against the snapshot's manifest and repairs only what differs.
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

// Take copies dir into a new snapshot and records its manifest.
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
	var prevSnap *Snapshot
	var prev *Manifest
	if snaps, _ := c.list(abs, c.Name()); len(snaps) > 0 {
		s := snaps[len(snaps)-1]
		if m, err := c.loadManifest(abs, s.ID); err == nil {
			prevSnap, prev = &s, m
		}
	}
	m, err := BuildManifest(abs, prev)
	if err != nil {
		return Snapshot{}, err
	}
	id := newID()
	s := Snapshot{ID: id, Driver: c.Name(), Dir: abs, CreatedAt: c.opts.Now(), Path: filepath.Join(root, id), Manifest: m}
	s.Files, s.Bytes = m.Files()
	if err := os.MkdirAll(root, 0o700); err != nil {
		return Snapshot{}, err
	}
	var reuse func(Entry) string
	if prevSnap != nil {
		reuse = func(e Entry) string {
			p, ok := prev.Lookup(e.Path)
			if ok && p.Type == TypeFile && statSame(p, e) && len(metaDiff(p, e)) == 0 && !racy(p, prev.CreatedAt) {
				return filepath.Join(prevSnap.Path, filepath.FromSlash(e.Path))
			}
			return ""
		}
	}
	if err := copyEntries(ctx, abs, s.Path, m.Entries, c.reflink, reuse); err != nil {
		os.RemoveAll(s.Path)
		return Snapshot{}, fmt.Errorf("%s take %s: %w", c.Name(), abs, err)
	}
	if err := c.saveSnapshot(s); err != nil {
		os.RemoveAll(s.Path)
		return Snapshot{}, err
	}
	return s, nil
}

// Restore repairs dir so that it matches snapshot id: extra paths are
// removed, missing and changed ones copied back, modes and owners fixed.
func (c *Copy) Restore(ctx context.Context, dir, id string) error {
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
	m, err := c.loadManifest(abs, id)
	if err != nil {
		return err
	}
	res, err := Verify(abs, m)
	if err != nil {
		return err
	}
	if err := repair(ctx, abs, s.Path, m, res, c.reflink); err != nil {
		return fmt.Errorf("%s restore %s: %w", c.Name(), abs, err)
	}
	return nil
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
	return c.dropMeta(abs, id)
}

// repair applies the inverse of res to dir, taking content from snap (a
// copy of the tree described by m).
func repair(ctx context.Context, dir, snap string, m *Manifest, res Residue, reflink bool) error {
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
	if err := copyEntries(ctx, snap, dir, ents, reflink, nil); err != nil {
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
// dst) under dst from src, then sets owner, mode and times. reuse, if not
// nil, names an existing identical file to hard-link instead of copying.
func copyEntries(ctx context.Context, src, dst string, ents []Entry, reflink bool, reuse func(Entry) string) error {
	var dirs []Entry
	for i, e := range ents {
		if i%64 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		from := filepath.Join(src, filepath.FromSlash(e.Path))
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
			if reuse != nil {
				if old := reuse(e); old != "" {
					if err := os.Link(old, to); err == nil {
						continue
					}
				}
			}
			if err := copyFile(from, to, reflink); err != nil {
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
