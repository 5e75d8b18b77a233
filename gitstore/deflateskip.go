package gitstore

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"

	"github.com/go-git/go-git/v5/plumbing/format/packfile"
)

// skipZlib reads one zlib stream from br and leaves br just past it (its
// Adler-32 checksum), without inflating it: it decodes the deflate
// blocks' Huffman symbols and counts the bytes they stand for (literals,
// copy lengths, stored blocks), keeping only the first headMax of them
// (Head: a delta's header), but writes no window and computes no
// checksum. prescan uses it for every object of a received pack: git
// index-pack inflates every object itself and refuses one whose stream
// does not inflate to exactly its declared size or whose checksum is
// wrong (builtin/index-pack.c, unpack_entry_data: "inflate returned
// %d"), before it resolves any delta. What prescan needs of an object is
// where its stream ends, that it does not inflate past limit (the
// declared size: packfile.ErrInflatedSizeMismatch as soon as it does),
// and for a delta its first bytes. A stream that is not valid deflate
// (bad block type, incomplete or over-subscribed code, a copy from
// before the stream's start, …) is a "flate: corrupt input" error, as
// the inflater reports it; a short one io.ErrUnexpectedEOF.
//
// Skipping costs the Huffman decoding only: about half the CPU of
// inflating. TestSkipZlibMatchesInflate checks it against klauspost's
// inflater on streams of every block type and thousands of corruptions
// (FuzzSkipZlib beyond): whenever the inflater accepts a stream,
// skipZlib ends where it ends, counts what it inflates to and keeps the
// same first bytes.
func skipZlib(br *bufio.Reader, limit int64, s *skipper) error {
	hdr := s.scratch[:2] // not a local array: io.ReadFull would move it to the heap
	// The header's errors are worded as prescan words the inflater's.
	if _, err := io.ReadFull(br, hdr); err != nil {
		return fmt.Errorf("zlib reset error: %s", noEOF(err))
	}
	h := uint(hdr[0])<<8 | uint(hdr[1])
	if hdr[0]&0x0f != 8 || hdr[0]>>4 > 7 || h%31 != 0 {
		return fmt.Errorf("zlib reset error: %s", errZlibHeader)
	}
	if hdr[1]&0x20 != 0 {
		// No preset dictionary is given (as zlib.NewReader(r)).
		return fmt.Errorf("zlib reset error: %s", errZlibDictionary)
	}
	s.start(br, limit)
	if err := s.deflate(); err != nil {
		return err
	}
	if err := s.done(); err != nil {
		return err
	}
	if _, err := io.ReadFull(br, s.scratch[:4]); err != nil { // the Adler-32
		return noEOF(err)
	}
	return nil
}

var (
	errZlibHeader     = errors.New("zlib: invalid header")
	errZlibDictionary = errors.New("zlib: invalid dictionary")
)

// corruptInput is the error of the inflaters for invalid deflate data.
type corruptInput int64

func (e corruptInput) Error() string {
	return fmt.Sprintf("flate: corrupt input before offset %d", int64(e))
}

func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// The Huffman decoder is compress/flate's (Go's inflate.go): a 9-bit
// table of chunks, links for longer codes; a code whose longest code is
// shorter uses only the first 1<<max chunks (mask), as most distance and
// every code-length code do: a block's tables cost what its codes need
// to fill, not 512 chunks each (most objects of a pack are a single
// small dynamic block, so the tables were a quarter of skipping).
const (
	skipMaxCodeLen   = 16
	skipMaxNumLit    = 286
	skipMaxNumDist   = 30
	skipNumCodes     = 19
	skipChunkBits    = 9
	skipNumChunks    = 1 << skipChunkBits
	skipCountMask    = 15
	skipValueShift   = 4
	skipEndBlockMark = 256
)

type skipHuffman struct {
	min      int
	mask     uint32 // chunks[:mask+1] is the table
	chunks   [skipNumChunks]uint32
	links    [][]uint32
	linkMask uint32
	spare    [][]uint32 // link tables of an earlier init, reused
}

