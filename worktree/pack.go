package worktree

import (
	"bytes"
	"crypto/sha1"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"golang.org/x/sys/unix"

	"github.com/lockstep-hq/lockstep"
)

// PackOptions configures WritePack. The zero value (or nil) is usable.
type PackOptions struct {
	// Progress, if set, is called as the pack is written with the number
	// of objects completely written and the bytes written so far, at most
	// once per ProgressEvery bytes, and once at the end.
	Progress func(objects int, bytes int64)
	// ProgressEvery is the byte interval between Progress calls; 0 means
	// 1 MiB.
	ProgressEvery int64
}

// WritePack writes a version 2 packfile holding exactly the objects oids
// (which must belong to snap, typically Plan's result; duplicates are
// written once) to w, undeltified.
// Blob content is read from disk now; a file whose stat differs from what
// Scan saw, or whose content no longer hashes to its oid, aborts the pack
// with invalid_argument "file changed during push: path" (scan and push
// again). An oid not in snap is invalid_argument too. It returns the
// number of objects and bytes written.
func WritePack(snap *Snapshot, oids []plumbing.Hash, w io.Writer, opts *PackOptions) (objects int, bytes int64, err error) {
	var o PackOptions
	if opts != nil {
		o = *opts
	}
	if o.ProgressEvery <= 0 {
		o.ProgressEvery = 1 << 20
	}
	seen := make(map[plumbing.Hash]bool, len(oids))
	uniq := oids[:0:0]
	for _, h := range oids {
		if !snap.Has(h) {
			return 0, 0, lockstep.Errorf(lockstep.EINVALID, "object %s is not in the snapshot", h)
		}
		if !seen[h] { // a pack must not hold an object twice
			seen[h] = true
			uniq = append(uniq, h)
		}
	}
	oids = uniq
	cw := &countingWriter{w: w, opts: o}
	enc := packfile.NewEncoder(cw, &snapStorer{snap: snap, cw: cw}, false)
	if _, err := enc.Encode(oids, 0); err != nil {
		var le *lockstep.Error
		if errors.As(err, &le) {
			return cw.objects, cw.n, err
		}
		return cw.objects, cw.n, fmt.Errorf("write pack: %w", err)
	}
	if o.Progress != nil {
		o.Progress(cw.objects, cw.n)
	}
	return cw.objects, cw.n, nil
}

// countingWriter counts what reaches w and reports progress.
type countingWriter struct {
	w       io.Writer
	opts    PackOptions
	n       int64
	last    int64
	objects int
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	if c.opts.Progress != nil && c.n-c.last >= c.opts.ProgressEvery {
		c.last = c.n
		c.opts.Progress(c.objects, c.n)
	}
	return n, err
}

// snapStorer lends the snapshot's objects to go-git's pack encoder, which
// only calls EncodedObject when the delta window is 0.
type snapStorer struct {
	snap *Snapshot
	cw   *countingWriter
}

var _ storer.EncodedObjectStorer = (*snapStorer)(nil)

var errReadOnly = errors.New("worktree: snapshot storer is read-only")

func (s *snapStorer) NewEncodedObject() plumbing.EncodedObject { return &plumbing.MemoryObject{} }
func (s *snapStorer) SetEncodedObject(plumbing.EncodedObject) (plumbing.Hash, error) {
	return plumbing.ZeroHash, errReadOnly
}
func (s *snapStorer) IterEncodedObjects(plumbing.ObjectType) (storer.EncodedObjectIter, error) {
	return nil, errReadOnly
}
func (s *snapStorer) AddAlternate(string) error { return errReadOnly }

func (s *snapStorer) HasEncodedObject(h plumbing.Hash) error {
	if s.snap.Has(h) {
		return nil
	}
	return plumbing.ErrObjectNotFound
}

func (s *snapStorer) EncodedObjectSize(h plumbing.Hash) (int64, error) {
	o, err := s.EncodedObject(plumbing.AnyObject, h)
	if err != nil {
		return 0, err
	}
	return o.Size(), nil
}

