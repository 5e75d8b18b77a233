package gitstore

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/object"
	gobinary "github.com/go-git/go-git/v5/utils/binary"

	"github.com/lockstep-hq/lockstep"
)

// ReceivePack reads a packfile built by a client (a push), validates it
// and stores it as git would (packstore.go): the same pack with its
// deltas, completed with the bases of a thin pack (ref deltas may refer
// to objects already stored), with an .idx, fsynced before it returns
// when Options.Fsync. Objects already stored are neither validated again
// nor counted; a pack holding nothing new is not stored.
//
// Nothing git fsck --strict flags is accepted (see fsck.go and path.go).
// Every tree must be canonical (git's sort order, unique names, valid
// modes, no null ids), its entry names must pass the name rules of
// validateComponent (".git" and its NTFS/HFS+ aliases), .gitmodules and
// .gitattributes must be regular files with content git accepts, every
// entry it names (except gitlinks) must exist in the pack or the store
// with the right type, symlink targets (the blobs of 120000 entries) must
// be relative and must not leave the tree they are checked out in; every
// commit and tag must pass fsck's header checks, every commit's tree
// and parents must exist, and a tag's target must exist with the type
// its "type" header names. Returns invalid_argument for a
// corrupt or invalid pack and too_large over lim (MaxUploadBytes for the
// pack and for its inflated objects, MaxFileBytes per blob, MaxFiles
// objects); nothing is written then.
func (n *Network) ReceivePack(r io.Reader, lim Limits) (WriteStats, error) {
	return n.ReceivePackFor(r, lim, ReceiveOptions{})
}

// ReceivePackFor is ReceivePack for a writer that may name only the
// stored objects opts.Present accepts (gitobj.Writer): the pack's
// references outside itself, thin-pack bases included, must be present;
// its objects stored already are validated and counted as new ones, so
// neither the answer nor the error tells that an object the writer may
// not name is stored.
func (n *Network) ReceivePackFor(r io.Reader, lim Limits, opts ReceiveOptions) (WriteStats, error) {
	lim = lim.WithDefaults()
	// The pack is not spooled: it streams through prescan into git
	// index-pack as it arrives (indexReceived), as git's receive-pack
	// feeds index-pack, so the client's pack-objects, prescan and
	// index-pack overlap. Large blobs are spooled as they are parsed
	// (overlay.SetEncodedObject).
	up := &uploadReader{r: r, left: lim.MaxUploadBytes, limit: lim.MaxUploadBytes}
	br := bufio.NewReaderSize(up, 1<<16)
	hdr, _ := br.Peek(32) // the smallest pack: header, one tiny object, trailer
	if up.err != nil {
		return WriteStats{}, up.err
	}
	if len(hdr) < 32 || string(hdr[:4]) != "PACK" {
		return WriteStats{}, lockstep.Errorf(lockstep.EINVALID, "not a git packfile")
	}
	count := binary.BigEndian.Uint32(hdr[8:12])
	if int64(count) > int64(lim.MaxFiles) {
		return WriteStats{}, lockstep.Errorf(lockstep.ETOOLARGE, "pack has %d objects, over the limit of %d", count, lim.MaxFiles)
	}
	if count == 0 {
		// git sends an empty pack for a delete-only push.
		io.Copy(io.Discard, br)
		return WriteStats{}, up.err
	}
	return n.storeReceived(br, up, lim, opts)
}

// uploadReader reads a received pack: at most limit bytes (too_large
// beyond), remembering the first error, which ReceivePack reports over
// whatever a reader of the pack made of it. A *lockstep.Error from r (the
// HTTP layer's own upload limit) is kept as it is.
type uploadReader struct {
	r           io.Reader
	left, limit int64
	err         error
}

