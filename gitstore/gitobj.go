package gitstore

import (
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/lockstep-hq/lockstep/gitobj"
)

// The value types of the object-store seam live in package gitobj (the
// services import it, not this adapter); these aliases keep this
// package's own names for them.
type (
	CommitSpec     = gitobj.CommitSpec
	CommitInfo     = gitobj.CommitInfo
	TreeEntry      = gitobj.TreeEntry
	BlobInfo       = gitobj.BlobInfo
	CompareOptions = gitobj.CompareOptions
	FileChange     = gitobj.FileChange
	WriteStats     = gitobj.WriteStats
	TreeEdit       = gitobj.TreeEdit
	Limits         = gitobj.Limits
	Ingest         = gitobj.Ingest
	GCOptions      = gitobj.GCOptions
	GCStats        = gitobj.GCStats
	TempSweep      = gitobj.TempSweep
	RefProblem     = gitobj.RefProblem
	RefValue       = gitobj.RefValue
	MirrorError    = gitobj.MirrorError
	ReceiveOptions = gitobj.ReceiveOptions
)

const (
	// MinAbbrev is gitobj.MinAbbrev.
	MinAbbrev = gitobj.MinAbbrev
	// DefaultTempGrace is gitobj.DefaultTempGrace.
	DefaultTempGrace = gitobj.DefaultTempGrace
)

// EncodeCommit is gitobj.EncodeCommit.
func EncodeCommit(spec CommitSpec) plumbing.EncodedObject { return gitobj.EncodeCommit(spec) }

// CheckRefName is gitobj.CheckRefName.
func CheckRefName(ref string) error { return gitobj.CheckRefName(ref) }

// Close removes the spool file (gitobj.Ingest.Spool).
func (s *spool) Close() { s.close() }

// Local opens networks as bare repositories on local disk: the default
// object store (gitobj.Opener).
type Local struct{}

// Open opens (creating when missing) the bare repository dir.
func (Local) Open(dir string, opts gitobj.OpenOptions) (gitobj.Store, error) {
	n, err := Open(dir, Options{Fsync: opts.Fsync, TempGrace: opts.TempGrace})
	if err != nil {
		return nil, err
	}
	return n, nil
}

// SweepTemps removes the temp files a crash left in the bare repository
// dir (RemoveStaleTemps; gitobj.TempSweeper).
func (Local) SweepTemps(dir string, grace time.Duration, now time.Time) TempSweep {
	return RemoveStaleTemps(dir, grace, now)
}

var (
	_ gitobj.Store       = (*Network)(nil)
	_ gitobj.Opener      = Local{}
	_ gitobj.TempSweeper = Local{}
)
