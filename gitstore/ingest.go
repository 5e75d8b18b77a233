package gitstore

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/lockstep-hq/lockstep"
)

// IngestTar reads a tar stream (gzip-compressed or not: the gzip magic is
// sniffed) and builds its blobs and canonically sorted trees in memory.
// Modes: 100644, 100755 for any exec bit, 120000 for symlinks (the target
// is the blob), directories 040000; directory entries are optional,
// empty directories are dropped, "./x" is read as "x".
//
// It returns invalid_argument naming the entry for: a path that fails
// ValidatePath (absolute, "..", ".git", NUL, invalid UTF-8, empty
// components), a duplicate path, a path used both as a file and as a
// directory, device, fifo or hardlink entries, a symlink whose target is
// absolute or leaves the tree (resolved from the link's directory,
// following other symlinks of the upload), a truncated or corrupt tar or
// gzip stream, and every name or file git fsck --strict would flag (see
// ValidatePath and checkSpecialEntry: .gitmodules or .gitattributes that
// are not regular files or whose content git refuses, .gitignore or
// .mailmap symlinks). It returns too_large when the decompressed stream
// exceeds lim.MaxUploadBytes, a file exceeds lim.MaxFileBytes or there
// are more than lim.MaxFiles entries. Zero fields of lim take
// DefaultLimits.
//
// Files over spoolThreshold are never held in memory: they are hashed and
// compressed while they stream into a temporary file in the system's temp
// directory (Network.IngestTar uses the network's pack directory). The
// caller must Close the result.
func IngestTar(ctx context.Context, r io.Reader, lim Limits) (*Ingest, error) {
	return ingestTar(ctx, r, lim, "", spoolThreshold)
}

// IngestTar is the package-level IngestTar with the large-file spool in
// the network's pack directory: the blobs are copied from there into the
// pack WriteObjects writes.
func (n *Network) IngestTar(ctx context.Context, r io.Reader, lim Limits) (*Ingest, error) {
	return ingestTar(ctx, r, lim, filepath.Join(n.dir, "objects", "pack"), spoolThreshold)
}