// init builds h from code lengths; false when they do not make a
// complete prefix code (over- or under-subscribed), as compress/flate.
func (h *skipHuffman) init(lengths []int) bool {
	for _, l := range h.links {
		h.spare = append(h.spare, l)
	}
	h.min, h.links, h.linkMask = 0, h.links[:0], 0
	var count [skipMaxCodeLen]int
	var min, max int
	for _, n := range lengths {
		if n == 0 {
			continue
		}
		if min == 0 || n < min {
			min = n
		}
		if n > max {
			max = n
		}
		count[n]++
	}
	if max == 0 {
		h.mask, h.chunks[0] = 0, 0
		return true // an empty code: any use of it is corrupt (chunk count 0)
	}
	code := 0
	var nextcode [skipMaxCodeLen]int
	for i := min; i <= max; i++ {
		code <<= 1
		nextcode[i] = code
		code += count[i]
	}
	if code != 1<<uint(max) && !(code == 1 && max == 1) {
		return false
	}
	h.mask = uint32(1)<<uint(skipChunkBits) - 1
	if max < skipChunkBits {
		h.mask = uint32(1)<<uint(max) - 1
	}
	if code == 1 {
		clear(h.chunks[:2]) // one 1-bit code: half the table stays empty
	} // else a complete code writes every chunk of the table below
	h.min = min
	if max > skipChunkBits {
		numLinks := 1 << (uint(max) - skipChunkBits)
		h.linkMask = uint32(numLinks - 1)
		link := nextcode[skipChunkBits+1] >> 1
		for j := uint(link); j < skipNumChunks; j++ {
			reverse := int(bits.Reverse16(uint16(j)))
			reverse >>= uint(16 - skipChunkBits)
			off := j - uint(link)
			h.chunks[reverse] = uint32(off<<skipValueShift | (skipChunkBits + 1))
			var l []uint32
			if k := len(h.spare); k > 0 && cap(h.spare[k-1]) >= numLinks {
				l = h.spare[k-1][:numLinks]
				clear(l)
				h.spare = h.spare[:k-1]
			} else {
				l = make([]uint32, numLinks)
			}
			h.links = append(h.links, l)
		}
	}
	for i, n := range lengths {
		if n == 0 {
			continue
		}
		code := nextcode[n]
		nextcode[n]++
		chunk := uint32(i<<skipValueShift | n)
		reverse := int(bits.Reverse16(uint16(code)))
		reverse >>= uint(16 - n)
		if n <= skipChunkBits {
			for off := reverse; off <= int(h.mask); off += 1 << uint(n) {
				h.chunks[off] = chunk
			}
		} else {
			j := reverse & (skipNumChunks - 1)
			value := h.chunks[j] >> skipValueShift
			linktab := h.links[value]
			reverse >>= skipChunkBits
			for off := reverse; off < len(linktab); off += 1 << uint(n-skipChunkBits) {
				linktab[off] = chunk
			}
		}
	}
	return true
}

// skipper is skipZlib's state, reused across the objects of a pack. It
// decodes from r's buffer (buf, from pos on) into a 64-bit bit buffer,
// eight bytes at a time, and gives back to r what it loaded past the
// stream's end (done): r is left just past the stream.
type skipper struct {
	r       *bufio.Reader
	buf     []byte // r's buffered bytes (peeked, not yet discarded)
	pos     int    // buf[:pos] is loaded into b or decoded
	b       uint64
	nb      uint  // bits in b; whole bytes among them are not decoded yet
	roffset int64 // stream bytes loaded before buf (for corruptInput)
	out     int64 // bytes the stream inflates to so far
	limit   int64
	// head is the first headMax inflated bytes (a delta's header: its
	// base and result sizes), kept as they are decoded.
	head [headMax]byte

	lit, dist, codes skipHuffman
	fixedLit         *skipHuffman
	lengths          [skipMaxNumLit + skipMaxNumDist]int
	scratch          [4]byte
}

// headMax is how much of the start of a stream skipZlib keeps: a delta's
// two size varints (at most 10 bytes each).
const headMax = 32

