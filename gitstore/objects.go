package gitstore

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/objfile"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/klauspost/compress/zlib"

	"github.com/lockstep-hq/lockstep"
)

// errClosedPack is returned by a pack closed by Reload during a read.
var errClosedPack = errors.New("pack closed")

func (n *Network) loosePath(h plumbing.Hash) string {
	s := h.String()
	return filepath.Join(n.dir, "objects", s[:2], s[2:])
}

// object returns the object h fully read into memory, or
// plumbing.ErrObjectNotFound. The returned object may be shared with the
// cache: callers must not modify it.
func (n *Network) object(h plumbing.Hash) (plumbing.EncodedObject, error) {
	for attempt := 0; ; attempt++ {
		epoch := n.reloads.Load()
		obj, err := n.object1(h)
		if !errors.Is(err, plumbing.ErrObjectNotFound) || attempt == maxMissRetries || !n.retryMiss(epoch) {
			return obj, err
		}
	}
}

// maxMissRetries bounds the looks again after a miss (see retryMiss): a
// Reload that finished during a lookup may itself have run before the
// object's new pack existed, so the next look may need a reload of its
// own.
const maxMissRetries = 3

func (n *Network) object1(h plumbing.Hash) (plumbing.EncodedObject, error) {
	// A pack closed by a concurrent Reload (after a repack) is retried
	// against the new pack list.
	for attempt := 0; attempt < 3; attempt++ {
		p := n.packFor(h)
		if p == nil {
			break
		}
		obj, err := p.get(h)
		if errors.Is(err, errClosedPack) {
			continue
		}
		return obj, err
	}
	if n.beforeLooseRead != nil {
		n.beforeLooseRead(h)
	}
	return n.looseObject(h)
}

func (p *pack) get(h plumbing.Hash) (plumbing.EncodedObject, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errClosedPack
	}
	obj, err := p.pf.Get(h)
	if err != nil {
		return nil, fmt.Errorf("read %s from pack %s: %w", h, p.hash, err)
	}
	return obj, nil
}

func (p *pack) size(h plumbing.Hash) (int64, error) {
	off, err := p.idx.FindOffset(h)
	if err != nil {
		return 0, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return 0, errClosedPack
	}
	return p.pf.GetSizeByOffset(off)
}

func (n *Network) looseObject(h plumbing.Hash) (plumbing.EncodedObject, error) {
	if obj, ok := n.cache.Get(h); ok {
		return obj, nil
	}
	b, err := os.ReadFile(n.loosePath(h))
	if err != nil {
		if os.IsNotExist(err) {
			return nil, plumbing.ErrObjectNotFound
		}
		return nil, err
	}
	r, err := objfile.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("loose object %s: %w", h, err)
	}
	defer r.Close()
	t, size, err := r.Header()
	if err != nil {
		return nil, fmt.Errorf("loose object %s: %w", h, err)
	}
	obj := &plumbing.MemoryObject{}
	obj.SetType(t)
	obj.SetSize(size)
	if _, err := io.Copy(obj, r); err != nil {
		return nil, fmt.Errorf("loose object %s: %w", h, err)
	}
	if obj.Hash() != h {
		return nil, fmt.Errorf("loose object %s: content hashes to %s", h, obj.Hash())
	}
	n.cache.Put(obj) // immutable: safe to share
	return obj, nil
}

// has reports whether h is stored (in a pack or loose).
func (n *Network) has(h plumbing.Hash) bool {
	epoch := n.reloads.Load()
	if n.has1(h) {
		return true
	}
	if n.reloads.Load() != epoch && n.has1(h) {
		return true // a Reload finished meanwhile: see retryMiss
	}
	// A running Compact may have moved a loose object into a pack not
	// loaded yet. (Outside one, a miss is the common case — new objects —
	// and must stay a map lookup and a stat.)
	return n.compacting.Load() > 0 && n.Reload() == nil && n.has1(h)
}

func (n *Network) has1(h plumbing.Hash) bool {
	if n.packFor(h) != nil {
		return true
	}
	if n.beforeLooseRead != nil {
		n.beforeLooseRead(h)
	}
	_, err := os.Stat(n.loosePath(h))
	return err == nil
}

// objectSize returns the size of object h, or plumbing.ErrObjectNotFound;
// a miss reloads as object does.
func (n *Network) objectSize(h plumbing.Hash) (int64, error) {
	for attempt := 0; ; attempt++ {
		epoch := n.reloads.Load()
		sz, err := n.objectSize1(h)
		if !errors.Is(err, plumbing.ErrObjectNotFound) || attempt == maxMissRetries || !n.retryMiss(epoch) {
			return sz, err
		}
	}
}

