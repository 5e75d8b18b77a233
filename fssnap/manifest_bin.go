package fssnap

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"hash/crc32"
	"time"

	"github.com/lockstep-hq/lockstep"
)

// The stored manifest format (<id>.manifest.bin, compressed with zstd):
// a binary encoding that decodes without reflection, so that the
// manifest round trip of a take (read the previous one, write the new
// one) follows the tree's entry count at a few hundred nanoseconds an
// entry rather than encoding/json's microseconds.
//
//	"LSMF" version(1)
//	uvarint len(root) root  varint created_at_unix_ns  uvarint n
//	n × entry:
//	  uvarint shared-prefix-with-previous-path  uvarint len(rest) rest
//	  type(1: 0 file, 1 dir, 2 symlink, 3 other)
//	  uvarint mode uid gid  varint size
//	  hash tag(1: 0 none, 1 32-byte sha256, 2 string) [32 bytes | uvarint len bytes]
//	  uvarint len(target) target  uvarint rdev
//	  varint mtime_ns  varint ctime_ns-mtime_ns  uvarint ino
//	crc32c (4 bytes, little endian) of everything before it
//
// Decoding checks every length against the buffer, the entry types, that
// paths are strictly increasing and the checksum: a damaged manifest is
// an error, never a manifest that describes another tree.

const manifestMagic = "LSMF\x01"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

var manifestTypes = [...]EntryType{TypeFile, TypeDir, TypeSymlink, TypeOther}

func typeCode(t EntryType) (byte, bool) {
	for i, x := range manifestTypes {
		if x == t {
			return byte(i), true
		}
	}
	return 0, false
}

// encodeManifest is the binary form of m.
func encodeManifest(m *Manifest) ([]byte, error) {
	b := make([]byte, 0, 64+len(m.Entries)*96)
	b = append(b, manifestMagic...)
	b = binary.AppendUvarint(b, uint64(len(m.Root)))
	b = append(b, m.Root...)
	var created int64
	if !m.CreatedAt.IsZero() {
		created = m.CreatedAt.UnixNano()
	}
	b = binary.AppendVarint(b, created)
	b = binary.AppendUvarint(b, uint64(len(m.Entries)))
	prev := ""
	var raw [32]byte
	for i := range m.Entries {
		e := &m.Entries[i]
		if i > 0 && e.Path <= prev {
			return nil, lockstep.Errorf(lockstep.EINTERNAL, "manifest entries not sorted at %q", e.Path)
		}
		n := 0
		for n < len(prev) && n < len(e.Path) && prev[n] == e.Path[n] {
			n++
		}
		b = binary.AppendUvarint(b, uint64(n))
		b = binary.AppendUvarint(b, uint64(len(e.Path)-n))
		b = append(b, e.Path[n:]...)
		prev = e.Path
		tc, ok := typeCode(e.Type)
		if !ok {
			return nil, lockstep.Errorf(lockstep.EINTERNAL, "manifest entry %q: unknown type %q", e.Path, e.Type)
		}
		b = append(b, tc)
		b = binary.AppendUvarint(b, uint64(e.Mode))
		b = binary.AppendUvarint(b, uint64(e.UID))
		b = binary.AppendUvarint(b, uint64(e.GID))
		b = binary.AppendVarint(b, e.Size)
		switch {
		case e.Hash == "":
			b = append(b, 0)
		case len(e.Hash) == 64 && hexLower(e.Hash):
			hex.Decode(raw[:], []byte(e.Hash))
			b = append(b, 1)
			b = append(b, raw[:]...)
		default:
			b = append(b, 2)
			b = binary.AppendUvarint(b, uint64(len(e.Hash)))
			b = append(b, e.Hash...)
		}
		b = binary.AppendUvarint(b, uint64(len(e.Target)))
		b = append(b, e.Target...)
		b = binary.AppendUvarint(b, e.Rdev)
		b = binary.AppendVarint(b, e.MtimeNs)
		b = binary.AppendVarint(b, e.CtimeNs-e.MtimeNs)
		b = binary.AppendUvarint(b, e.Ino)
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli)), nil
}