func ingestTar(ctx context.Context, r io.Reader, lim Limits, spoolDir string, threshold int64) (in *Ingest, err error) {
	lim = lim.WithDefaults()
	var sp *spool
	defer func() {
		if err != nil {
			sp.close()
		}
	}()
	br := bufio.NewReaderSize(r, 1<<16)
	var src io.Reader = br
	gz := false
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, lockstep.Errorf(lockstep.EINVALID, "corrupt gzip stream: %v", err)
		}
		defer zr.Close()
		zr.Multistream(false)
		src = zr
		gz = true
	}
	lr := &limitReader{r: src, left: lim.MaxUploadBytes, max: lim.MaxUploadBytes}
	tr := tar.NewReader(lr)

	b := &treeBuilder{root: newDir()}
	// Blobs are hashed by workers while the tar is still being read.
	hashes := make(chan *plumbing.MemoryObject, 64)
	var hashers sync.WaitGroup
	for i := 0; i < runtime.GOMAXPROCS(0); i++ {
		hashers.Add(1)
		go func() {
			defer hashers.Done()
			for o := range hashes {
				o.Hash()
			}
		}()
	}
	closed := false
	stopHashers := func() {
		if !closed {
			closed = true
			close(hashes)
			hashers.Wait()
		}
	}
	defer stopHashers()
	entries := 0
	var buf []byte
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		lr.zeros = 0
		hdr, err := tr.Next()
		if err == io.EOF {
			// archive/tar also reports EOF when the stream just stops at
			// a header boundary; a complete archive ends with two zero
			// blocks, read during this call.
			if lr.zeros < 1024 {
				return nil, lockstep.Errorf(lockstep.EINVALID, "truncated tar stream (no end-of-archive marker)")
			}
			break
		}
		if err != nil {
			return nil, streamError(err, gz, "")
		}
		if hdr.Typeflag == tar.TypeXGlobalHeader {
			continue
		}
		entries++
		if entries > lim.MaxFiles {
			return nil, lockstep.Errorf(lockstep.ETOOLARGE, "tar has more than %d entries (at %q)", lim.MaxFiles, hdr.Name)
		}
		name := hdr.Name
		for strings.HasPrefix(name, "./") {
			name = name[2:]
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			name = strings.TrimSuffix(name, "/")
			if name == "" || name == "." {
				continue // the root itself
			}
			if err := ValidatePath(name); err != nil {
				return nil, entryError(hdr.Name, err)
			}
			if _, err := checkSpecialEntry(name, path.Base(name), "directory"); err != nil {
				return nil, entryError(hdr.Name, err)
			}
			if err := b.addDir(name); err != nil {
				return nil, err
			}
		case tar.TypeReg, tar.TypeRegA, tar.TypeCont:
			if err := ValidatePath(name); err != nil {
				return nil, entryError(hdr.Name, err)
			}
			if hdr.Size > lim.MaxFileBytes {
				return nil, lockstep.Errorf(lockstep.ETOOLARGE, "tar entry %q: file is %d bytes, over the %d-byte limit (--max-file-bytes)", hdr.Name, hdr.Size, lim.MaxFileBytes)
			}
			if hdr.Size > lr.left {
				return nil, tooLargeUpload(lim)
			}
			special, err := checkSpecialEntry(name, path.Base(name), "file")
			if err != nil {
				return nil, entryError(hdr.Name, err)
			}
			var obj plumbing.EncodedObject
			if hdr.Size > threshold {
				if sp == nil {
					if sp, err = newSpool(spoolDir); err != nil {
						return nil, err
					}
				}
				sb, err := sp.add(tr, hdr.Size)
				if err != nil {
					return nil, streamError(err, gz, hdr.Name)
				}
				if special != "" {
					if err := checkSpooledSpecial(special, sb); err != nil {
						return nil, lockstep.Errorf(lockstep.EINVALID, "tar entry %q: %v", hdr.Name, err)
					}
				}
				obj = sb
			} else {
				if int64(cap(buf)) < hdr.Size {
					buf = make([]byte, hdr.Size)
				}
				buf = buf[:hdr.Size]
				if _, err := io.ReadFull(tr, buf); err != nil {
					return nil, streamError(err, gz, hdr.Name)
				}
				if special != "" {
					if err := checkSpecialContent(special, hdr.Size, buf); err != nil {
						return nil, lockstep.Errorf(lockstep.EINVALID, "tar entry %q: %v", hdr.Name, err)
					}
				}
				mo := &plumbing.MemoryObject{}
				mo.SetType(plumbing.BlobObject)
				mo.Write(buf)
				hashes <- mo
				obj = mo
			}
			mode := filemode.Regular
			if hdr.Mode&0o111 != 0 {
				mode = filemode.Executable
			}
			if err := b.addFile(name, mode, obj); err != nil {
				return nil, err
			}
		case tar.TypeSymlink:
			if err := ValidatePath(name); err != nil {
				return nil, entryError(hdr.Name, err)
			}
			if err := checkSymlinkTarget(name, hdr.Linkname); err != nil {
				return nil, entryError(hdr.Name, err)
			}
			if err := checkSymlinkName(name); err != nil {
				return nil, entryError(hdr.Name, err)
			}
			obj := &plumbing.MemoryObject{}
			obj.SetType(plumbing.BlobObject)
			obj.Write([]byte(hdr.Linkname))
			if err := b.addFile(name, filemode.Symlink, obj); err != nil {
				return nil, err
			}
		case tar.TypeLink:
			return nil, lockstep.Errorf(lockstep.EINVALID, "tar entry %q: hardlinks are not supported (link to %q)", hdr.Name, hdr.Linkname)
		case tar.TypeChar, tar.TypeBlock:
			return nil, lockstep.Errorf(lockstep.EINVALID, "tar entry %q: device files are not supported", hdr.Name)
		case tar.TypeFifo:
			return nil, lockstep.Errorf(lockstep.EINVALID, "tar entry %q: fifos are not supported", hdr.Name)
		default:
			return nil, lockstep.Errorf(lockstep.EINVALID, "tar entry %q: unsupported entry type %q", hdr.Name, string(hdr.Typeflag))
		}
	}
	// Drain: a gzip stream must end with a valid trailer (checksum).
	if _, err := io.Copy(io.Discard, lr); err != nil {
		return nil, streamError(err, gz, "")
	}
	stopHashers()
	if err := b.checkSymlinks(); err != nil {
		return nil, err
	}
	in = &Ingest{Files: b.files, Bytes: b.bytes, Spool: sp}
	seen := map[plumbing.Hash]bool{}
	add := func(o plumbing.EncodedObject) {
		if h := o.Hash(); !seen[h] {
			seen[h] = true
			in.Objects = append(in.Objects, o)
		}
	}
	in.Tree = b.root.build(add)
	if in.Tree.IsZero() { // nothing but empty directories
		in.Tree = emptyTree(add)
	}
	return in, nil
}

