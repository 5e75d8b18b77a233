package gitobj

import (
	"fmt"
	"strings"
	"time"

	"github.com/lockstep-hq/lockstep"
)

// CommitSpec describes a commit to create.
type CommitSpec struct {
	Tree      Hash
	Parents   []Hash
	Author    Signature
	Committer Signature
	Message   string
}

// CommitInfo is a decoded commit.
type CommitInfo struct {
	Hash      Hash      `json:"hash"`
	Tree      Hash      `json:"tree"`
	Parents   []Hash    `json:"parents"`
	Author    Signature `json:"author"`
	Committer Signature `json:"committer"`
	Message   string    `json:"message"`
}

// TreeEntry is one entry of a tree listing.
type TreeEntry struct {
	Name string `json:"name"`
	Path string `json:"path"`
	// Mode is git's octal mode: "100644", "100755", "120000", "040000",
	// "160000".
	Mode string `json:"mode"`
	// Type is "blob", "tree", "symlink" or "commit" (a submodule).
	Type string `json:"type"`
	Hash Hash   `json:"hash"`
	// Size is the blob size (files and symlinks), 0 otherwise.
	Size int64 `json:"size"`
}

// BlobInfo describes a file returned by Blob.
type BlobInfo struct {
	Hash Hash   `json:"hash"`
	Mode string `json:"mode"`
	Size int64  `json:"size"`
}

// CompareOptions tune Compare.
type CompareOptions struct {
	// Context is the number of context lines around each hunk
	// (default 3; negative means 0).
	Context int
	// MaxPatchBytes bounds the total size of the patches returned; once it
	// is reached the remaining files come without a patch and with
	// PatchTruncated set (0 = 1 MiB).
	MaxPatchBytes int64
}

// FileChange is one changed path between two trees.
type FileChange struct {
	Path string `json:"path"`
	// Status is "added", "deleted", "modified", "mode_changed" (same
	// content, mode 100644 <-> 100755) or "type_changed" (file, symlink
	// and submodule turned into one another).
	Status  string `json:"status"`
	OldMode string `json:"old_mode,omitempty"`
	NewMode string `json:"new_mode,omitempty"`
	OldHash Hash   `json:"old_hash"`
	NewHash Hash   `json:"new_hash"`
	// Added and Removed count lines (0 for binary files).
	Added   int `json:"added"`
	Removed int `json:"removed"`
	// Binary is set when either side has a NUL byte in its first 8000
	// bytes, as git decides; binary files get no patch.
	Binary bool `json:"binary"`
	// Patch is the unified diff with git-style headers (diff --git,
	// mode lines, index, ---/+++).
	Patch string `json:"patch,omitempty"`
	// PatchTruncated is set when the patch was left out: the total
	// CompareOptions.MaxPatchBytes was reached, or a side is over 16 MiB
	// (then no line diff runs and Added/Removed count every line of the
	// new/old file, an upper bound).
	PatchTruncated bool `json:"patch_truncated,omitempty"`
}

// WriteStats says what a write added to the store.
type WriteStats struct {
	// Objects is the number of objects written (objects already stored are
	// skipped and not counted).
	Objects int `json:"objects"`
	// Bytes is the number of bytes written to disk (pack + index, or the
	// compressed loose object).
	Bytes int64 `json:"bytes"`
	// Tops are a received pack's outermost objects: its commits and the
	// trees no other tree of the pack contains (what a later request may
	// name: PUT worktree?tree= names the root tree just uploaded).
	Tops []Hash `json:"-"`
}

// Add accumulates o into s.
func (s *WriteStats) Add(o WriteStats) { s.Objects += o.Objects; s.Bytes += o.Bytes }

// TreeEdit is one change to a tree: write a regular file (Delete false)
// or delete a file or a whole directory (Delete true).
type TreeEdit struct {
	Path       string
	Delete     bool
	Content    []byte
	Executable bool
}

// Limits bound an upload (tar or pack).
type Limits struct {
	// MaxUploadBytes bounds the decompressed size of the whole upload.
	MaxUploadBytes int64
	// MaxFileBytes bounds the size of one file (blob).
	MaxFileBytes int64
	// MaxFiles bounds the number of tar entries, or of objects in a pack.
	MaxFiles int
}

// DefaultLimits returns the limits used for a zero field of Limits:
// 512 MiB per upload (decompressed), 100 MiB per file, 100,000 files.
// (A function, not a variable: no package-level mutable state.)
func DefaultLimits() Limits {
	return Limits{MaxUploadBytes: 512 << 20, MaxFileBytes: 100 << 20, MaxFiles: 100_000}
}

