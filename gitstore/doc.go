// Package repo is Lockstep's git object layer: one bare git repository per
// fork network, shared by every repository (base and forks) of the network.
//
// # On-disk layout
//
// A Network lives in the directory its caller chooses, for example
// <data>/networks/<id>.git, and is an ordinary bare repository that the git
// CLI can inspect:
//
//	HEAD, config (core.bare = true)
//	objects/pack/pack-<sha>.pack + .idx   one pack per write (WriteObjects) or per
//	                                      received git pack (as git stores it: deltas
//	                                      kept; see packstore.go)
//	objects/xx/yyyy…                      loose objects (single commits: WriteCommit)
//	refs/namespaces/<repo>/refs/heads/…   each Lockstep repository is a git namespace
//	refs/namespaces/<repo>/HEAD           symref to the repository's default branch
//	lockstep/heads/<repo>                 the default branch chosen (HEAD exists only
//	                                      while that branch does: fsck demands it)
//
// A fork copies refs only: every repository of a network sees every object,
// so merges across forks need no object transfer. `git upload-pack` with
// GIT_NAMESPACE=<repo> serves one repository's refs.
//
// # Refs
//
// This package never decides a ref's value. The metadata database holds the
// branch heads and does the compare-and-swap; after its transaction commits
// it calls MirrorRef / MirrorHEAD / SyncMirror, which write ref files with
// temp file + fsync + rename. Objects are always durable (fsynced when
// Options.Fsync) before a write function returns, so the caller may move a
// ref afterwards.
//
// # Concurrency
//
// go-git's filesystem.Storage is not goroutine-safe, so it is not used.
// Network keeps its own list of packs, each with a decoded in-memory index
// (idxfile.MemoryIndex, internally locked, with the reverse offset map warmed
// at load) and a go-git packfile.Packfile reader guarded by a per-pack mutex.
// Packfile readers are created without a filesystem, so every object read
// returns a fully read plumbing.MemoryObject: no lazy reader escapes the
// lock. The pack list and a map from every packed object to its pack (so
// a lookup costs one map probe however many packs pushes have left) are
// guarded by a RWMutex; writers are serialised by a separate mutex and
// publish a new pack only after pack and index are fsynced and renamed. Loose objects are immutable
// files written by rename, readable without locks. All exported methods of
// Network and of the value returned by Objects are safe for concurrent use.
//
// # Errors
//
// Functions return *lockstep.Error with code invalid_argument for bad
// input (tar entries, packs, paths), too_large for limits, not_found for a
// missing object, path or wrong object type; anything else is internal.
package gitstore