func (u *uploadReader) Read(p []byte) (int, error) {
	if u.err != nil {
		return 0, u.err
	}
	if int64(len(p)) > u.left+1 {
		p = p[:u.left+1]
	}
	k, err := u.r.Read(p)
	if u.left -= int64(k); u.left < 0 {
		u.err = lockstep.Errorf(lockstep.ETOOLARGE, "pack is larger than %d bytes", u.limit)
		return 0, u.err
	}
	if err != nil && err != io.EOF {
		var le *lockstep.Error
		if errors.As(err, &le) {
			u.err = le
		} else {
			u.err = fmt.Errorf("receive pack: %w", err)
		}
		return k, u.err
	}
	return k, err
}

// storeReceived stores the pack read from body (up is its source, for
// its error) as git stores it (see packstore.go): prescanned while
// indexed into a quarantine, its new objects validated, then published
// with its deltas. Nothing is written to objects/pack when a check
// fails, or when every object is stored already.
func (n *Network) storeReceived(body io.Reader, up *uploadReader, lim Limits, opts ReceiveOptions) (WriteStats, error) {
	q, err := n.indexReceived(body, up, lim)
	if err != nil {
		return WriteStats{}, err
	}
	defer q.remove()
	ov, err := n.loadQuarantine(q, lim, opts.Present)
	if err != nil {
		return WriteStats{}, err
	}
	if len(ov.order) == 0 {
		return WriteStats{}, nil
	}
	if err := n.validateObjects(ov); err != nil {
		return WriteStats{}, err
	}
	var stored int64
	if ov.fresh > 0 {
		if stored, err = n.publishReceived(q); err != nil {
			return WriteStats{}, err
		}
	} else if stored, err = q.size(); err != nil { // every object was stored: nothing to publish
		return WriteStats{}, err
	}
	n.rememberAscent(ov.ascent)
	if opts.Sent != nil {
		for _, o := range ov.order {
			opts.Sent(o.Hash(), o.Type())
		}
	}
	return WriteStats{Objects: len(ov.order), Bytes: stored, Tops: ov.tops}, nil
}

// prescan checks the sizes every object of the pack declares (for a
// delta, the size of its result) against lim before anything is
// inflated into memory: a small compressed pack may otherwise expand to
// gigabytes. It parses the pack as go-git's packfile.Scanner does (same
// header, object header and OFS-delta offset rules, the same errors),
// but inflates nothing: skipZlib decodes each object's deflate stream
// only to find where it ends, counting the bytes it stands for (an
// object inflating past its declared size is refused at once) and
// keeping its first bytes (a delta's result size). What only the
// inflated bytes show (a stream short of its declared size, a wrong
// Adler-32) git index-pack refuses, as it inflates every object itself
// and holds it to its declared size and checksum (builtin/index-pack.c,
// unpack_entry_data), before it resolves any delta. So the declared
// sizes are the inflated sizes: their sum is the pack's inflated total.
// Skipping costs about half of klauspost's inflate, which was most of
// the receive's own CPU (BenchmarkPrescanFullHistory).
func prescan(data io.Reader, lim Limits) error {
	return prescanGated(data, lim, nil, nil)
}

