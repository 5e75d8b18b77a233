package fssnap

import (
	"context"
	"os"
	"path/filepath"

	"github.com/lockstep-hq/lockstep"
)

// The CLI's snapshots (`lockstep snapshot take/restore`) keep a manifest
// per snapshot, and remember which one describes the directory as it is
// now (current.json in the directory's state: the last snapshot taken or
// restored). A take builds its manifest from that one, hashing only the
// files whose inode, size, mtime or ctime changed since (BuildManifest's
// stat match); a restore makes the restored snapshot's manifest current.
// Reusing a hash across a restore is safe because btrfs and overlay
// restores keep each file's inode, mtime and ctime, and a file whose
// ctime is within the racy window of that manifest's start is hashed
// again, as in BuildManifest.

type currentRecord struct {
	ID string `json:"id"`
}

func (b base) currentPath(abs string) string { return filepath.Join(b.metaDir(abs), "current.json") }

// currentManifest returns the manifest recorded as describing abs now,
// or nil when there is none (never recorded, dropped, unreadable).
func (b base) currentManifest(abs string) *Manifest {
	var rec currentRecord
	if err := readJSON(b.currentPath(abs), &rec); err != nil || !validID(rec.ID) {
		return nil
	}
	m, err := b.loadManifest(abs, rec.ID)
	if err != nil {
		return nil
	}
	return m
}

// TakeRecorded takes a snapshot of dir with drv, stores its manifest
// (built reusing the hashes of dir's current manifest) and makes it
// current. Errors: as drv.Take.
func TakeRecorded(ctx context.Context, drv Driver, opts Options, dir string) (Snapshot, error) {
	b := base{opts: opts.withDefaults()}
	abs, err := absDir(dir)
	if err != nil {
		return Snapshot{}, err
	}
	// Decoding the current manifest (JSON) costs about as much as the
	// snapshot and the walk: it runs beside them.
	prevc := make(chan *Manifest, 1)
	go func() { prevc <- b.currentManifest(abs) }()
	s, err := drv.Take(ctx, abs)
	if err != nil {
		<-prevc
		return Snapshot{}, err
	}
	m := s.Manifest
	if m == nil {
		if m, err = buildManifest(abs, func() *Manifest { return <-prevc }); err != nil {
			return Snapshot{}, err
		}
	} else {
		<-prevc
	}
	if err := writeManifest(manifestBase(filepath.Join(b.metaDir(abs), "snapshots"), s.ID), m); err != nil {
		return Snapshot{}, err
	}
	s.Manifest = m
	return s, writeJSON(b.currentPath(abs), currentRecord{ID: s.ID})
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

// RestoreRecorded restores dir to snapshot id with drv and makes id's
// manifest current. With verify, or when the driver's restore is not
// exact (ExactRestore), it compares dir with the manifest and returns the
// residue (nil when there was no manifest or no verify), with the
// snapshot's record. Errors: as drv.Restore; internal when the restore
// left residue.
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
		m, err := b.loadManifest(abs, id)
		if err != nil && lockstep.ErrorCode(err) != lockstep.ENOTFOUND {
			return s, nil, err
		}
		if m != nil {
			r, err := Verify(abs, m)
			if err != nil {
				return s, nil, err
			}
			res = &r
			if !r.Clean() {
				os.Remove(b.currentPath(abs))
				return s, res, lockstep.Errorf(lockstep.EINTERNAL, "restore left residue: %s", r)
			}
		}
	}
	// Without a stored manifest, currentManifest finds none: the next
	// take hashes everything.
	return s, res, writeJSON(b.currentPath(abs), currentRecord{ID: id})
}