// Head returns the first inflated bytes of the stream last skipped (at
// most headMax).
func (s *skipper) Head() []byte { return s.head[:min(s.out, headMax)] }

var codeOrder = [...]int{16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15}

func (s *skipper) start(r *bufio.Reader, limit int64) {
	s.r, s.buf, s.pos, s.b, s.nb, s.roffset, s.out, s.limit = r, nil, 0, 0, 0, 2, 0, limit
}

// fill loads whole bytes into b (at least 56 bits then) if eight bytes
// are buffered.
func (s *skipper) fill() {
	if s.pos+8 <= len(s.buf) {
		s.b |= binary.LittleEndian.Uint64(s.buf[s.pos:]) << s.nb
		s.pos += int(63-s.nb) >> 3
		s.nb |= 56
	}
}

// more loads one byte into b, refilling buf from r when it is used up.
func (s *skipper) more() error {
	if s.pos == len(s.buf) {
		// The bytes loaded but not decoded (nb/8) stay in r: they are
		// given back at the stream's end.
		keep := int(s.nb >> 3)
		if _, err := s.r.Discard(s.pos - keep); err != nil {
			return err
		}
		s.roffset += int64(s.pos - keep)
		if _, err := s.r.Peek(keep + 1); err != nil && s.r.Buffered() <= keep {
			return noEOF(err)
		}
		s.buf, _ = s.r.Peek(s.r.Buffered())
		s.pos = keep
	}
	s.b |= uint64(s.buf[s.pos]) << s.nb
	s.pos++
	s.nb += 8
	return nil
}

// done gives back the whole bytes loaded past the current bit, drops
// the rest of the current byte, and discards what was decoded from r.
func (s *skipper) done() error {
	s.pos -= int(s.nb >> 3)
	s.b, s.nb = 0, 0
	_, err := s.r.Discard(s.pos)
	s.roffset += int64(s.pos)
	s.buf, s.pos = nil, 0
	return err
}

func (s *skipper) bits(n uint) (uint64, error) {
	if s.nb < n {
		s.fill()
		for s.nb < n {
			if err := s.more(); err != nil {
				return 0, err
			}
		}
	}
	v := s.b & (1<<n - 1)
	s.b >>= n
	s.nb -= n
	return v, nil
}

func (s *skipper) sym(h *skipHuffman) (int, error) {
	if s.nb < skipMaxCodeLen {
		s.fill()
		if s.nb < skipMaxCodeLen {
			return s.symSlow(h)
		}
	}
	chunk := h.chunks[uint32(s.b)&h.mask]
	n := uint(chunk & skipCountMask)
	if n > skipChunkBits {
		chunk = h.links[chunk>>skipValueShift][(s.b>>skipChunkBits)&uint64(h.linkMask)]
		n = uint(chunk & skipCountMask)
	}
	if n == 0 {
		return 0, corruptInput(s.roffset + int64(s.pos))
	}
	s.b >>= n
	s.nb -= n
	return int(chunk >> skipValueShift), nil
}

// symSlow is sym near the end of the input: a byte at a time, as few as
// the code needs (compress/flate's huffSym).
func (s *skipper) symSlow(h *skipHuffman) (int, error) {
	n := uint(h.min)
	for {
		for s.nb < n {
			if err := s.more(); err != nil {
				return 0, err
			}
		}
		chunk := h.chunks[uint32(s.b)&h.mask]
		n = uint(chunk & skipCountMask)
		if n > skipChunkBits {
			chunk = h.links[chunk>>skipValueShift][(s.b>>skipChunkBits)&uint64(h.linkMask)]
			n = uint(chunk & skipCountMask)
		}
		if n <= s.nb {
			if n == 0 {
				return 0, corruptInput(s.roffset + int64(s.pos))
			}
			s.b >>= n
			s.nb -= n
			return int(chunk >> skipValueShift), nil
		}
	}
}

// add counts n inflated bytes, past the limit an error.
func (s *skipper) add(n int64) error {
	if s.out += n; s.out > s.limit {
		return packfile.ErrInflatedSizeMismatch
	}
	return nil
}

