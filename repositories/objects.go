package repositories

import (
	"context"
	"io"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/storer"

	"github.com/lockstep-hq/lockstep/repo"
)

// ObjectStore is the object storage of one fork network: the seam
// between the services and where objects live. The services reach a
// repository's objects only through it (Service.Network); today's local
// bare repository (repo.Network) is its first implementation, an
// object-storage one (immutable packs in a bucket, issue #11) the next.
//
// The shape follows immutable packs plus a pack list:
//
//   - every write (WriteObjects, WriteCommit, ReceivePack, IngestTar's
//     large files) produces one new pack named by its checksum; it is
//     complete and durable when the call returns, and published in the
//     pack list, so it can be uploaded before the ref transaction in the
//     metadata store names its objects (objects before refs);
//   - packs are never modified; Compact folds them into one new pack and
//     then drops the old ones (readers holding an old list still find
//     every object);
//   - refs live in the metadata store: the Mirror methods only keep the
//     copy git clients read (git namespaces) in step with it.
//
// Error contract: a missing object is lockstep not_found (Commit, Blob,
// TreeEntries, Log); a bad upload is invalid_argument or too_large
// (IngestTar, ReceivePack, EditTree); a ref name the mirror cannot hold
// comes back as a *repo.MirrorError listing each ref; anything else is
// internal (an I/O error of the storage).
type ObjectStore interface {
	// Objects is the network's objects as a go-git object storer (what
	// the merge engine reads).
	Objects() storer.EncodedObjectStorer
	Has(h plumbing.Hash) bool
	Missing(oids []plumbing.Hash) []plumbing.Hash
	ExpandPrefix(prefix string, limit int) []plumbing.Hash

	Commit(h plumbing.Hash) (*repo.CommitInfo, error)
	Log(from plumbing.Hash, limit int, after plumbing.Hash) ([]repo.CommitInfo, error)
	TreeEntries(treeOrCommit plumbing.Hash, path string) ([]repo.TreeEntry, error)
	Blob(treeOrCommit plumbing.Hash, path string) (*repo.BlobInfo, io.ReadCloser, error)
	Archive(ctx context.Context, w io.Writer, treeOrCommit plumbing.Hash) error
	Compare(base, head plumbing.Hash, opts repo.CompareOptions) ([]repo.FileChange, error)
	AheadBehind(a, b plumbing.Hash) (ahead, behind int, err error)

	// WriteObjects writes objs as one pack (objects already stored are
	// skipped).
	WriteObjects(objs []plumbing.EncodedObject) (repo.WriteStats, error)
	WriteCommit(spec repo.CommitSpec) (plumbing.Hash, repo.WriteStats, error)
	// EditTree computes the tree of edits applied to base and returns
	// the objects to write (nothing is written).
	EditTree(base plumbing.Hash, edits []repo.TreeEdit, lim repo.Limits) (plumbing.Hash, []plumbing.EncodedObject, error)
	// IngestTar reads a worktree tar into objects (written by the caller
	// with WriteObjects; the Ingest holds the large files until Close).
	IngestTar(ctx context.Context, r io.Reader, lim repo.Limits) (*repo.Ingest, error)
	// ReceivePack validates and stores a git pack as received.
	ReceivePack(r io.Reader, lim repo.Limits) (repo.WriteStats, error)
	// CheckRootTree refuses a tree a ref may not name (a symlink in it
	// climbs above it).
	CheckRootTree(h plumbing.Hash) error
	// CheckClosure returns not_found when an object tree names is not
	// stored (subtrees equal to base's at the same path are skipped).
	CheckClosure(tree, base plumbing.Hash) error
	// CollectGarbage drops the network's unreachable objects older than
	// the cutoff (repo/gc.go; object storage: replica/objgc.go).
	CollectGarbage(ctx context.Context, opts repo.GCOptions) (repo.GCStats, error)

	// PackCount is the length of the pack list; Compact folds the packs
	// into one (cancelled with ctx).
	PackCount() int
	Compact(ctx context.Context) error

	// MirrorRef, MirrorHEAD and SyncMirror keep git's view of one
	// repository's refs (its namespace) equal to the metadata store's.
	MirrorRef(repoName, ref string, oid plumbing.Hash) error
	MirrorHEAD(repoName, branch string) error
	SyncMirror(repoName string, refs map[string]plumbing.Hash) error

	// Dir is the bare repository git's smart HTTP serves (git
	// upload-pack runs in it).
	Dir() string
	Close() error
}

var _ ObjectStore = (ObjectStore)(nil)

// OpenLocal opens a network as a local bare repository (repo.Network):
// the default Config.OpenNetwork.
func OpenLocal(dir string, opts repo.Options) (ObjectStore, error) {
	n, err := repo.Open(dir, opts)
	if err != nil {
		return nil, err
	}
	return n, nil
}