// prescanGated is prescan passing on to g (if not nil) each byte of data
// once prescan has consumed it (see gate), and then the rest of data
// (the trailer) if it accepts the pack. It records in tab (if not nil)
// each object's offset, pack type, size (a delta's result size) and
// delta base, from which loadQuarantine lists the indexed pack.
func prescanGated(data io.Reader, lim Limits, g *gate, tab *packTable) error {
	cr := &countingReader{r: data}
	br := bufio.NewReaderSize(cr, 1<<16)
	offset := func() int64 { return cr.n - int64(br.Buffered()) }
	if g != nil {
		cr.r = g.reader(data, offset)
	}
	count, err := prescanHeader(br)
	if err != nil {
		return lockstep.Errorf(lockstep.EINVALID, "corrupt packfile: %v", err)
	}
	if tab != nil {
		tab.reset(count)
	}
	var total int64
	var skip skipper
	for i := uint32(0); i < count; i++ {
		at := offset()
		typ, length, base, err := prescanObjectHeader(br, at)
		if err != nil {
			return lockstep.Errorf(lockstep.EINVALID, "corrupt packfile (object %d): %v", i, err)
		}
		size := length
		if length > lim.MaxFileBytes {
			return lockstep.Errorf(lockstep.ETOOLARGE, "pack object %d is %d bytes, over the %d-byte limit (--max-file-bytes)", i, length, lim.MaxFileBytes)
		}
		// Neither is inflated (skipZlib): an object's size is its
		// declared one, which git index-pack holds it to; a delta's
		// result size is in the first bytes its stream inflates to.
		if err := skipZlib(br, length, &skip); err != nil {
			return lockstep.Errorf(lockstep.EINVALID, "corrupt packfile (object %d): %v", i, err)
		}
		if typ.IsDelta() {
			_, d := deltaVarint(skip.Head()) // base size
			size, _ = deltaVarint(d)
		}
		if size > lim.MaxFileBytes {
			return lockstep.Errorf(lockstep.ETOOLARGE, "pack object %d inflates to %d bytes, over the %d-byte limit (--max-file-bytes)", i, size, lim.MaxFileBytes)
		}
		if total += size; total > lim.MaxUploadBytes {
			return lockstep.Errorf(lockstep.ETOOLARGE, "pack inflates to more than %d bytes", lim.MaxUploadBytes)
		}
		if tab != nil {
			tab.add(at, typ, size, base)
		}
	}
	if tab != nil {
		tab.end = offset()
	}
	if g != nil {
		return g.finish(offset(), data)
	}
	return nil
}

// prescanHeader reads the pack header as packfile.Scanner.Header does and
// returns the object count.
func prescanHeader(br *bufio.Reader) (uint32, error) {
	var sig [4]byte
	if _, err := io.ReadFull(br, sig[:]); err != nil {
		if err == io.EOF {
			return 0, packfile.ErrEmptyPackfile
		}
		return 0, err
	}
	if string(sig[:]) != "PACK" {
		return 0, packfile.ErrBadSignature
	}
	var v [4]byte
	if _, err := io.ReadFull(br, v[:]); err != nil {
		return 0, err
	}
	if version := binary.BigEndian.Uint32(v[:]); version != packfile.VersionSupported {
		return 0, packfile.ErrUnsupportedVersion.AddDetails("%d", version)
	}
	if _, err := io.ReadFull(br, v[:]); err != nil {
		return 0, err
	}
	return binary.BigEndian.Uint32(v[:]), nil
}

// prescanObjectHeader reads an object header at offset as
// packfile.Scanner.NextObjectHeader does: type and declared length, then
// an OFS delta's offset (which must point inside the pack, before the
// object) or a REF delta's base id, returned as base (its offset, or its
// id).
func prescanObjectHeader(br *bufio.Reader, offset int64) (typ plumbing.ObjectType, length int64, base deltaBase, err error) {
	c, err := br.ReadByte()
	if err != nil {
		return 0, 0, base, err
	}
	typ = plumbing.ObjectType((c & 0x70) >> 4)
	length = int64(c & 0x0f)
	shift := uint(4)
	for c&0x80 != 0 {
		if shift > 64-7 {
			return 0, 0, base, fmt.Errorf("%w: %w", packfile.ErrMalformedPackFile, packfile.ErrLengthOverflow)
		}
		if c, err = br.ReadByte(); err != nil {
			return 0, 0, base, err
		}
		length += int64(c&0x7f) << shift
		shift += 7
	}
	switch typ {
	case plumbing.OFSDeltaObject:
		no, err := gobinary.ReadVariableWidthInt(br)
		if err != nil {
			return 0, 0, base, err
		}
		if no <= 0 || no > offset {
			return 0, 0, base, fmt.Errorf("%w: invalid OFS delta offset", packfile.ErrMalformedPackFile)
		}
		base.offset = offset - no
	case plumbing.REFDeltaObject:
		if base.id, err = gobinary.ReadHash(br); err != nil {
			return 0, 0, base, err
		}
	}
	return typ, length, base, nil
}