// WithDefaults returns l with each zero (or negative) field set from
// DefaultLimits.
func (l Limits) WithDefaults() Limits {
	d := DefaultLimits()
	if l.MaxUploadBytes <= 0 {
		l.MaxUploadBytes = d.MaxUploadBytes
	}
	if l.MaxFileBytes <= 0 {
		l.MaxFileBytes = d.MaxFileBytes
	}
	if l.MaxFiles <= 0 {
		l.MaxFiles = d.MaxFiles
	}
	return l
}

// Ingest is a worktree read from a tar stream: its root tree and every
// blob and tree object it needs (not yet written; pass Objects to
// WriteObjects, then call Close).
type Ingest struct {
	Tree    Hash            `json:"tree"`
	Objects []EncodedObject `json:"-"`
	// Files counts regular files and symlinks.
	Files int `json:"files"`
	// Bytes is the total size of file contents.
	Bytes int64 `json:"bytes"`
	// Spool, set by the store, holds the large blobs (on disk) that
	// Objects read until Close; nil when there are none.
	Spool interface{ Close() } `json:"-"`
}

// Close releases the upload's large blobs (Spool). Objects must not be
// read after Close (write them first).
func (in *Ingest) Close() {
	if in != nil && in.Spool != nil {
		in.Spool.Close()
	}
}

// GCOptions configure one CollectGarbage.
type GCOptions struct {
	// Roots are the commits (or any objects) that must stay with their
	// closure: refs and retained commits.
	Roots []Hash
	// Cutoff: only objects of packs and loose files last modified (object
	// storage: registered) before it may be dropped.
	Cutoff time.Time
	// DryRun computes what would be dropped and changes nothing.
	DryRun bool
	// Commit is the commit point, called once the dropped objects are no
	// longer visible and before they are deleted; an error puts them back
	// and is returned. p and retire are object storage's: the pack
	// holding the live objects of the replaced packs (nil when none) and
	// the packs it replaces; nil and empty in local mode.
	// It returns the network's generation after the commit.
	Commit func(p *lockstep.PackRecord, retire []string) (int64, error)
}

// GCStats says what one CollectGarbage dropped (or, dry, would drop).
type GCStats struct {
	// Objects counts unreachable objects dropped, Packs the packs removed
	// (replaced by one holding their live objects, if any), Loose the
	// loose object files removed, Bytes the bytes freed (pack bytes of
	// the dropped objects plus the removed loose files).
	Objects int   `json:"objects"`
	Packs   int   `json:"packs"`
	Loose   int   `json:"loose"`
	Bytes   int64 `json:"bytes"`
}

// Add adds o to s.
func (s *GCStats) Add(o GCStats) {
	s.Objects += o.Objects
	s.Packs += o.Packs
	s.Loose += o.Loose
	s.Bytes += o.Bytes
}

// TempSweep says what a sweep of crash leftovers removed.
type TempSweep struct {
	Files int
	Bytes int64
}

// DefaultTempGrace is the age after which a temp file is taken as left
// by a crash when OpenOptions.TempGrace is not set.
const DefaultTempGrace = 15 * time.Minute

// MinAbbrev is the shortest abbreviated object id accepted (git's
// minimum).
const MinAbbrev = 4

// RefValue is a ref's full name and the oid the mirror gives it (zero:
// deleted).
type RefValue struct {
	Ref string
	OID Hash
}

// RefProblem is a ref the mirror could not hold: a name git refuses, a
// zero oid, or a write that failed (for example a file/directory clash
// with another ref that an older server let into the store).
type RefProblem struct {
	Repo string
	Ref  string
	Err  error
}

// MirrorError lists the refs SyncMirror skipped; every other ref of the
// repository was synced.
type MirrorError struct {
	Problems []RefProblem
}

func (e *MirrorError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d refs not mirrored:", len(e.Problems))
	for i, p := range e.Problems {
		if i == 5 {
			fmt.Fprintf(&b, " …")
			break
		}
		fmt.Fprintf(&b, " %s %s (%v);", p.Repo, p.Ref, p.Err)
	}
	return strings.TrimSuffix(b.String(), ";")
}

// CheckRefName checks that ref is a full ref name git accepts (exactly
// the rules of git check-ref-format, lockstep.CheckRefFormat) starting
// with "refs/".
func CheckRefName(ref string) error {
	if !strings.HasPrefix(ref, "refs/") || len(ref) > 1024 {
		return lockstep.Errorf(lockstep.EINVALID, "invalid ref name %q: want refs/… of at most 1024 bytes", ref)
	}
	return lockstep.CheckRefFormat(ref)
}
