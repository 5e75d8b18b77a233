package fssnap

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/lockstep-hq/lockstep"
)

// Lazy manifests. A btrfs snapshot is a read-only subvolume and an
// overlay snapshot a stack of read-only layers: its content cannot change
// after the take. So the CLI's take (TakeRecorded) writes no manifest,
// only the record (LazyManifest); the manifest is built from the
// snapshot itself, not from the live directory, the first time it is
// asked for (LoadManifest, `snapshot restore --verify`) and stored. Its
// racy reference is the snapshot's CreatedAt, read before the ioctl or
// the freeze: a file whose ctime is within the racy window of it is
// hashed again by Verify, as for a manifest built at the take. Hashes
// are reused, by inode, size, mtime and ctime, from the newest earlier
// snapshot of the directory whose manifest is stored (snapshots keep
// inodes and times).

// lazyTaker is a driver whose snapshots can have their manifest built
// later from the snapshot.
type lazyTaker interface {
	takeLazy(ctx context.Context, dir string) (Snapshot, error)
}

// manifestOf returns snapshot id's manifest: the stored one, or for a
// lazily taken snapshot one built from the snapshot now (and stored).
func (b base) manifestOf(abs, id string) (*Manifest, error) {
	m, err := b.loadManifest(abs, id)
	if err == nil || lockstep.ErrorCode(err) != lockstep.ENOTFOUND {
		return m, err
	}
	s, serr := b.loadSnapshot(abs, id)
	if serr != nil || !s.LazyManifest {
		return nil, err
	}
	unlock, lerr := b.lock(abs)
	if lerr != nil {
		return nil, lerr
	}
	defer unlock()
	// Another process may have built it meanwhile.
	if m, err := b.loadManifest(abs, id); err == nil || lockstep.ErrorCode(err) != lockstep.ENOTFOUND {
		return m, err
	}
	if _, err := b.loadSnapshot(abs, id); err != nil {
		return nil, err // dropped meanwhile
	}
	dir, release, err := b.openSnapshot(s)
	if err != nil {
		return nil, err
	}
	m, err = buildManifestAt(dir, s.CreatedAt, func() *Manifest { return b.earlierManifest(abs, s) })
	if rerr := release(); err == nil {
		err = rerr
	}
	if err != nil {
		return nil, fmt.Errorf("manifest of snapshot %s of %s: %w", id, abs, err)
	}
	m.Root = abs
	if err := writeManifest(manifestBase(filepath.Join(b.metaDir(abs), "snapshots"), id), m); err != nil {
		return nil, err
	}
	return m, nil
}

// earlierManifest is the stored manifest of the newest snapshot of abs
// taken before s, or nil. Only an earlier one: its entries that are not
// racy were stable before s was taken, so a file of s with the same
// inode, size, mtime and ctime has the same content.
func (b base) earlierManifest(abs string, s Snapshot) *Manifest {
	all, err := b.listAll(abs)
	if err != nil {
		return nil
	}
	for i, tries := len(all)-1, 0; i >= 0 && tries < 16; i-- {
		p := all[i]
		if p.ID == s.ID || !p.CreatedAt.Before(s.CreatedAt) {
			continue
		}
		tries++
		if m, err := b.loadManifest(abs, p.ID); err == nil {
			return m
		}
	}
	return nil
}

// openSnapshot makes s's content readable as a directory until release.
func (b base) openSnapshot(s Snapshot) (dir string, release func() error, err error) {
	switch s.Driver {
	case NameBtrfs:
		return s.Path, func() error { return nil }, nil
	case NameOverlay:
		return (&Overlay{base: b}).mountSnapshot(s)
	}
	return "", nil, lockstep.Errorf(lockstep.EINTERNAL, "snapshot %s: driver %s keeps no read-only copy to build a manifest from", s.ID, s.Driver)
}

// mountSnapshot mounts s's layers read-only (over an empty bottom layer:
// an overlay without an upper directory needs two lower ones) on a
// directory under the data root.
func (o *Overlay) mountSnapshot(s Snapshot) (string, func() error, error) {
	st, err := o.state(s.Dir)
	if err != nil {
		return "", nil, err
	}
	if len(s.Layers) == 0 {
		return "", nil, lockstep.Errorf(lockstep.EINTERNAL, "overlay snapshot %s has no layers", s.ID)
	}
	dropStaleMounts(st)
	empty := filepath.Join(st.Data, "empty")
	if err := os.MkdirAll(empty, 0o700); err != nil {
		return "", nil, err
	}
	mnt, err := os.MkdirTemp(st.Data, "ro-")
	if err != nil {
		return "", nil, err
	}
	lowers := make([]string, 0, len(s.Layers)+1)
	for _, l := range s.Layers {
		lowers = append(lowers, st.layer(l))
	}
	lowers = append(lowers, empty)
	opts := "lowerdir=" + strings.Join(lowers, ":") + ",redirect_dir=off,metacopy=off,index=off"
	if err := unix.Mount("lockstep", mnt, "overlay", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		os.Remove(mnt)
		return "", nil, unavailable("overlay: mount snapshot %s read-only on %s: %v", s.ID, mnt, err)
	}
	return mnt, func() error {
		if err := unix.Unmount(mnt, unix.MNT_DETACH); err != nil {
			return unavailable("overlay: umount %s: %v", mnt, err)
		}
		return os.Remove(mnt)
	}, nil
}

// dropStaleMounts unmounts and removes the read-only mounts of snapshots
// that a process killed while building a manifest left under the data
// root. The caller holds the state lock, so none is in use.
func dropStaleMounts(st overlayState) {
	stale, _ := filepath.Glob(filepath.Join(st.Data, "ro-*"))
	for _, p := range stale {
		unix.Unmount(p, unix.MNT_DETACH)
		os.Remove(p)
	}
}
