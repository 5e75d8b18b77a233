package fssnap

import (
	"context"
	"path/filepath"

	"github.com/lockstep-hq/lockstep"
)

// The CLI's snapshots (`lockstep snapshot take/restore`) keep a manifest
// per snapshot, for `restore --verify` and LoadManifest. On btrfs and
// overlay, whose snapshots are read-only, the take writes none: it is
// built from the snapshot when first needed (lazy.go), so a take costs the
// driver's snapshot and its record. The copy and reflink drivers build
// theirs during the take (it says what to copy) and store it.

// TakeRecorded takes a snapshot of dir with drv and makes sure its
// manifest is stored or can be built later from the snapshot (btrfs,
// overlay: Snapshot.LazyManifest, s.Manifest nil). Errors: as drv.Take.
func TakeRecorded(ctx context.Context, drv Driver, opts Options, dir string) (Snapshot, error) {
	b := base{opts: opts.withDefaults()}
	abs, err := absDir(dir)
	if err != nil {
		return Snapshot{}, err
	}
	if lt, ok := drv.(lazyTaker); ok {
		return lt.takeLazy(ctx, abs)
	}
	s, err := drv.Take(ctx, abs)
	if err != nil {
		return Snapshot{}, err
	}
	if s.Manifest != nil {
		return s, nil // stored with the record (saveSnapshot)
	}
	m, err := BuildManifest(abs, nil)
	if err != nil {
		return Snapshot{}, err
	}
	s.Manifest = m
	return s, writeManifest(manifestBase(filepath.Join(b.metaDir(abs), "snapshots"), s.ID), m)
}

// ExactRestore reports whether drv's Restore makes the directory exactly
// the snapshot by construction (btrfs: the directory becomes a writable
// snapshot of a read-only one; overlay: the snapshot's layers under an
// empty upper directory), so a verify after it checks nothing the driver
// has not already guaranteed.
func ExactRestore(drv Driver) bool {
	switch drv.Name() {
	case NameBtrfs, NameOverlay:
		return true
	}
	return false
}

// RestoreRecorded restores dir to snapshot id with drv. With verify, or
// when the driver's restore is not exact (ExactRestore), it compares dir
// with the snapshot's manifest (built from the snapshot first if it was
// taken lazily, while dir is walked) and returns the residue (nil when
// there was no manifest or no verify), with the snapshot's record.
// Errors: as drv.Restore; internal when the restore left residue.
func RestoreRecorded(ctx context.Context, drv Driver, opts Options, dir, id string, verify bool) (Snapshot, *Residue, error) {
	b := base{opts: opts.withDefaults()}
	abs, err := absDir(dir)
	if err != nil {
		return Snapshot{}, nil, err
	}
	s, err := b.loadSnapshot(abs, id)
	if err != nil {
		return Snapshot{}, nil, err
	}
	if err := drv.Restore(ctx, abs, id); err != nil {
		return s, nil, err
	}
	var res *Residue
	if verify || !ExactRestore(drv) {
		m, r, err := verifyLazy(abs, func() (*Manifest, error) { return b.manifestOf(abs, id) })
		switch {
		case m == nil && err != nil && lockstep.ErrorCode(err) != lockstep.ENOTFOUND:
			return s, nil, err
		case m != nil && err != nil:
			return s, nil, err
		}
		if m != nil {
			res = &r
			if !r.Clean() {
				return s, res, lockstep.Errorf(lockstep.EINTERNAL, "restore left residue: %s", r)
			}
		}
	}
	return s, res, nil
}
