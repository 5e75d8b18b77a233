package fssnap

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/lockstep-hq/lockstep"
)

// Btrfs snapshots a directory that is a btrfs subvolume. Take is one
// BTRFS_IOC_SNAP_CREATE_V2 ioctl (a read-only snapshot under the data root,
// which must be on the same filesystem); Restore snapshots it back writable
// beside the directory, exchanges the two with renameat2(RENAME_EXCHANGE)
// and destroys the old subvolume with BTRFS_IOC_SNAP_DESTROY. Inode numbers
// and timestamps survive snapshots, so Verify after a restore hashes nothing.
type Btrfs struct{ base }

var _ Driver = (*Btrfs)(nil)

// Name is "btrfs".
func (b *Btrfs) Name() string { return NameBtrfs }

// btrfs ioctl ABI (linux/btrfs.h).
const (
	btrfsSubvolRdonly = 1 << 1
	// _IOW(0x94, 23, struct btrfs_ioctl_vol_args_v2), sizeof = 4096
	iocSnapCreateV2 = 0x50009417
	// _IOW(0x94, 15, struct btrfs_ioctl_vol_args), sizeof = 4096
	iocSnapDestroy = 0x5000940f
	// _IOW(0x94, 14, struct btrfs_ioctl_vol_args)
	iocSubvolCreate        = 0x5000940e
	btrfsFirstFreeObjectID = 256
)

type btrfsVolArgsV2 struct {
	Fd      int64
	Transid uint64
	Flags   uint64
	Unused  [4]uint64
	Name    [4040]byte
}

type btrfsVolArgs struct {
	Fd   int64
	Name [4088]byte
}

func isSubvolume(abs string) bool {
	var st unix.Stat_t
	return unix.Stat(abs, &st) == nil && st.Ino == btrfsFirstFreeObjectID && st.Mode&unix.S_IFMT == unix.S_IFDIR
}

// snapCreate snapshots the subvolume src as parentDir/name.
func snapCreate(src, parentDir, name string, readonly bool) error {
	s, err := os.Open(src)
	if err != nil {
		return err
	}
	defer s.Close()
	p, err := os.Open(parentDir)
	if err != nil {
		return err
	}
	defer p.Close()
	var args btrfsVolArgsV2
	args.Fd = int64(s.Fd())
	if readonly {
		args.Flags = btrfsSubvolRdonly
	}
	copy(args.Name[:len(args.Name)-1], name)
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, p.Fd(), iocSnapCreateV2, uintptr(unsafe.Pointer(&args))); e != 0 {
		return fmt.Errorf("btrfs snapshot %s -> %s/%s: %w", src, parentDir, name, e)
	}
	return nil
}

// snapDestroy deletes the subvolume parentDir/name.
func snapDestroy(parentDir, name string) error {
	p, err := os.Open(parentDir)
	if err != nil {
		return err
	}
	defer p.Close()
	var args btrfsVolArgs
	copy(args.Name[:len(args.Name)-1], name)
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, p.Fd(), iocSnapDestroy, uintptr(unsafe.Pointer(&args))); e != 0 {
		return fmt.Errorf("btrfs destroy %s/%s: %w", parentDir, name, e)
	}
	return nil
}

// CreateSubvolume creates an empty btrfs subvolume at path (the parent must
// be on btrfs), for callers that set a workspace up for this driver.
func CreateSubvolume(path string) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	p, err := os.Open(filepath.Dir(abs))
	if err != nil {
		return err
	}
	defer p.Close()
	var args btrfsVolArgs
	copy(args.Name[:len(args.Name)-1], filepath.Base(abs))
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, p.Fd(), iocSubvolCreate, uintptr(unsafe.Pointer(&args))); e != 0 {
		return fmt.Errorf("btrfs subvolume create %s: %w", abs, e)
	}
	return nil
}

