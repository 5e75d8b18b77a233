// Package worktree is the client side of the incremental push: it turns an
// agent's working directory into git objects and sends the server only the
// objects it lacks.
//
// A push has four steps, of which this package does the first three and the
// caller (the CLI, with its HTTP client) supplies the transport:
//
//  1. Scan walks the directory and builds, in memory, exactly the blob and
//     tree objects `git add -A && git write-tree` would build (same modes,
//     same entry order, no empty directories), so the snapshot's root tree
//     oid is the one git computes. Blob content is not kept: a blob is a
//     path plus the stat it had, and is read again only if it must be sent.
//
//  2. Plan negotiates, top-down and level by level, which objects the
//     server is missing. It asks about the root tree; for every tree the
//     server lacks it asks, in one batch per level, about that tree's
//     children; it descends only into missing trees. A tree the server has
//     is assumed complete (the server keeps only connected objects, as git
//     does), so an unchanged subtree costs one oid in one request. A change
//     to one file d directories below the root yields d+1 trees and one
//     blob, found in d+2 small round trips (one per tree on the path, the
//     last of which asks about the blob); each asks about the entries of
//     one directory per missing tree, not about the whole tree.
//
//     With a hint (PlanOptions.Known: the trees of the last push the server
//     accepted, remembered in the StatCache), Plan instead asks once about
//     the old root and every object not under an old tree: one round trip.
//     The old root in the same request checks the hint; if the server no
//     longer has it, Plan falls back to the level-by-level walk.
//
//  3. WritePack writes those objects as one version 2 packfile (go-git's
//     encoder, no deltas), reading each blob from disk at that moment and
//     refusing to send a file whose stat or content changed since Scan.
//
//  4. The caller uploads the pack and asks the server to commit the root
//     tree with compare-and-swap on the workspace head; once it has, the
//     caller records Snapshot.Known in the cache and saves it.
//
// In code, the CLI's push is:
//
//	cache, _ := worktree.OpenStatCache(filepath.Join(dir, ".lockstep", "statcache"))
//	snap, err := worktree.Scan(dir, worktree.ScanOptions{Cache: cache, MaxFileBytes: limit})
//	oids, err := worktree.Plan(ctx, snap, client.Missing, &worktree.PlanOptions{Known: cache.Known()})
//	// stream worktree.WritePack(snap, oids, pipeWriter, nil) into client.UploadPack
//	// client.Commit(ctx, workspace, snap.Tree, expectedHead)
//	cache.SetKnown(snap.Known())
//	cache.Save()
//
// The server must keep the invariant git keeps: it has a tree only if it
// has everything under it (an uploaded pack is accepted whole or not at
// all, and the commit step checks that the tree is complete, as it must
// anyway since a client may lie).
//
// # Stat cache
//
// Hashing a 20 MB tree on every push would cost more than the push itself,
// so Scan consults a StatCache: path → (size, mtime, ctime, inode, device,
// mode) → blob oid, the same idea as git's index. A file whose lstat matches
// its entry is neither read nor hashed. As in git, an entry is trusted only
// if the file's mtime is strictly older than the cache's reference time
// (the "racy git" rule): a file rewritten with the same size within the
// same timestamp tick would otherwise keep a stale oid. The reference time
// is the filesystem clock sampled (by touching the cache file) when the
// Scan that produced the entries started, so that it comes from the same
// coarse clock as the files' mtimes and also covers a file rewritten
// during the Scan, after it was read; keep the cache on the same
// filesystem as the tree. The cache is a small binary file written with
// write-then-rename; a missing or corrupt cache is
// treated as empty, which only costs a full re-hash.
//
// The cache also keeps the tree oid of every directory (its directory
// table, written by every Scan). With a watcher (ScanOptions.Watcher),
// Scan stats only the changed paths and encodes only the directories on
// the paths from them to the root, taking every other tree oid from the
// table: O(changed × depth) hashing and encoding. Such a snapshot is
// partial (the trees it encoded and the files of their directories); it
// is completed from the cache, without reading a file, when the cache's
// hint (Known) does not hold every unchanged tree it points to, or when
// Plan cannot use the hint.
//
// The cache must live outside the pushed tree: the CLI keeps it under
// <dir>/.lockstep/, which Scan never enters, or in a user cache directory.
//
// The package needs Unix stat fields (inode, device, ctime) and *at system
// calls from golang.org/x/sys/unix: it builds on Linux and macOS, not on
// Windows.
package worktree