func (s *skipper) deflate() error {
	for {
		hdr, err := s.bits(3)
		if err != nil {
			return err
		}
		final := hdr&1 != 0
		switch hdr >> 1 {
		case 0:
			err = s.stored()
		case 1:
			if s.fixedLit == nil {
				s.fixedLit = &skipHuffman{}
				var l [288]int
				for i := range l {
					switch {
					case i < 144:
						l[i] = 8
					case i < 256:
						l[i] = 9
					case i < 280:
						l[i] = 7
					default:
						l[i] = 8
					}
				}
				s.fixedLit.init(l[:])
			}
			err = s.block(s.fixedLit, nil)
		case 2:
			if err = s.readDynamic(); err == nil {
				err = s.block(&s.lit, &s.dist)
			}
		default:
			return corruptInput(s.roffset)
		}
		if err != nil {
			return err
		}
		if final {
			return nil
		}
	}
}

func (s *skipper) stored() error {
	if err := s.done(); err != nil { // the rest of the current byte is dropped
		return err
	}
	var hdr [4]byte
	if _, err := io.ReadFull(s.r, hdr[:]); err != nil {
		return noEOF(err)
	}
	s.roffset += 4
	n := int(hdr[0]) | int(hdr[1])<<8
	nn := int(hdr[2]) | int(hdr[3])<<8
	if uint16(nn) != uint16(^n) {
		return corruptInput(s.roffset)
	}
	// The inflater reports an overrun once it has copied the bytes
	// within the limit: read them first, as it would.
	k := int64(n)
	if s.out+k > s.limit {
		k = s.limit - s.out
	}
	if s.out < headMax {
		b, _ := s.r.Peek(int(min(k, headMax-s.out))) // short: Discard fails below
		copy(s.head[s.out:], b)
	}
	d, err := s.r.Discard(int(k))
	s.roffset += int64(d)
	if err != nil {
		return noEOF(err)
	}
	if err := s.add(int64(n)); err != nil {
		return err
	}
	d, err = s.r.Discard(n - int(k))
	s.roffset += int64(d)
	return noEOF(err)
}

func (s *skipper) readDynamic() error {
	v, err := s.bits(14)
	if err != nil {
		return err
	}
	nlit := int(v&0x1f) + 257
	ndist := int(v>>5&0x1f) + 1
	nclen := int(v>>10&0xf) + 4
	if nlit > skipMaxNumLit || ndist > skipMaxNumDist {
		return corruptInput(s.roffset)
	}
	var cl [skipNumCodes]int
	for i := 0; i < nclen; i++ {
		x, err := s.bits(3)
		if err != nil {
			return err
		}
		cl[codeOrder[i]] = int(x)
	}
	if !s.codes.init(cl[:]) {
		return corruptInput(s.roffset)
	}
	l := s.lengths[:]
	for i, n := 0, nlit+ndist; i < n; {
		x, err := s.sym(&s.codes)
		if err != nil {
			return err
		}
		if x < 16 {
			l[i] = x
			i++
			continue
		}
		var rep int
		var nb uint
		var b int
		switch x {
		case 16:
			rep, nb = 3, 2
			if i == 0 {
				return corruptInput(s.roffset)
			}
			b = l[i-1]
		case 17:
			rep, nb = 3, 3
		case 18:
			rep, nb = 11, 7
		default:
			return corruptInput(s.roffset)
		}
		e, err := s.bits(nb)
		if err != nil {
			return err
		}
		rep += int(e)
		if i+rep > n {
			return corruptInput(s.roffset)
		}
		for j := 0; j < rep; j++ {
			l[i] = b
			i++
		}
	}
	if !s.lit.init(l[:nlit]) || !s.dist.init(l[nlit:nlit+ndist]) {
		return corruptInput(s.roffset)
	}
	// Every block ends with an end-of-block code; the inflater reads at
	// least its length at a time.
	if s.lit.min < l[skipEndBlockMark] {
		s.lit.min = l[skipEndBlockMark]
	}
	return nil
}