func (s *snapStorer) EncodedObject(t plumbing.ObjectType, h plumbing.Hash) (plumbing.EncodedObject, error) {
	if tr, ok := s.snap.trees[h]; ok && (t == plumbing.AnyObject || t == plumbing.TreeObject) {
		obj, err := encodeTree(tr.entries)
		if err != nil {
			return nil, err
		}
		return &countedObject{EncodedObject: obj, cw: s.cw}, nil
	}
	if b, ok := s.snap.blobs[h]; ok && (t == plumbing.AnyObject || t == plumbing.BlobObject) {
		return &diskBlob{root: s.snap.dir, b: b, cw: s.cw}, nil
	}
	return nil, plumbing.ErrObjectNotFound
}

// countedObject counts a tree as written once the encoder has read it.
type countedObject struct {
	plumbing.EncodedObject
	cw *countingWriter
}

func (o *countedObject) Reader() (io.ReadCloser, error) {
	r, err := o.EncodedObject.Reader()
	if err != nil {
		return nil, err
	}
	return &doneReader{ReadCloser: r, cw: o.cw}, nil
}

type doneReader struct {
	io.ReadCloser
	cw *countingWriter
}

func (r *doneReader) Close() error {
	r.cw.objects++
	return r.ReadCloser.Close()
}

// diskBlob is a blob whose content is read from the working directory when
// the encoder asks for it.
type diskBlob struct {
	root string
	b    *blobRef
	cw   *countingWriter
}

func (d *diskBlob) Hash() plumbing.Hash             { return d.b.oid }
func (d *diskBlob) Type() plumbing.ObjectType       { return plumbing.BlobObject }
func (d *diskBlob) SetType(plumbing.ObjectType)     {}
func (d *diskBlob) SetSize(int64)                   {}
func (d *diskBlob) Writer() (io.WriteCloser, error) { return nil, errReadOnly }

func (d *diskBlob) Size() int64 {
	if d.b.link {
		return int64(len(d.b.target))
	}
	return d.b.st.size
}

func (d *diskBlob) Reader() (io.ReadCloser, error) {
	if d.b.link {
		// The target was validated and kept by Scan; what we send is what
		// was hashed.
		return &doneReader{ReadCloser: io.NopCloser(bytes.NewReader([]byte(d.b.target))), cw: d.cw}, nil
	}
	readCount.Add(1)
	f, err := os.Open(filepath.Join(d.root, filepath.FromSlash(d.b.rel)))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, changedDuringPush(d.b.rel)
		}
		return nil, fmt.Errorf("write pack: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, fmt.Errorf("write pack: fstat %s: %w", d.b.rel, err)
	}
	if statOf(&st) != d.b.st {
		f.Close()
		return nil, changedDuringPush(d.b.rel)
	}
	h := sha1.New()
	h.Write(objectHeader(plumbing.BlobObject, d.b.st.size))
	return &verifyingReader{f: f, r: io.LimitReader(f, d.b.st.size+1), h: h, b: d.b, cw: d.cw}, nil
}

func changedDuringPush(rel string) error {
	return lockstep.Errorf(lockstep.EINVALID, "file changed during push: %q", rel)
}

// verifyingReader hashes what it passes on and, at the end, fails if the
// file held anything but the content Scan hashed: a same-stat rewrite
// (racy window) or a concurrent writer must not slip a different blob under
// the oid the server was told about.
type verifyingReader struct {
	f  *os.File
	r  io.Reader
	h  hash.Hash
	n  int64
	b  *blobRef
	cw *countingWriter
}

func (v *verifyingReader) Read(p []byte) (int, error) {
	n, err := v.r.Read(p)
	v.h.Write(p[:n])
	v.n += int64(n)
	if v.n > v.b.st.size {
		return n, changedDuringPush(v.b.rel)
	}
	if err == io.EOF {
		var sum plumbing.Hash
		v.h.Sum(sum[:0])
		if v.n != v.b.st.size || sum != v.b.oid {
			return n, changedDuringPush(v.b.rel)
		}
	}
	return n, err
}

func (v *verifyingReader) Close() error {
	v.cw.objects++
	return v.f.Close()
}