// hexLower reports whether s is lower-case hex (so that it survives the
// raw 32-byte form unchanged).
func hexLower(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

var errCorrupt = errors.New("corrupt manifest")

type manifestReader struct {
	b   []byte
	err error
}

func (r *manifestReader) fail() {
	if r.err == nil {
		r.err = errCorrupt
	}
	r.b = nil
}

func (r *manifestReader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *manifestReader) varint() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *manifestReader) bytes(n uint64) []byte {
	if n > uint64(len(r.b)) {
		r.fail()
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *manifestReader) byte1() byte {
	if len(r.b) == 0 {
		r.fail()
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *manifestReader) u32() uint32 {
	v := r.uvarint()
	if v > 1<<32-1 {
		r.fail()
	}
	return uint32(v)
}

// decodeManifest parses the binary form; any damage is an error wrapping
// errCorrupt.
func decodeManifest(data []byte) (*Manifest, error) {
	if len(data) < len(manifestMagic)+4 || string(data[:len(manifestMagic)]) != manifestMagic {
		return nil, errCorrupt
	}
	body, sum := data[:len(data)-4], binary.LittleEndian.Uint32(data[len(data)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return nil, errCorrupt
	}
	r := &manifestReader{b: body[len(manifestMagic):]}
	m := &Manifest{}
	m.Root = string(r.bytes(r.uvarint()))
	if ns := r.varint(); ns != 0 {
		m.CreatedAt = time.Unix(0, ns)
	}
	n := r.uvarint()
	if n > uint64(len(r.b)) { // every entry takes more than a byte
		return nil, errCorrupt
	}
	m.Entries = make([]Entry, n)
	prev := ""
	for i := range m.Entries {
		e := &m.Entries[i]
		shared := r.uvarint()
		if shared > uint64(len(prev)) {
			r.fail()
		}
		rest := r.bytes(r.uvarint())
		if r.err != nil {
			break
		}
		e.Path = prev[:shared] + string(rest)
		if i > 0 && e.Path <= prev {
			r.fail()
			break
		}
		prev = e.Path
		tc := r.byte1()
		if int(tc) >= len(manifestTypes) {
			r.fail()
			break
		}
		e.Type = manifestTypes[tc]
		e.Mode, e.UID, e.GID = r.u32(), r.u32(), r.u32()
		e.Size = r.varint()
		switch r.byte1() {
		case 0:
		case 1:
			e.Hash = hex.EncodeToString(r.bytes(32))
		case 2:
			e.Hash = string(r.bytes(r.uvarint()))
		default:
			r.fail()
		}
		if t := r.bytes(r.uvarint()); len(t) > 0 {
			e.Target = string(t)
		}
		e.Rdev = r.uvarint()
		e.MtimeNs = r.varint()
		e.CtimeNs = e.MtimeNs + r.varint()
		e.Ino = r.uvarint()
		if r.err != nil {
			break
		}
	}
	if r.err == nil && len(r.b) != 0 {
		r.fail()
	}
	if r.err != nil {
		return nil, r.err
	}
	return m, nil
}

// fileHashes adds to set the content hashes of the files of a binary
// manifest, without building its entries (what a drop's collection of
// unnamed objects needs from every remaining snapshot).
func fileHashes(data []byte, set map[[32]byte]bool) error {
	if len(data) < len(manifestMagic)+4 || string(data[:len(manifestMagic)]) != manifestMagic {
		return errCorrupt
	}
	body, sum := data[:len(data)-4], binary.LittleEndian.Uint32(data[len(data)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return errCorrupt
	}
	r := &manifestReader{b: body[len(manifestMagic):]}
	r.bytes(r.uvarint())
	r.varint()
	n := r.uvarint()
	for i := uint64(0); i < n && r.err == nil; i++ {
		r.uvarint()
		r.bytes(r.uvarint())
		tc := r.byte1()
		r.uvarint()
		r.uvarint()
		r.uvarint()
		r.varint()
		switch r.byte1() {
		case 0:
		case 1:
			if h := r.bytes(32); tc == 0 && len(h) == 32 {
				set[[32]byte(h)] = true
			}
		case 2:
			r.bytes(r.uvarint())
		default:
			r.fail()
		}
		r.bytes(r.uvarint())
		r.uvarint()
		r.varint()
		r.varint()
		r.uvarint()
	}
	if r.err == nil && len(r.b) != 0 {
		r.fail()
	}
	return r.err
}