func (n *Network) objectSize1(h plumbing.Hash) (int64, error) {
	for attempt := 0; attempt < 3; attempt++ {
		p := n.packFor(h)
		if p == nil {
			break
		}
		sz, err := p.size(h)
		if errors.Is(err, errClosedPack) {
			continue
		}
		return sz, err
	}
	if n.beforeLooseRead != nil {
		n.beforeLooseRead(h)
	}
	f, err := os.Open(n.loosePath(h))
	if err != nil {
		if os.IsNotExist(err) {
			return 0, plumbing.ErrObjectNotFound
		}
		return 0, err
	}
	defer f.Close()
	r, err := objfile.NewReader(f)
	if err != nil {
		return 0, err
	}
	defer r.Close()
	_, sz, err := r.Header()
	return sz, err
}

// typed returns object h if it has type t, or a not_found error naming
// what was wanted.
func (n *Network) typed(t plumbing.ObjectType, h plumbing.Hash) (plumbing.EncodedObject, error) {
	obj, err := n.object(h)
	if err != nil {
		if errors.Is(err, plumbing.ErrObjectNotFound) {
			return nil, lockstep.Errorf(lockstep.ENOTFOUND, "%s %s not found", t, h)
		}
		return nil, err
	}
	if obj.Type() != t {
		return nil, lockstep.Errorf(lockstep.ENOTFOUND, "%s is a %s, not a %s", h, obj.Type(), t)
	}
	return obj, nil
}

// Missing returns the hashes of oids that are not in the store, in input
// order, each once.
func (n *Network) Missing(oids []plumbing.Hash) []plumbing.Hash {
	var out []plumbing.Hash
	seen := make(map[plumbing.Hash]bool, len(oids))
	for _, h := range oids {
		if seen[h] {
			continue
		}
		seen[h] = true
		if !n.has(h) {
			out = append(out, h)
		}
	}
	return out
}

// Has reports whether object h is stored.
func (n *Network) Has(h plumbing.Hash) bool {
	if n.has(h) {
		return true
	}
	return n.opts.OnMiss != nil && n.opts.OnMiss() && n.has1(h)
}

// Objects returns a goroutine-safe storer.EncodedObjectStorer over the
// network's objects, for go-git code such as the merge package.
// EncodedObject returns fully read in-memory objects that callers must not
// modify. SetEncodedObject writes one loose object (fsynced when
// Options.Fsync); to write many objects at once prefer WriteObjects, which
// writes a single pack.
func (n *Network) Objects() storer.EncodedObjectStorer { return objectStorer{n} }

type objectStorer struct{ n *Network }

var _ storer.EncodedObjectStorer = objectStorer{}

func (s objectStorer) NewEncodedObject() plumbing.EncodedObject { return &plumbing.MemoryObject{} }

func (s objectStorer) SetEncodedObject(o plumbing.EncodedObject) (plumbing.Hash, error) {
	if o.Type() == plumbing.OFSDeltaObject || o.Type() == plumbing.REFDeltaObject {
		return plumbing.ZeroHash, plumbing.ErrInvalidType
	}
	h := o.Hash()
	if _, err := s.n.writeLoose(o); err != nil {
		return plumbing.ZeroHash, err
	}
	return h, nil
}

func (s objectStorer) EncodedObject(t plumbing.ObjectType, h plumbing.Hash) (plumbing.EncodedObject, error) {
	obj, err := s.n.object(h)
	if err != nil {
		return nil, err
	}
	if t != plumbing.AnyObject && obj.Type() != t {
		return nil, plumbing.ErrObjectNotFound
	}
	return obj, nil
}

func (s objectStorer) IterEncodedObjects(t plumbing.ObjectType) (storer.EncodedObjectIter, error) {
	hashes, err := s.n.allHashes()
	if err != nil {
		return nil, err
	}
	return storer.NewEncodedObjectLookupIter(s, t, hashes), nil
}

func (s objectStorer) HasEncodedObject(h plumbing.Hash) error {
	if s.n.has(h) {
		return nil
	}
	return plumbing.ErrObjectNotFound
}

func (s objectStorer) EncodedObjectSize(h plumbing.Hash) (int64, error) {
	return s.n.objectSize(h)
}

func (s objectStorer) AddAlternate(string) error {
	return errors.New("repo: alternates are not supported; a network shares one object store")
}

// allHashes lists every stored object once.
func (n *Network) allHashes() ([]plumbing.Hash, error) {
	seen := map[plumbing.Hash]bool{}
	var out []plumbing.Hash
	for _, p := range n.snapshot() {
		it, err := p.idx.Entries()
		if err != nil {
			return nil, err
		}
		for {
			e, err := it.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				it.Close()
				return nil, err
			}
			if !seen[e.Hash] {
				seen[e.Hash] = true
				out = append(out, e.Hash)
			}
		}
		it.Close()
	}
	dirs, err := os.ReadDir(filepath.Join(n.dir, "objects"))
	if err != nil {
		return nil, err
	}
	for _, d := range dirs {
		if len(d.Name()) != 2 || !d.IsDir() {
			continue
		}
		files, err := os.ReadDir(filepath.Join(n.dir, "objects", d.Name()))
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			hex := d.Name() + f.Name()
			if plumbing.IsHash(hex) {
				h := plumbing.NewHash(hex)
				if !seen[h] {
					seen[h] = true
					out = append(out, h)
				}
			}
		}
	}
	return out, nil
}