// block skips the symbols of one Huffman block (dist nil: the fixed
// distance code).
func (s *skipper) block(lit, dist *skipHuffman) error {
	for {
		if s.pos+8 <= len(s.buf) {
			done, err := s.blockFast(lit, dist)
			if err != nil || done {
				return err
			}
		}
		// Near the end of the buffered input: one symbol at a time.
		// sym(lit) and add(1) written out: a literal is most symbols of
		// a pack's streams, and neither call is inlined.
		var v int
		if s.nb < skipMaxCodeLen {
			s.fill()
		}
		if s.nb >= skipMaxCodeLen {
			chunk := lit.chunks[uint32(s.b)&lit.mask]
			n := uint(chunk & skipCountMask)
			if n > skipChunkBits {
				chunk = lit.links[chunk>>skipValueShift][(s.b>>skipChunkBits)&uint64(lit.linkMask)]
				n = uint(chunk & skipCountMask)
			}
			if n == 0 {
				return corruptInput(s.roffset + int64(s.pos))
			}
			s.b >>= n
			s.nb -= n
			v = int(chunk >> skipValueShift)
		} else {
			var err error
			if v, err = s.symSlow(lit); err != nil {
				return err
			}
		}
		if v < 256 {
			if s.out < headMax {
				s.head[s.out] = byte(v)
			}
			if s.out++; s.out > s.limit {
				return packfile.ErrInflatedSizeMismatch
			}
			continue
		}
		var err error
		var n uint // extra bits of the length
		var length int
		switch {
		case v == 256:
			return nil
		case v < 265:
			length = v - (257 - 3)
		case v < 269:
			length, n = v*2-(265*2-11), 1
		case v < 273:
			length, n = v*4-(269*4-19), 2
		case v < 277:
			length, n = v*8-(273*8-35), 3
		case v < 281:
			length, n = v*16-(277*16-67), 4
		case v < 285:
			length, n = v*32-(281*32-131), 5
		case v < skipMaxNumLit:
			length = 258
		default:
			return corruptInput(s.roffset)
		}
		if n > 0 {
			e, err := s.bits(n)
			if err != nil {
				return err
			}
			length += int(e)
		}
		var d int
		if dist == nil {
			x, err := s.bits(5)
			if err != nil {
				return err
			}
			d = int(bits.Reverse8(uint8(x << 3)))
		} else if d, err = s.sym(dist); err != nil {
			return err
		}
		switch {
		case d < 4:
			d++
		case d < skipMaxNumDist:
			nb := uint(d-2) >> 1
			extra := (d & 1) << nb
			e, err := s.bits(nb)
			if err != nil {
				return err
			}
			d = 1<<(nb+1) + 1 + (extra | int(e))
		default:
			return corruptInput(s.roffset)
		}
		if int64(d) > s.out { // a copy from before the stream's start
			return corruptInput(s.roffset)
		}
		for k := s.out; k < headMax && k < s.out+int64(length); k++ {
			s.head[k] = s.head[k-int64(d)]
		}
		if err := s.add(int64(length)); err != nil {
			return err
		}
	}
}

// skipLengthCodes is RFC 1951's table of length codes 257..285: base
// length << 3 | extra bits, one load instead of blockFast's comparisons.
var skipLengthCodes = [...]uint16{
	3 << 3, 4 << 3, 5 << 3, 6 << 3, 7 << 3, 8 << 3, 9 << 3, 10 << 3,
	11<<3 | 1, 13<<3 | 1, 15<<3 | 1, 17<<3 | 1,
	19<<3 | 2, 23<<3 | 2, 27<<3 | 2, 31<<3 | 2,
	35<<3 | 3, 43<<3 | 3, 51<<3 | 3, 59<<3 | 3,
	67<<3 | 4, 83<<3 | 4, 99<<3 | 4, 115<<3 | 4,
	131<<3 | 5, 163<<3 | 5, 195<<3 | 5, 227<<3 | 5,
	258 << 3,
}

