package gitstore

import (
	"bufio"
	"crypto/sha1"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"os"
	"strconv"
	"sync"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/klauspost/compress/zlib"
)

// spoolThreshold is the file size above which an upload's blob is
// streamed to a spool file (hashed and compressed on the way) instead of
// being held in memory: memory per upload stays bounded whatever the
// file sizes, and small files keep the fast in-memory path.
const spoolThreshold = 1 << 20

// spool is a temporary file holding ready-made pack entries (type and
// size header, zlib stream) of large blobs; writePack copies them into the
// pack. It lives in the network's pack directory (same filesystem; named
// like git's temp packs, which start-up removes after a crash) or in the
// system temp directory.
type spool struct {
	mu  sync.Mutex
	f   *os.File
	w   *bufio.Writer
	off int64
	zw  *zlib.Writer
}

func newSpool(dir string) (*spool, error) {
	f, err := os.CreateTemp(dir, "tmp_pack_spool_")
	if err != nil {
		return nil, fmt.Errorf("create spool: %w", err)
	}
	zw, _ := zlib.NewWriterLevel(io.Discard, packCompression)
	return &spool{f: f, w: bufio.NewWriterSize(f, 1<<16), zw: zw}, nil
}

// close removes the spool file.
func (s *spool) close() {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f != nil {
		s.f.Close()
		os.Remove(s.f.Name())
		s.f = nil
	}
}

// flush makes everything written readable through ReadAt.
func (s *spool) flush() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Flush()
}

// countWriter counts and CRCs what goes to the spool.
type countWriter struct {
	w   io.Writer
	n   int64
	crc hash.Hash32
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	c.crc.Write(p[:n])
	return n, err
}

// add streams exactly size bytes of a blob from r into the spool,
// hashing it on the way. A short read is an error (the caller maps it).
func (s *spool) add(r io.Reader, size int64) (*spooledBlob, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cw := &countWriter{w: s.w, crc: crc32.NewIEEE()}
	// Pack entry header: type and size, little-endian base 128.
	var hdr [16]byte
	n := 0
	sz := size
	b := byte(plumbing.BlobObject)<<4 | byte(sz&0x0f)
	sz >>= 4
	for sz != 0 {
		hdr[n] = b | 0x80
		n++
		b = byte(sz & 0x7f)
		sz >>= 7
	}
	hdr[n] = b
	n++
	if _, err := cw.Write(hdr[:n]); err != nil {
		return nil, err
	}
	sum := sha1.New()
	sum.Write([]byte("blob " + strconv.FormatInt(size, 10) + "\x00"))
	s.zw.Reset(cw)
	copied, err := io.Copy(io.MultiWriter(s.zw, sum), io.LimitReader(r, size))
	if err != nil {
		return nil, err
	}
	if copied != size {
		return nil, io.ErrUnexpectedEOF
	}
	if err := s.zw.Close(); err != nil {
		return nil, err
	}
	sb := &spooledBlob{s: s, size: size, off: s.off, n: cw.n, hdrLen: int64(n), crc: cw.crc.Sum32()}
	copy(sb.hash[:], sum.Sum(nil))
	s.off += cw.n
	return sb, nil
}

// spooledBlob is a blob whose pack entry sits in a spool file.
type spooledBlob struct {
	s      *spool
	hash   plumbing.Hash
	size   int64
	off, n int64 // the pack entry (header + zlib) in the spool file
	hdrLen int64
	crc    uint32
}

var _ plumbing.EncodedObject = (*spooledBlob)(nil)

func (b *spooledBlob) Hash() plumbing.Hash         { return b.hash }
func (b *spooledBlob) Type() plumbing.ObjectType   { return plumbing.BlobObject }
func (b *spooledBlob) SetType(plumbing.ObjectType) {}
func (b *spooledBlob) Size() int64                 { return b.size }
func (b *spooledBlob) SetSize(int64)               {}
func (b *spooledBlob) Writer() (io.WriteCloser, error) {
	return nil, errors.New("spooled blob is read-only")
}

// entry returns a reader of the ready-made pack entry.
func (b *spooledBlob) entry() (io.Reader, error) {
	if err := b.s.flush(); err != nil {
		return nil, err
	}
	b.s.mu.Lock()
	f := b.s.f
	b.s.mu.Unlock()
	if f == nil {
		return nil, errors.New("spool closed")
	}
	return io.NewSectionReader(f, b.off, b.n), nil
}

// Reader inflates the blob's content from the spool.
func (b *spooledBlob) Reader() (io.ReadCloser, error) {
	e, err := b.entry()
	if err != nil {
		return nil, err
	}
	if _, err := io.CopyN(io.Discard, e, b.hdrLen); err != nil {
		return nil, err
	}
	return zlib.NewReader(e)
}
