// Package fssnap takes and restores filesystem snapshots of an agent's
// working directory, and proves with a manifest comparison that a restore
// left no residue.
//
// A Driver snapshots one directory. Snapshot ids are short strings the server
// records in a checkpoint record. Metadata (snapshot records, manifests) lives
// under a state root outside the snapshotted directory, keyed by a hash of the
// absolute directory path. Snapshot data that must share the directory's
// filesystem (btrfs subvolumes, reflink clones, overlay layers) lives under a
// data root on that filesystem: the state root when it is on the same device,
// otherwise "<filesystem root>/.lockstep-snapshots".
//
// Drivers, from fastest to most portable (Detect picks the first that fits):
//
//   - overlay: the directory is the merged mount of an overlay that Prepare
//     set up (the original content moved into a lower layer). Take freezes the
//     current state: the upper layer is renamed into a new read-only lower
//     layer and a fresh upper is mounted (O(1), no data copied; an unchanged
//     upper is reused without a remount). Restore unmounts, discards the upper
//     layer and remounts the snapshot's layer stack. Stacks deeper than
//     MaxLayers are flattened by copying the merged view into one layer.
//     Failure modes: umount fails with EBUSY while a process has its cwd or an
//     open file inside (the error names the holders; the run kills them
//     first); the legacy mount option string is bounded by a page, hence the
//     layer bound; renaming a directory that lives in a lower layer returns
//     EXDEV (redirect_dir is off by default), which tools such as mv handle by
//     copying.
//   - btrfs: the directory is a subvolume. Take creates a read-only snapshot
//     with the BTRFS_IOC_SNAP_CREATE_V2 ioctl. Restore creates a writable
//     snapshot of it beside the directory, swaps the two atomically with
//     renameat2(RENAME_EXCHANGE) and destroys the old subvolume. Failure
//     modes: nested subvolumes inside the directory prevent the destroy
//     (ENOTEMPTY); processes whose cwd is inside keep the destroyed subvolume
//     alive until they exit.
//   - reflink: a snapshot is a manifest plus the content of its files in an
//     object store shared by the directory's snapshots (objects/<sha256>
//     under the data root), each stored as a FICLONE clone (XFS, btrfs,
//     bcachefs; chosen by probing the data root). Take stores only the files
//     whose stat changed since the previous snapshot. Restore compares the
//     directory with the snapshot's manifest and repairs only what differs;
//     Drop removes the objects no other snapshot names.
//   - copy: the portable fallback; like reflink with plain copies.
//
// Manifest lists every path with type, mode, owner, size, content hash (files),
// symlink target, and mtime/ctime/inode for the fast path. Verify compares a
// directory with a manifest and hashes only files whose stat differs, or
// whose ctime is too close to the manifest's creation to be trusted (the
// "racy" rule of git's index); VerifyKnownDirs does the same but reads only
// the directories whose inode, mtime or ctime changed (the others' names are
// the manifest's, as in a take's walk). Not covered: extended attributes, ACLs, hard
// link identity (hard links are compared, and restored by copy drivers, as
// separate files), directory mtimes, and content of device nodes.
package fssnap