// skipDistCodes is RFC 1951's table of distance codes 0..29: base
// distance << 4 | extra bits.
var skipDistCodes = [...]uint32{
	1 << 4, 2 << 4, 3 << 4, 4 << 4,
	5<<4 | 1, 7<<4 | 1, 9<<4 | 2, 13<<4 | 2,
	17<<4 | 3, 25<<4 | 3, 33<<4 | 4, 49<<4 | 4,
	65<<4 | 5, 97<<4 | 5, 129<<4 | 6, 193<<4 | 6,
	257<<4 | 7, 385<<4 | 7, 513<<4 | 8, 769<<4 | 8,
	1025<<4 | 9, 1537<<4 | 9, 2049<<4 | 10, 3073<<4 | 10,
	4097<<4 | 11, 6145<<4 | 11, 8193<<4 | 12, 12289<<4 | 12,
	16385<<4 | 13, 24577<<4 | 13,
}

// blockFast is block while at least eight bytes are buffered past pos:
// each symbol starts with 48 bits or more (a refill to 56 when fewer),
// enough for a
// length code, its extra bits, a distance code and its extra bits (48
// at most), so nothing in between checks for input; and the bit buffer,
// the position and the count are locals (registers), written back when
// it returns. Returns done at the end of the block; not done, without
// an error, once fewer than eight bytes are left (block goes on a symbol
// at a time). The same decoding, checks and errors as block's.
func (s *skipper) blockFast(lit, dist *skipHuffman) (done bool, err error) {
	b, nb, pos, out := s.b, s.nb, s.pos, s.out
	buf, limit := s.buf, s.limit
	defer func() { s.b, s.nb, s.pos, s.out = b, nb, pos, out }()
	for pos+8 <= len(buf) {
		if nb < 48 {
			b |= binary.LittleEndian.Uint64(buf[pos:]) << nb
			pos += int(63-nb) >> 3
			nb |= 56
		}

		chunk := lit.chunks[uint32(b)&lit.mask]
		n := uint(chunk & skipCountMask)
		if n > skipChunkBits {
			chunk = lit.links[chunk>>skipValueShift][(b>>skipChunkBits)&uint64(lit.linkMask)]
			n = uint(chunk & skipCountMask)
		}
		if n == 0 {
			return false, corruptInput(s.roffset + int64(pos))
		}
		b >>= n
		nb -= n
		v := int(chunk >> skipValueShift)
		if v < 256 {
			if out < headMax {
				s.head[out] = byte(v)
			}
			if out++; out > limit {
				return false, packfile.ErrInflatedSizeMismatch
			}
			continue
		}
		if v == skipEndBlockMark {
			return true, nil
		}
		if v-257 >= len(skipLengthCodes) { // 286, 287 of the fixed code
			return false, corruptInput(s.roffset)
		}
		lc := skipLengthCodes[v-257]
		n = uint(lc & 7) // extra bits of the length
		length := int(lc>>3) + int(b&(1<<n-1))
		b >>= n
		nb -= n
		var d int
		if dist == nil {
			d = int(bits.Reverse8(uint8(b&31) << 3))
			b >>= 5
			nb -= 5
		} else {
			chunk := dist.chunks[uint32(b)&dist.mask]
			n := uint(chunk & skipCountMask)
			if n > skipChunkBits {
				chunk = dist.links[chunk>>skipValueShift][(b>>skipChunkBits)&uint64(dist.linkMask)]
				n = uint(chunk & skipCountMask)
			}
			if n == 0 {
				return false, corruptInput(s.roffset + int64(pos))
			}
			b >>= n
			nb -= n
			d = int(chunk >> skipValueShift)
		}
		if d >= len(skipDistCodes) { // 30, 31
			return false, corruptInput(s.roffset)
		}
		dc := skipDistCodes[d]
		n = uint(dc & 15) // extra bits of the distance
		d = int(dc>>4) + int(b&(1<<n-1))
		b >>= n
		nb -= n
		if int64(d) > out { // a copy from before the stream's start
			return false, corruptInput(s.roffset)
		}
		for k := out; k < headMax && k < out+int64(length); k++ {
			s.head[k] = s.head[k-int64(d)]
		}
		if out += int64(length); out > limit {
			return false, packfile.ErrInflatedSizeMismatch
		}
	}
	return false, nil
}