// deltaVarint reads a size from a delta header (little-endian base 128).
func deltaVarint(b []byte) (int64, []byte) {
	var v int64
	for shift := uint(0); len(b) > 0 && shift < 63; shift += 7 {
		c := b[0]
		b = b[1:]
		v |= int64(c&0x7f) << shift
		if c&0x80 == 0 {
			break
		}
	}
	return v, b
}

// overlay holds the new objects of a received pack (loadQuarantine) for
// validateObjects; lookups of other objects fall through to the Network
// (a thin pack's bases, trees and blobs already stored).
type overlay struct {
	n      *Network
	objs   map[plumbing.Hash]plumbing.EncodedObject
	order  []plumbing.EncodedObject
	lim    Limits
	ascent map[plumbing.Hash]ascentInfo
	// tops: the commits and the trees no tree of the batch contains
	// (validateObjects; WriteStats.Tops).
	tops []plumbing.Hash
	// storedExist: an entry naming a stored object is only checked to
	// exist, not read for its type (a batch of our own writes, whose
	// entries come from stored trees; see checkWrite).
	storedExist bool
	// present, when set, is which stored objects the batch may name
	// without holding them (ReceivePackFor); fresh counts the objects of
	// order that were not stored before.
	present func(plumbing.Hash) bool
	fresh   int
	// specialOK: blobs whose content passed checkSpecialContent as the
	// named special file (a .gitattributes blob is named by every
	// version of its tree; its content is checked once).
	specialOK map[plumbing.Hash]string
}

func (o *overlay) EncodedObject(t plumbing.ObjectType, h plumbing.Hash) (plumbing.EncodedObject, error) {
	obj, ok := o.objs[h]
	if !ok {
		if o.present != nil && !o.present(h) {
			return nil, plumbing.ErrObjectNotFound
		}
		var err error
		if obj, err = o.n.object(h); err != nil {
			return nil, err
		}
	}
	if t != plumbing.AnyObject && obj.Type() != t {
		return nil, plumbing.ErrObjectNotFound
	}
	return obj, nil
}

// typeOf returns the type of h in the overlay or the store.
func (o *overlay) typeOf(h plumbing.Hash) (plumbing.ObjectType, bool) {
	if obj, ok := o.objs[h]; ok {
		return obj.Type(), true
	}
	if o.present != nil && !o.present(h) {
		return plumbing.InvalidObject, false
	}
	obj, err := o.n.object(h)
	if err != nil {
		return plumbing.InvalidObject, false
	}
	return obj.Type(), true
}

func invalidObject(h plumbing.Hash, format string, args ...any) error {
	return lockstep.Errorf(lockstep.EINVALID, "object %s: %s", h, fmt.Sprintf(format, args...))
}

// gone is the error for an object a check of h needs and finds neither in
// the batch nor stored. A pushed pack (ReceivePack) that names it is bad
// input (invalid_argument). A batch of our own writes (storedExist: tar
// pushes, edits, merges, rollbacks) names outside itself only what it
// read from the store when the request began: gone now means an object
// GC (on another replica) dropped it meanwhile, and the write is refused
// with unavailable (503, Retry-After): a retry writes it again.
// m is the object looked for: one that exists (with another type than
// the check wanted) is invalid_argument in both cases.
func (ov *overlay) gone(h, m plumbing.Hash, format string, args ...any) error {
	if _, inBatch := ov.objs[m]; ov.storedExist && !inBatch && !ov.n.has(m) {
		return lockstep.Errorf(lockstep.EUNAVAILABLE, "object %s: %s: an object gc dropped it during this request; retry", h, fmt.Sprintf(format, args...))
	}
	return invalidObject(h, format, args...)
}

