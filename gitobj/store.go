package gitobj

import (
	"context"
	"io"
	"time"
)

// The object store of one fork network, split by use as go-git's
// storers are: Reader (what reads and checks need), Writer (what writes,
// GC and compaction need), RefMirror (git's copy of the refs), GitDir
// (where git's smart HTTP runs). Store is all of them; a service method
// that only reads can take a Reader.
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
//   - refs live in the metadata store: the RefMirror methods only keep
//     the copy git clients read (git namespaces) in step with it.
//
// Error contract: a missing object is lockstep not_found (Commit, Blob,
// TreeEntries, Log, Compare, AheadBehind, WriteCommit's tree or parent,
// CheckClosure); a bad upload is invalid_argument or too_large
// (IngestTar, ReceivePack, EditTree); a ref name the mirror cannot hold
// comes back as invalid_argument (MirrorRef) or a *MirrorError listing
// each ref (SyncMirror); anything else is internal (an I/O error of the
// storage) or, in object storage, unavailable. gitobjtest.Run checks it
// on every implementation.

// Reader reads a network's objects.
type Reader interface {
	// Objects is the network's objects as a go-git object storer (what
	// the merge engine reads).
	Objects() ObjectStorer
	Has(h Hash) bool
	Missing(oids []Hash) []Hash
	ExpandPrefix(prefix string, limit int) []Hash

	Commit(h Hash) (*CommitInfo, error)
	Log(from Hash, limit int, after Hash) ([]CommitInfo, error)
	TreeEntries(treeOrCommit Hash, path string) ([]TreeEntry, error)
	Blob(treeOrCommit Hash, path string) (*BlobInfo, io.ReadCloser, error)
	Archive(ctx context.Context, w io.Writer, treeOrCommit Hash) error
	Compare(base, head Hash, opts CompareOptions) ([]FileChange, error)
	AheadBehind(a, b Hash) (ahead, behind int, err error)

	// CheckRootTree refuses a tree a ref may not name (a symlink in it
	// climbs above it).
	CheckRootTree(h Hash) error
	// CheckClosure returns not_found when an object tree names is not
	// stored (subtrees equal to base's at the same path are skipped).
	CheckClosure(tree, base Hash) error
}

// Writer adds objects to a network and maintains its pack list.
type Writer interface {
	// WriteObjects writes objs as one pack (objects already stored are
	// skipped). An object naming one that is neither in objs nor stored
	// is refused (unavailable: a GC dropped it during the request;
	// retry) and nothing is written.
	WriteObjects(objs []EncodedObject) (WriteStats, error)
	WriteCommit(spec CommitSpec) (Hash, WriteStats, error)
	// EditTree computes the tree of edits applied to base and returns
	// the objects to write (nothing is written).
	EditTree(base Hash, edits []TreeEdit, lim Limits) (Hash, []EncodedObject, error)
	// IngestTar reads a worktree tar into objects (written by the caller
	// with WriteObjects; the Ingest holds the large files until Close).
	IngestTar(ctx context.Context, r io.Reader, lim Limits) (*Ingest, error)
	// ReceivePack validates and stores a git pack as received.
	ReceivePack(r io.Reader, lim Limits) (WriteStats, error)
	// ReceivePackFor is ReceivePack for a writer that may name only some
	// of the stored objects without sending them (opts.Present: a scoped
	// key's repository). An object the pack names (a tree entry, a
	// commit's tree or parent, a tag's target, a delta's base) that is
	// neither in the pack nor present is refused with the error of an
	// object that is not stored at all (invalid_argument); objects of the
	// pack already stored are checked as sent ones and counted in the
	// stats (the answer does not tell which were stored before).
	ReceivePackFor(r io.Reader, lim Limits, opts ReceiveOptions) (WriteStats, error)
	// CollectGarbage drops the network's unreachable objects older than
	// the cutoff (repo/gc.go; object storage: replica/objgc.go).
	CollectGarbage(ctx context.Context, opts GCOptions) (GCStats, error)

	// PackCount is the length of the pack list; Compact folds the packs
	// into one (cancelled with ctx).
	PackCount() int
	Compact(ctx context.Context) error
}

// ReceiveOptions restrict a ReceivePackFor.
type ReceiveOptions struct {
	// Present reports whether a stored object counts as present for
	// this write (nil: every stored object does, as in ReceivePack).
	Present func(Hash) bool
	// Sent, when set, is called once the pack is stored with each of its
	// objects (also those stored before), except a thin pack's bases.
	Sent func(Hash, ObjectType)
}

// RefMirror keeps git's view of one repository's refs (its namespace in
// the network's bare repository) equal to the metadata store's.
type RefMirror interface {
	// MirrorRef sets one ref (a zero oid deletes it).
	MirrorRef(repoName, ref string, oid Hash) error
	// MirrorRefs sets several refs as MirrorRef would one by one (a
	// zero oid deletes; deletes first), HEAD checked once: a ref it
	// cannot hold is skipped and listed in a *MirrorError.
	MirrorRefs(repoName string, refs []RefValue) error
	// MirrorHEAD points the repository's HEAD at refs/heads/branch.
	MirrorHEAD(repoName, branch string) error
	// SyncMirror makes the repository's refs exactly refs (full names).
	SyncMirror(repoName string, refs map[string]Hash) error
}

// GitDir is the bare repository git's smart HTTP serves (git
// upload-pack runs in it).
type GitDir interface {
	Dir() string
}

// Store is the object storage of one fork network: every seam above,
// and Close.
type Store interface {
	Reader
	Writer
	RefMirror
	GitDir
	Close() error
}

// OpenOptions are what the service asks of every network it opens.
type OpenOptions struct {
	// Fsync makes object writes durable before the write returns.
	Fsync bool
	// TempGrace: temp files older than this are taken as left by a
	// crash (0 = DefaultTempGrace).
	TempGrace time.Duration
}

// Opener opens (creating when missing) the object storage of the network
// whose directory is dir (networks/<name>.git under the data directory).
// It is what cmd chooses an implementation by: gitstore.Local (a bare
// repository on disk) or a *replica.Manager (object storage).
type Opener interface {
	Open(dir string, opts OpenOptions) (Store, error)
}

// OpenerFunc is an Opener as a function.
type OpenerFunc func(dir string, opts OpenOptions) (Store, error)

// Open calls f.
func (f OpenerFunc) Open(dir string, opts OpenOptions) (Store, error) { return f(dir, opts) }

// Optional interfaces. The service asks for them with a type assertion
// instead of a mode setting, so an implementation says what it is.

// Shared is implemented by an Opener whose networks several replicas
// share (object storage), when SharesNetworks reports true. The service
// then mirrors a repository's refs from the metadata store just before
// git serves it (not after each move nor at start-up), GC visits only
// the networks the metadata store knows, and the objects a write relies
// on are dated back by the clock skew allowed between replicas.
type Shared interface {
	Opener
	SharesNetworks() bool
}

// Refresher is implemented by a Store whose objects other replicas also
// write: Refresh brings its cache up to date with what they wrote (run
// before each request's first read of the network).
type Refresher interface {
	Refresh(ctx context.Context) error
}

// TempSweeper is implemented by an Opener whose networks keep temp files
// on local disk: SweepTemps removes those a crash left in the network at
// dir, untouched for grace.
type TempSweeper interface {
	SweepTemps(dir string, grace time.Duration, now time.Time) TempSweep
}