// streamThreshold is the blob size above which reads stream from disk
// instead of going through the in-memory object (and its cache).
const streamThreshold = 1 << 20

// openBlob returns the size and a reader of blob h. Blobs over
// streamThreshold stored whole (loose, or undeltified in a pack: every
// pack Lockstep writes) are inflated while they are read, never held in
// memory; others come from object. Returns not_found as typed does.
func (n *Network) openBlob(h plumbing.Hash) (int64, io.ReadCloser, error) {
	if obj, ok := n.cache.Get(h); ok && obj.Type() == plumbing.BlobObject {
		r, err := obj.Reader() // cached: small and in memory already
		return obj.Size(), r, err
	}
	if rc, typ, size, ok := n.streamObject(h); ok {
		if typ != plumbing.BlobObject {
			rc.Close()
			return 0, nil, lockstep.Errorf(lockstep.ENOTFOUND, "%s is a %s, not a blob", h, typ)
		}
		return size, rc, nil
	}
	obj, err := n.typed(plumbing.BlobObject, h)
	if err != nil {
		return 0, nil, err
	}
	r, err := obj.Reader()
	if err != nil {
		return 0, nil, err
	}
	return obj.Size(), r, nil
}

// entryHeader reads the type and size of the pack entry at off and the
// length of its header (one pread; the shared file is safe for ReadAt).
func (p *pack) entryHeader(off int64) (typ plumbing.ObjectType, size int64, hdrLen int, ok bool) {
	p.mu.Lock()
	f, closed := p.f, p.closed
	p.mu.Unlock()
	if closed {
		return 0, 0, 0, false
	}
	var hdr [16]byte
	m, _ := f.ReadAt(hdr[:], off)
	if m == 0 {
		return 0, 0, 0, false
	}
	c := hdr[0]
	typ = plumbing.ObjectType((c >> 4) & 7)
	size = int64(c & 0x0f)
	i, shift := 1, uint(4)
	for c&0x80 != 0 {
		if i >= m || shift > 56 {
			return 0, 0, 0, false
		}
		c = hdr[i]
		size |= int64(c&0x7f) << shift
		shift += 7
		i++
	}
	return typ, size, i, true
}

// streamObject opens object h for streaming when it is larger than
// streamThreshold and stored loose or as a whole (non-delta) pack entry;
// ok is false otherwise (the caller reads it through object).
func (n *Network) streamObject(h plumbing.Hash) (rc io.ReadCloser, typ plumbing.ObjectType, size int64, ok bool) {
	if p := n.packFor(h); p != nil {
		off, err := p.idx.FindOffset(h)
		if err != nil {
			return nil, 0, 0, false
		}
		typ, size, hdrLen, ok := p.entryHeader(off)
		if !ok || size <= streamThreshold || typ < plumbing.CommitObject || typ > plumbing.TagObject {
			return nil, 0, 0, false // small, or a delta: resolved in memory by object
		}
		// A file of our own: a concurrent Reload may close the shared
		// one; an unlinked pack stays readable through this descriptor.
		f, err := os.Open(n.packPath(p.hash, "pack"))
		if err != nil {
			return nil, 0, 0, false
		}
		zr, err := zlib.NewReader(bufio.NewReaderSize(io.NewSectionReader(f, off+int64(hdrLen), 1<<62), 1<<16))
		if err != nil {
			f.Close()
			return nil, 0, 0, false
		}
		return &streamReader{r: io.LimitReader(zr, size), closers: []io.Closer{zr, f}}, typ, size, true
	}
	f, err := os.Open(n.loosePath(h))
	if err != nil {
		return nil, 0, 0, false
	}
	or, err := objfile.NewReader(bufio.NewReaderSize(f, 1<<16))
	if err != nil {
		f.Close()
		return nil, 0, 0, false
	}
	typ, size, err = or.Header()
	if err != nil || size <= streamThreshold {
		or.Close()
		f.Close()
		return nil, 0, 0, false
	}
	return &streamReader{r: io.LimitReader(or, size), closers: []io.Closer{or, f}}, typ, size, true
}

// streamReader reads an inflating stream and closes its layers.
type streamReader struct {
	r       io.Reader
	closers []io.Closer
}

func (s *streamReader) Read(p []byte) (int, error) { return s.r.Read(p) }

func (s *streamReader) Close() error {
	var first error
	for _, c := range s.closers {
		if err := c.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}