// validateObjects checks every object of the overlay (see ReceivePack).
func (n *Network) validateObjects(ov *overlay) error {
	trees := map[plumbing.Hash]*object.Tree{}
	referenced := map[plumbing.Hash]bool{}
	var roots []plumbing.Hash // commit trees: may be stored trees used at a new depth
	var parents []plumbing.Hash
	for _, obj := range ov.order {
		h := obj.Hash()
		switch obj.Type() {
		case plumbing.TreeObject:
			t, err := decodeCanonicalTree(obj)
			if err != nil {
				return err
			}
			for _, e := range t.Entries {
				if e.Mode == filemode.Dir {
					referenced[e.Hash] = true
				}
			}
			if err := ov.checkTreeEntries(h, t, true); err != nil {
				return err
			}
			trees[h] = t
		case plumbing.CommitObject:
			// The header is parsed once: the tree and parents fsck's
			// rules accept are those Commit.Decode reads.
			tree, ps, err := checkCommitLinks(rawObject(obj), parents[:0])
			if err != nil {
				return invalidObject(h, "bad commit: %v", err)
			}
			parents = ps
			if typ, ok := ov.typeOf(tree); !ok {
				return ov.gone(h, tree, "commit tree %s is missing", tree)
			} else if typ != plumbing.TreeObject {
				return invalidObject(h, "commit tree %s is not a tree", tree)
			}
			roots = append(roots, tree)
			ov.tops = append(ov.tops, h)
			for _, p := range parents {
				if typ, ok := ov.typeOf(p); !ok {
					return ov.gone(h, p, "parent %s is missing", p)
				} else if typ != plumbing.CommitObject {
					return invalidObject(h, "parent %s is not a commit", p)
				}
			}
		case plumbing.TagObject:
			if err := checkTagObject(rawObject(obj)); err != nil {
				return invalidObject(h, "bad tag: %v", err)
			}
			t := &object.Tag{}
			if err := t.Decode(obj); err != nil {
				return invalidObject(h, "corrupt tag: %v", err)
			}
			got, ok := ov.typeOf(t.Target)
			if !ok {
				return invalidObject(h, "tag target %s is missing", t.Target)
			}
			// git fsck: "object X is a blob, not a commit" (bad tag
			// pointer). upload-pack would record the target with the
			// tag's type and refuse every fetch of refs naming it.
			if got != t.TargetType {
				return invalidObject(h, "bad tag: object %s is a %s, not a %s", t.Target, got, t.TargetType)
			}
			if got == plumbing.TreeObject {
				roots = append(roots, t.Target) // a tagged tree may be checked out as a root
			}
		case plumbing.BlobObject:
		default:
			return invalidObject(h, "unexpected object type %s", obj.Type())
		}
	}
	// Symlinks must stay inside the tree at the depth they are checked
	// out. A commit's or a tag's tree (even one already stored, e.g. a
	// former subtree) and any tree of the pack not contained in another one may
	// be checked out as a root, so nothing in it may climb above it.
	for h := range trees {
		if !referenced[h] {
			roots = append(roots, h)
			ov.tops = append(ov.tops, h)
		}
	}
	for _, h := range roots {
		up, where, err := n.ascent(ov, h, 0)
		if err != nil {
			return err
		}
		if up > 0 {
			return invalidObject(h, "symlink %q escapes the tree (as a root tree)", where)
		}
	}
	return nil
}