func emptyTree(add func(plumbing.EncodedObject)) plumbing.Hash {
	obj := &plumbing.MemoryObject{}
	(&object.Tree{}).Encode(obj)
	add(obj)
	return obj.Hash()
}

func entryError(name string, err error) error {
	var le *lockstep.Error
	if errors.As(err, &le) {
		return lockstep.Errorf(le.Code, "tar entry %q: %s", name, le.Message)
	}
	return err
}

func tooLargeUpload(lim Limits) error {
	return lockstep.Errorf(lockstep.ETOOLARGE, "upload is larger than %d bytes (decompressed)", lim.MaxUploadBytes)
}

// streamError turns a tar or gzip read error into invalid_argument (or
// keeps the too_large of the limit reader).
func streamError(err error, gz bool, entry string) error {
	var le *lockstep.Error
	if errors.As(err, &le) {
		return le
	}
	what := "tar"
	if gz && (errors.Is(err, gzip.ErrChecksum) || errors.Is(err, gzip.ErrHeader) || strings.Contains(err.Error(), "flate")) {
		what = "gzip"
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		if entry != "" {
			return lockstep.Errorf(lockstep.EINVALID, "truncated %s stream in entry %q", what, entry)
		}
		return lockstep.Errorf(lockstep.EINVALID, "truncated %s stream", what)
	}
	if entry != "" {
		return lockstep.Errorf(lockstep.EINVALID, "corrupt %s stream in entry %q: %v", what, entry, err)
	}
	return lockstep.Errorf(lockstep.EINVALID, "corrupt %s stream: %v", what, err)
}

// limitReader fails with too_large once more than left bytes are read.
type limitReader struct {
	r     io.Reader
	left  int64
	max   int64
	zeros int // zero bytes read since the last non-zero byte (or reset)
}