func (b *Btrfs) check(dir string) (abs, root string, err error) {
	abs, err = absDir(dir)
	if err != nil {
		return "", "", err
	}
	if !isSubvolume(abs) {
		return "", "", lockstep.Errorf(lockstep.EINVALID, "btrfs: %s is not a subvolume", abs)
	}
	root, err = b.dataRoot(abs)
	if err != nil {
		return "", "", err
	}
	if !sameDevFS(root, abs) {
		return "", "", lockstep.Errorf(lockstep.EINVALID, "btrfs: data root %s is not on the filesystem of %s", root, abs)
	}
	return abs, root, nil
}

// Take creates a read-only snapshot of the subvolume dir.
func (b *Btrfs) Take(ctx context.Context, dir string) (Snapshot, error) {
	return b.take(ctx, dir, false)
}

// takeLazy is Take for a snapshot whose manifest is built from the
// read-only subvolume when it is first needed (lazyManifest).
func (b *Btrfs) takeLazy(ctx context.Context, dir string) (Snapshot, error) {
	return b.take(ctx, dir, true)
}

// take snapshots dir; CreatedAt is read before the ioctl, so that it is
// a safe racy reference for a manifest built from the snapshot later.
func (b *Btrfs) take(ctx context.Context, dir string, lazy bool) (Snapshot, error) {
	abs, root, err := b.check(dir)
	if err != nil {
		return Snapshot{}, err
	}
	unlock, err := b.lock(abs)
	if err != nil {
		return Snapshot{}, err
	}
	defer unlock()
	id := newID()
	at := b.opts.Now()
	if err := snapCreate(abs, root, id, true); err != nil {
		return Snapshot{}, unavailable("%v", err)
	}
	s := Snapshot{ID: id, Driver: NameBtrfs, Dir: abs, CreatedAt: at, Path: filepath.Join(root, id), LazyManifest: lazy}
	if err := b.saveSnapshot(s); err != nil {
		snapDestroy(root, id)
		return Snapshot{}, err
	}
	return s, nil
}

// Restore replaces the subvolume dir by a writable snapshot of id.
func (b *Btrfs) Restore(ctx context.Context, dir, id string) error {
	abs, _, err := b.check(dir)
	if err != nil {
		return err
	}
	unlock, err := b.lock(abs)
	if err != nil {
		return err
	}
	defer unlock()
	s, err := b.loadSnapshot(abs, id)
	if err != nil {
		return err
	}
	parent, name := filepath.Dir(abs), filepath.Base(abs)
	tmp := "." + name + ".lockstep-" + newID()
	if err := snapCreate(s.Path, parent, tmp, false); err != nil {
		return unavailable("%v", err)
	}
	pf, err := os.Open(parent)
	if err != nil {
		return err
	}
	defer pf.Close()
	pfd := int(pf.Fd())
	if err := unix.Renameat2(pfd, tmp, pfd, name, unix.RENAME_EXCHANGE); err != nil {
		snapDestroy(parent, tmp)
		return unavailable("btrfs restore %s: exchange: %v", abs, err)
	}
	if err := snapDestroy(parent, tmp); err != nil {
		if errors.Is(err, unix.ENOTEMPTY) {
			return unavailable("btrfs restore %s: old subvolume %s/%s holds nested subvolumes: %v", abs, parent, tmp, err)
		}
		return unavailable("%v", err)
	}
	return nil
}

// List returns dir's snapshots, oldest first.
func (b *Btrfs) List(dir string) ([]Snapshot, error) { return b.list(dir, NameBtrfs) }

// Drop destroys snapshot id.
func (b *Btrfs) Drop(dir, id string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	unlock, err := b.lock(abs)
	if err != nil {
		return err
	}
	defer unlock()
	s, err := b.loadSnapshot(abs, id)
	if err != nil {
		return err
	}
	if err := snapDestroy(filepath.Dir(s.Path), filepath.Base(s.Path)); err != nil && !errors.Is(err, unix.ENOENT) {
		return unavailable("%v", err)
	}
	return b.dropMeta(abs, id)
}