// checkTreeEntries applies the entry rules of a tree t (already decoded
// by decodeCanonicalTree, so its names passed validateComponent):
// .gitmodules and .gitattributes (and their aliases) are regular files
// with content git accepts, .gitignore and .mailmap are not symlinks,
// symlink targets are relative without NUL. With types, every entry
// (except gitlinks) must also exist with the type its mode names; without,
// only the blobs those rules read are looked at (a stored tree: its
// entries were stored with it).
func (ov *overlay) checkTreeEntries(h plumbing.Hash, t *object.Tree, types bool) error {
	for _, e := range t.Entries {
		if e.Mode == filemode.Submodule {
			if _, err := checkSpecialEntry(e.Name, e.Name, "submodule"); err != nil {
				return invalidObject(h, "%s", lockstep.ErrorMessage(err))
			}
			continue
		}
		if _, inBatch := ov.objs[e.Hash]; types && !inBatch && ov.storedExist {
			if !ov.n.has(e.Hash) {
				return ov.gone(h, e.Hash, "entry %q names %s, which is neither in the batch nor stored", e.Name, e.Hash)
			}
		} else if types {
			want := plumbing.BlobObject
			if e.Mode == filemode.Dir {
				want = plumbing.TreeObject
			}
			got, ok := ov.typeOf(e.Hash)
			if !ok {
				return invalidObject(h, "entry %q names %s, which is neither in the pack nor stored", e.Name, e.Hash)
			}
			if got != want {
				return invalidObject(h, "entry %q (mode %s) names a %s", e.Name, e.Mode, got)
			}
		}
		if special, err := checkSpecialEntry(e.Name, e.Name, entryKind(e.Mode)); err != nil {
			return invalidObject(h, "%s", lockstep.ErrorMessage(err))
		} else if special != "" && ov.specialOK[e.Hash] != special {
			blob, err := ov.EncodedObject(plumbing.BlobObject, e.Hash)
			if err != nil {
				return ov.gone(h, e.Hash, "entry %q: blob %s missing", e.Name, e.Hash)
			}
			var data []byte
			if blob.Size() <= maxGitmodulesBytes || special == ".gitattributes" && blob.Size() <= maxAttributesBytes {
				data = []byte(symlinkTarget(blob))
			}
			if err := checkSpecialContent(special, blob.Size(), data); err != nil {
				return invalidObject(h, "entry %q: %v", e.Name, err)
			}
			if ov.specialOK == nil {
				ov.specialOK = map[plumbing.Hash]string{}
			}
			ov.specialOK[e.Hash] = special
		}
		if e.Mode == filemode.Symlink {
			target, err := ov.EncodedObject(plumbing.BlobObject, e.Hash)
			if err != nil {
				return invalidObject(h, "symlink %q: target blob missing", e.Name)
			}
			if err := checkSymlinkTarget(e.Name, symlinkTarget(target)); err != nil {
				return invalidObject(h, "%s", lockstep.ErrorMessage(err))
			}
		}
	}
	return nil
}

// entryKind names what a tree entry mode is, for checkSpecialEntry.
func entryKind(m filemode.FileMode) string {
	switch m {
	case filemode.Dir:
		return "directory"
	case filemode.Symlink:
		return "symlink"
	case filemode.Submodule:
		return "submodule"
	}
	return "file"
}

// rawObject returns the content of an in-memory object (a quarantined
// one's own bytes, not a copy: callers only read them).
func rawObject(o plumbing.EncodedObject) []byte {
	if q, ok := o.(*quarantinedObject); ok && q.data != nil {
		return q.data
	}
	r, err := o.Reader()
	if err != nil {
		return nil
	}
	defer r.Close()
	b, _ := io.ReadAll(r)
	return b
}