func (l *limitReader) Read(p []byte) (int, error) {
	if l.left < 0 {
		return 0, l.tooLarge()
	}
	if int64(len(p)) > l.left+1 {
		p = p[:l.left+1]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	if n > 0 {
		k := n
		for k > 0 && p[k-1] == 0 {
			k--
		}
		if k == 0 {
			l.zeros += n
		} else {
			l.zeros = n - k
		}
	}
	if l.left < 0 {
		return n, l.tooLarge()
	}
	return n, err
}

func (l *limitReader) tooLarge() error {
	return lockstep.Errorf(lockstep.ETOOLARGE, "upload is larger than %d bytes (decompressed)", l.max)
}

// checkSpooledSpecial checks a .gitmodules or .gitattributes too large
// to have been kept in memory.
func checkSpooledSpecial(special string, sb *spooledBlob) error {
	if special != ".gitattributes" || sb.Size() > maxAttributesBytes {
		return checkSpecialContent(special, sb.Size(), nil)
	}
	r, err := sb.Reader()
	if err != nil {
		return err
	}
	defer r.Close()
	return checkAttributesLines(r)
}

// node is a file, symlink or directory of an upload being assembled.
type node struct {
	mode     filemode.FileMode // Dir for directories
	obj      plumbing.EncodedObject
	children map[string]*node
	explicit bool // named by an entry of its own (dirs may be implicit)
}

func newDir() *node { return &node{mode: filemode.Dir, children: map[string]*node{}} }

type treeBuilder struct {
	root     *node
	symlinks []string
	files    int
	bytes    int64
}

// parent returns the directory that will hold p, creating implicit
// directories; it fails when a prefix of p is a file.
func (b *treeBuilder) parent(p string) (*node, string, error) {
	dir := b.root
	rest := p
	for {
		i := strings.IndexByte(rest, '/')
		if i < 0 {
			return dir, rest, nil
		}
		c := rest[:i]
		rest = rest[i+1:]
		child := dir.children[c]
		if child == nil {
			child = newDir()
			dir.children[c] = child
		} else if child.mode != filemode.Dir {
			prefix := p[:len(p)-len(rest)-1]
			return nil, "", lockstep.Errorf(lockstep.EINVALID, "tar entry %q: %q is a file, not a directory", p, prefix)
		}
		dir = child
	}
}

func (b *treeBuilder) addDir(p string) error {
	dir, name, err := b.parent(p)
	if err != nil {
		return err
	}
	switch n := dir.children[name]; {
	case n == nil:
		n = newDir()
		n.explicit = true
		dir.children[name] = n
	case n.mode != filemode.Dir:
		return lockstep.Errorf(lockstep.EINVALID, "tar entry %q: directory where a file of the same path exists", p)
	case n.explicit:
		return lockstep.Errorf(lockstep.EINVALID, "tar entry %q: duplicate entry", p)
	default:
		n.explicit = true
	}
	return nil
}

func (b *treeBuilder) addFile(p string, mode filemode.FileMode, obj plumbing.EncodedObject) error {
	dir, name, err := b.parent(p)
	if err != nil {
		return err
	}
	if n := dir.children[name]; n != nil {
		if n.mode == filemode.Dir {
			return lockstep.Errorf(lockstep.EINVALID, "tar entry %q: file where a directory of the same path exists", p)
		}
		return lockstep.Errorf(lockstep.EINVALID, "tar entry %q: duplicate entry", p)
	}
	dir.children[name] = &node{mode: mode, obj: obj, explicit: true}
	if mode == filemode.Symlink {
		b.symlinks = append(b.symlinks, p)
	}
	b.files++
	b.bytes += obj.Size()
	return nil
}

// lookup returns the node at the given components, or nil.
func (b *treeBuilder) lookup(comps []string) *node {
	n := b.root
	for _, c := range comps {
		if n.mode != filemode.Dir {
			return nil
		}
		if n = n.children[c]; n == nil {
			return nil
		}
	}
	return n
}

// maxSymlinkDepth is how many symlinks one check follows at most (the
// kernel's MAXSYMLINKS).
const maxSymlinkDepth = 40

// checkSymlinks resolves every symlink from its directory, following the
// upload's own symlinks, and fails if one leaves the root.
func (b *treeBuilder) checkSymlinks() error {
	for _, p := range b.symlinks {
		n := b.lookup(strings.Split(p, "/"))
		target := symlinkTarget(n.obj)
		dir := strings.Split(path.Dir(p), "/")
		if dir[0] == "." {
			dir = nil
		}
		budget := maxSymlinkDepth
		if _, err := b.resolve(dir, target, &budget); err != nil {
			return lockstep.Errorf(lockstep.EINVALID, "tar entry %q: symlink target %q %s", p, target, err.Message)
		}
	}
	return nil
}

// resolve resolves target from dir, following the upload's symlinks.
// budget is how many more links may be followed in this whole check
// (shared by every branch of the recursion, as the kernel counts: a
// per-branch depth alone lets links that name each other repeatedly take
// exponential time).
func (b *treeBuilder) resolve(dir []string, target string, budget *int) ([]string, *lockstep.Error) {
	if *budget--; *budget < 0 {
		return nil, lockstep.Errorf(lockstep.EINVALID, "has too many levels of symlinks")
	}
	if strings.HasPrefix(target, "/") {
		return nil, lockstep.Errorf(lockstep.EINVALID, "is absolute")
	}
	stack := append([]string(nil), dir...)
	for c := range strings.SplitSeq(target, "/") {
		switch c {
		case "", ".":
			continue
		case "..":
			if len(stack) == 0 {
				return nil, lockstep.Errorf(lockstep.EINVALID, "escapes the tree")
			}
			stack = stack[:len(stack)-1]
			continue
		}
		next := append(stack, c)
		if n := b.lookup(next); n != nil && n.mode == filemode.Symlink {
			resolved, err := b.resolve(stack, symlinkTarget(n.obj), budget)
			if err != nil {
				return nil, err
			}
			stack = resolved
			continue
		}
		stack = next
	}
	return stack, nil
}

func symlinkTarget(o plumbing.EncodedObject) string {
	r, err := o.Reader()
	if err != nil {
		return ""
	}
	defer r.Close()
	b, _ := io.ReadAll(r)
	return string(b)
}

// build encodes the directory bottom-up, calling add for every blob and
// tree, and returns the tree hash (zero for a directory with no files).
func (n *node) build(add func(plumbing.EncodedObject)) plumbing.Hash {
	entries := make([]object.TreeEntry, 0, len(n.children))
	for name, c := range n.children {
		h := plumbing.ZeroHash
		if c.mode == filemode.Dir {
			h = c.build(add)
			if h.IsZero() {
				continue // empty directory: git cannot store it
			}
		} else {
			add(c.obj)
			h = c.obj.Hash()
		}
		entries = append(entries, object.TreeEntry{Name: name, Mode: c.mode, Hash: h})
	}
	if len(entries) == 0 {
		return plumbing.ZeroHash
	}
	sort.Sort(object.TreeEntrySorter(entries))
	obj := &plumbing.MemoryObject{}
	if err := (&object.Tree{Entries: entries}).Encode(obj); err != nil {
		// Names were validated and entries sorted: Encode cannot refuse.
		panic(fmt.Sprintf("repo: encode tree: %v", err))
	}
	add(obj)
	return obj.Hash()
}