// decodeCanonicalTree decodes a tree and checks that it is exactly what
// git writes: known modes, valid unique names, sorted.
func decodeCanonicalTree(obj plumbing.EncodedObject) (*object.Tree, error) {
	h := obj.Hash()
	var t *object.Tree
	q, quarantined := obj.(*quarantinedObject)
	quarantined = quarantined && (q.data != nil || q.size == 0)
	if quarantined {
		var err error
		if t, err = q.decodedTree(); err != nil {
			return nil, invalidObject(h, "corrupt tree: %v", err)
		}
	} else {
		t = &object.Tree{}
		if err := t.Decode(obj); err != nil {
			return nil, invalidObject(h, "corrupt tree: %v", err)
		}
	}
	prev := ""
	for i, e := range t.Entries {
		switch e.Mode {
		case filemode.Regular, filemode.Executable, filemode.Symlink, filemode.Dir, filemode.Submodule:
		default:
			return nil, invalidObject(h, "entry %q has invalid mode %o", e.Name, uint32(e.Mode))
		}
		if err := validateComponent(e.Name); err != nil {
			return nil, invalidObject(h, "entry %q: %s", e.Name, err.Message)
		}
		if e.Hash.IsZero() {
			return nil, invalidObject(h, "entry %q points to the null object id", e.Name)
		}
		key := e.Name
		if e.Mode == filemode.Dir {
			key += "/"
		}
		if i > 0 && key == prev {
			return nil, invalidObject(h, "duplicate entry %q", e.Name)
		}
		if i > 0 && key < prev {
			return nil, invalidObject(h, "entries not in git order at %q", e.Name)
		}
		prev = key
		// Sorted keys leave one duplicate possible: a directory named
		// as an earlier non-directory ("a" < "a-b" < "a/"). Every key
		// between the two starts with the name, so looking back over
		// those finds it (no map per tree).
		if e.Mode == filemode.Dir {
			for j := i - 1; j >= 0 && strings.HasPrefix(t.Entries[j].Name, e.Name); j-- {
				if t.Entries[j].Name == e.Name {
					return nil, invalidObject(h, "duplicate entry %q", e.Name)
				}
			}
		}
	}
	// Modes like "040000" or "100664" decode to the same FileMode: the
	// canonical encoding must hash back to the object.
	// A quarantined tree's content is that of h (git hashed it, cat-file
	// returned it for h), so comparing it with the canonical encoding is
	// comparing their hashes, without encoding and hashing again.
	if quarantined {
		if !canonicalTree(t, q.data) {
			return nil, invalidObject(h, "tree is not in canonical form (non-standard mode or encoding)")
		}
		return t, nil
	}
	re := &plumbing.MemoryObject{}
	if err := t.Encode(re); err != nil || re.Hash() != h {
		return nil, invalidObject(h, "tree is not in canonical form (non-standard mode or encoding)")
	}
	return t, nil
}

// canonicalTree reports whether raw is t's entries as object.Tree.Encode
// writes them ("%o %s\x00" and the 20-byte id each; the order and names
// were checked by decodeCanonicalTree).
func canonicalTree(t *object.Tree, raw []byte) bool {
	var mode [12]byte
	for _, e := range t.Entries {
		m := strconv.AppendUint(mode[:0], uint64(e.Mode), 8)
		n := len(m) + 1 + len(e.Name) + 1 + len(e.Hash)
		if len(raw) < n || string(raw[:len(m)]) != string(m) || raw[len(m)] != ' ' {
			return false
		}
		r := raw[len(m)+1:]
		if string(r[:len(e.Name)]) != e.Name || r[len(e.Name)] != 0 || string(r[len(e.Name)+1:len(e.Name)+1+len(e.Hash)]) != string(e.Hash[:]) {
			return false
		}
		raw = raw[n:]
	}
	return len(raw) == 0
}

// ascent returns how many levels above tree h the symlinks inside it
// (at any depth) reach, resolved lexically from each link's directory, and
// the path of the worst link. A stored tree (not in ov) is checked on the
// way as a new one is (decodeCanonicalTree, checkTreeEntries): an error
// anywhere in the closure is returned. Results of trees already stored
// are cached (trees are immutable), so the cache holds valid trees only.
func (n *Network) ascent(ov *overlay, h plumbing.Hash, depth int) (int, string, error) {
	if depth > 1000 {
		return 0, "", invalidObject(h, "trees nested too deeply")
	}
	if a, ok := ov.ascent[h]; ok {
		return a.up, a.where, nil
	}
	if _, inPack := ov.objs[h]; !inPack {
		n.ascentMu.Lock()
		a, ok := n.ascentCache[h]
		n.ascentMu.Unlock()
		if ok {
			return a.up, a.where, nil
		}
	}
	obj, err := ov.EncodedObject(plumbing.TreeObject, h)
	if err != nil {
		return 0, "", ov.gone(h, h, "tree missing")
	}
	var t *object.Tree
	if _, inPack := ov.objs[h]; !inPack {
		// A stored tree, met for the first time since the network was
		// opened: it gets the entry rules of a new one (it may predate
		// them, or have come through a path that skipped them). Only a
		// tree whose whole closure passed lands in ascentCache.
		if t, err = decodeCanonicalTree(obj); err != nil {
			return 0, "", err
		}
		if err := ov.checkTreeEntries(h, t, false); err != nil {
			return 0, "", err
		}
	} else if q, ok := obj.(*quarantinedObject); ok && (q.data != nil || q.size == 0) {
		t, err = q.decodedTree() // the pack's trees: decoded by loadQuarantine
	} else {
		t = &object.Tree{}
		err = t.Decode(obj)
	}
	if err != nil {
		return 0, "", invalidObject(h, "corrupt tree: %v", err)
	}
	up, where := 0, ""
	for _, e := range t.Entries {
		switch e.Mode {
		case filemode.Dir:
			u, w, err := n.ascent(ov, e.Hash, depth+1)
			if err != nil {
				return 0, "", err
			}
			if u-1 > up {
				up, where = u-1, e.Name+"/"+w
			}
		case filemode.Symlink:
			b, err := ov.EncodedObject(plumbing.BlobObject, e.Hash)
			if err != nil {
				return 0, "", invalidObject(h, "symlink %q: target blob missing", e.Name)
			}
			if u := climb(symlinkTarget(b)); u > up {
				up, where = u, strings.Clone(e.Name) // kept (ascentCache): not a view of the tree's content
			}
		}
	}
	if ov.ascent == nil {
		ov.ascent = map[plumbing.Hash]ascentInfo{}
	}
	ov.ascent[h] = ascentInfo{up, where}
	if _, inPack := ov.objs[h]; !inPack {
		n.ascentMu.Lock()
		if n.ascentCache == nil || len(n.ascentCache) >= ascentCacheMax {
			// Bounded: a long-lived server meets every tree of every
			// version pushed; a full cache starts over (a tree met again
			// is checked again, which is only slower).
			n.ascentCache = map[plumbing.Hash]ascentInfo{}
		}
		n.ascentCache[h] = ascentInfo{up, where}
		n.ascentMu.Unlock()
	}
	return up, where, nil
}

// rememberAscent adds to the network's cache the trees of a received
// pack, now stored, whose closure validateObjects walked and passed
// (every tree of the pack is: each is a root or inside one). A push's ref
// checks (CheckRootTree on every commit's tree, for each of the 1,000s of
// refs of a full-history push) then walk no tree the pack brought again.
func (n *Network) rememberAscent(m map[plumbing.Hash]ascentInfo) {
	if len(m) == 0 {
		return
	}
	n.ascentMu.Lock()
	defer n.ascentMu.Unlock()
	if n.ascentCache == nil || len(n.ascentCache)+len(m) > ascentCacheMax {
		n.ascentCache = map[plumbing.Hash]ascentInfo{} // see ascent
	}
	if len(m) > ascentCacheMax {
		return
	}
	for h, a := range m {
		n.ascentCache[h] = a
	}
}

// ascentCacheMax bounds a network's cache of stored trees whose closure
// passed the tree rules (~100 B an entry: ~13 MB at the bound).
var ascentCacheMax = 1 << 17

type ascentInfo struct {
	up    int
	where string
}

// climb returns how many levels above its own directory a relative
// symlink target reaches at its highest point.
func climb(target string) int {
	level, worst := 0, 0
	for c := range strings.SplitSeq(target, "/") {
		switch c {
		case "", ".":
		case "..":
			level--
			if -level > worst {
				worst = -level
			}
		default:
			level++
		}
	}
	return worst
}

// CheckRootTree refuses (invalid_argument) a tree h that may not be
// checked out as a root: a tree in its closure breaks a rule of
// ReceivePack (names, .gitmodules, .gitattributes, symlink targets), or
// a symlink inside it climbs above it. A ref naming a tree or a commit
// makes the tree a root; every ref move checks it (cached per tree, so a
// tree is walked once per process).
func (n *Network) CheckRootTree(h plumbing.Hash) error {
	ov := &overlay{n: n, objs: map[plumbing.Hash]plumbing.EncodedObject{}}
	up, where, err := n.ascent(ov, h, 0)
	if err != nil {
		return err
	}
	if up > 0 {
		return invalidObject(h, "symlink %q escapes the tree (as a root tree)", where)
	}
	return nil
}
