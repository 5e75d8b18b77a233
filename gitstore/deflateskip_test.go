package gitstore

import (
	"bufio"
	"bytes"
	stdzlib "compress/zlib"
	"crypto/sha1"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"reflect"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/klauspost/compress/zlib"

	"github.com/lockstep-hq/lockstep"
)

// inflateEnd inflates the zlib stream at the start of data with
// klauspost's inflater, as prescan reads a delta (a *bufio.Reader), and
// returns how many bytes it inflates to and where the stream ends.
// (head: its first headMax bytes)
func inflateEnd(data []byte) (int64, int, error) {
	n, end, _, err := inflateHead(data)
	return n, end, err
}

func inflateHead(data []byte) (int64, int, []byte, error) {
	r := bytes.NewReader(data)
	br := bufio.NewReaderSize(r, 1<<16)
	zr, err := zlib.NewReader(br)
	if err != nil {
		return 0, 0, nil, err
	}
	var head bytes.Buffer
	n, err := io.Copy(&headWriter{b: &head}, zr)
	return n, len(data) - r.Len() - br.Buffered(), head.Bytes(), err
}

type headWriter struct{ b *bytes.Buffer }

func (w *headWriter) Write(p []byte) (int, error) {
	if k := headMax - w.b.Len(); k > 0 {
		w.b.Write(p[:min(k, len(p))])
	}
	return len(p), nil
}

func skipEnd(data []byte, limit int64) (int64, int, error) {
	n, end, _, err := skipHead(data, limit)
	return n, end, err
}

func skipHead(data []byte, limit int64) (int64, int, []byte, error) {
	r := bytes.NewReader(data)
	br := bufio.NewReaderSize(r, 1<<16)
	var s skipper
	err := skipZlib(br, limit, &s)
	return s.out, len(data) - r.Len() - br.Buffered(), bytes.Clone(s.Head()), err
}

// zlibStreams are streams of every deflate block type (stored, fixed and
// dynamic Huffman, Huffman only) from two encoders, of small and large,
// repetitive and random contents.
func zlibStreams(t testing.TB) [][]byte {
	rng := rand.New(rand.NewSource(7))
	var contents [][]byte
	contents = append(contents, nil, []byte("x"), []byte("hello\n"), []byte("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"), []byte("abcabcabcabcXabcabcabcabcabcabcabcabcabcabcabcabc"))
	text := []byte(strings.Repeat("package gitstore // a line of text\n", 3000))
	contents = append(contents, text, text[:1000])
	random := make([]byte, 100<<10)
	rng.Read(random)
	contents = append(contents, random, random[:70000], random[:300])
	mixed := make([]byte, 0, 200<<10)
	for len(mixed) < 200<<10 {
		if rng.Intn(2) == 0 {
			mixed = append(mixed, random[:rng.Intn(5000)]...)
		} else {
			mixed = append(mixed, text[:rng.Intn(9000)]...)
		}
	}
	contents = append(contents, mixed)
	var out [][]byte
	for _, c := range contents {
		for _, level := range []int{-2, 0, 1, 5, 9} {
			var b bytes.Buffer
			w, err := zlib.NewWriterLevel(&b, level)
			if err != nil {
				t.Fatal(err)
			}
			w.Write(c)
			w.Close()
			out = append(out, b.Bytes())
			b = bytes.Buffer{}
			sw, err := stdzlib.NewWriterLevel(&b, level)
			if err != nil {
				t.Fatal(err)
			}
			// Written in pieces: flushes make stored and empty blocks.
			for k := 0; k < len(c); k += 7000 {
				sw.Write(c[k:min(k+7000, len(c))])
				sw.Flush()
			}
			sw.Close()
			out = append(out, b.Bytes())
		}
	}
	return out
}

// TestSkipZlibMatchesInflate: skipZlib ends every stream where the
// inflater ends it and counts what it inflates to; on thousands of
// corruptions, whenever the inflater accepts the stream, skipZlib accepts
// it too, ends at the same byte and counts the same size. (The other way
// round is allowed: skipZlib does not check the Adler-32 or anything
// else that needs the inflated bytes; index-pack refuses those.)
func TestSkipZlibMatchesInflate(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	junk := []byte("PACK junk after the stream")
	compare := func(stream []byte, clean bool) {
		t.Helper()
		data := append(bytes.Clone(stream), junk...)
		wn, wend, whead, werr := inflateHead(data)
		gn, gend, ghead, gerr := skipHead(data, 1<<40)
		if clean && werr != nil {
			t.Fatalf("inflate of a clean stream: %v", werr)
		}
		if werr == nil && (gerr != nil || gn != wn || gend != wend || !bytes.Equal(ghead, whead)) {
			t.Fatalf("stream %x: inflate: %d bytes, ends at %d, starts %x; skip: %d bytes, ends at %d, starts %x, %v", stream, wn, wend, whead, gn, gend, ghead, gerr)
		}
	}
	streams := zlibStreams(t)
	for _, s := range streams {
		compare(s, true)
		wn, _, _ := inflateEnd(s)
		// The declared size is the limit: at it, accepted; one byte
		// short, refused as the bounded inflate refuses it.
		if _, _, err := skipEnd(s, wn); err != nil {
			t.Fatalf("at its size: %v", err)
		}
		if wn > 0 {
			if _, _, err := skipEnd(s, wn-1); !errors.Is(err, packfile.ErrInflatedSizeMismatch) {
				t.Fatalf("inflates to %d, limit %d: %v", wn, wn-1, err)
			}
		}
		for i := 0; i < 100; i++ {
			p := bytes.Clone(s)
			if len(p) == 0 {
				continue
			}
			switch i % 3 {
			case 0:
				p[rng.Intn(len(p))] ^= byte(1 + rng.Intn(255))
			case 1:
				p = p[:rng.Intn(len(p))]
			default:
				for k := 0; k < 3; k++ {
					p[rng.Intn(len(p))] = byte(rng.Intn(256))
				}
			}
			compare(p, false)
		}
	}
	// A corrupt header and a preset dictionary are refused.
	for _, bad := range [][]byte{{0x78, 0x9d, 3, 0}, {0x79, 0x9c, 3, 0}, {0x78, 0xbb, 0, 0, 0, 1, 3, 0}} {
		if _, _, err := skipEnd(bad, 1<<20); err == nil {
			t.Fatalf("%x: accepted", bad)
		}
	}
}

// FuzzSkipZlib: wherever the inflater accepts a stream, skipZlib agrees
// on its end and size.
func FuzzSkipZlib(f *testing.F) {
	for _, s := range zlibStreams(f) {
		if len(s) < 4096 {
			f.Add(s)
		}
	}
	f.Fuzz(func(t *testing.T, stream []byte) {
		data := append(bytes.Clone(stream), 1, 2, 3)
		wn, wend, whead, werr := inflateHead(data)
		gn, gend, ghead, gerr := skipHead(data, 1<<40)
		if werr == nil && (gerr != nil || gn != wn || gend != wend || !bytes.Equal(ghead, whead)) {
			t.Fatalf("inflate: %d bytes, ends at %d, starts %x; skip: %d bytes, ends at %d, starts %x, %v", wn, wend, whead, gn, gend, ghead, gerr)
		}
	})
}

func BenchmarkSkipZlib(b *testing.B) {
	streams := zlibStreams(b)
	var all []byte
	for _, s := range streams {
		all = append(all, s...)
	}
	b.Run("skip", func(b *testing.B) {
		b.SetBytes(int64(len(all)))
		var s skipper
		for i := 0; i < b.N; i++ {
			br := bufio.NewReaderSize(bytes.NewReader(all), 1<<16)
			for range streams {
				if err := skipZlib(br, 1<<40, &s); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("inflate", func(b *testing.B) {
		b.SetBytes(int64(len(all)))
		for i := 0; i < b.N; i++ {
			br := bufio.NewReaderSize(bytes.NewReader(all), 1<<16)
			var zr io.ReadCloser
			for range streams {
				var err error
				if zr == nil {
					zr, err = zlib.NewReader(br)
				} else {
					err = zr.(zlib.Resetter).Reset(br, nil)
				}
				if err != nil {
					b.Fatal(err)
				}
				if _, err := io.Copy(io.Discard, zr); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}

// onePack is a pack of one blob whose header declares declared bytes and
// whose zlib stream is stream, with a right trailer.
func onePack(declared int, stream []byte) []byte {
	p := []byte("PACK\x00\x00\x00\x02\x00\x00\x00\x01")
	c := byte(3<<4) | byte(declared&0x0f)
	rest := declared >> 4
	for rest > 0 {
		p = append(p, c|0x80)
		c, rest = byte(rest&0x7f), rest>>7
	}
	p = append(append(p, c), stream...)
	sum := sha1.Sum(p)
	return append(p, sum[:]...)
}

func zlibOf(b []byte) []byte {
	var z bytes.Buffer
	w := zlib.NewWriter(&z)
	w.Write(b)
	w.Close()
	return z.Bytes()
}

// TestReceivePackNonDeltaSizes: prescan no longer inflates objects that
// are not deltas (skipZlib); what the inflate checked still refuses the
// pack, before anything is stored: a stream that inflates past the
// declared size (prescan, at once), short of it, or with a wrong
// checksum (git index-pack, which holds every object to its declared
// size and checksum), and the declared sizes count toward the total.
func TestReceivePackNonDeltaSizes(t *testing.T) {
	n := MustOpen(t)
	content := []byte(strings.Repeat("lockstep\n", 100)) // 900 bytes
	good := zlibOf(content)
	badSum := bytes.Clone(good)
	badSum[len(badSum)-1] ^= 1
	for _, tc := range []struct {
		name     string
		pack     []byte
		lim      Limits
		code     string
		contains string
	}{
		{"past its declared size", onePack(899, good), Limits{}, lockstep.EINVALID, "exceeds declared size"},
		{"short of its declared size", onePack(901, good), Limits{}, lockstep.EINVALID, "corrupt packfile"},
		{"a wrong checksum", onePack(900, badSum), Limits{}, lockstep.EINVALID, "corrupt packfile"},
		{"a declared size over the file limit", onePack(900, good), Limits{MaxFileBytes: 899}, lockstep.ETOOLARGE, "is 900 bytes, over the 899-byte limit (--max-file-bytes)"},
		{"the total", onePack(900, good), Limits{MaxUploadBytes: 890}, lockstep.ETOOLARGE, "inflates to more than 890 bytes"},
	} {
		_, err := n.ReceivePack(bytes.NewReader(tc.pack), tc.lim)
		if lockstep.ErrorCode(err) != tc.code || !strings.Contains(lockstep.ErrorMessage(err), tc.contains) {
			t.Errorf("%s: %v, want %s %q", tc.name, err, tc.code, tc.contains)
		}
	}
	if files := storeFiles(t, n); len(files) != 0 {
		t.Fatalf("stored %v", files)
	}
	if _, err := n.ReceivePack(bytes.NewReader(onePack(900, good)), Limits{}); err != nil {
		t.Fatalf("the right pack: %v", err)
	}
}

// TestDecodeTreeMatchesGoGit: decodeTree gives go-git's Tree.Decode's
// entries, or its error, on real trees and thousands of corruptions of
// them (bytes changed, cut short, non-canonical modes).
func TestDecodeTreeMatchesGoGit(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	var raws [][]byte
	for k := 0; k < 20; k++ {
		var b []byte
		for i := 0; i < 1+rng.Intn(8); i++ {
			mode := []string{"100644", "100755", "40000", "120000", "160000", "100664", "040000", "644"}[rng.Intn(8)]
			b = append(b, mode+" "...)
			b = append(b, fmt.Sprintf("name-%d", i)...)
			b = append(b, 0)
			h := make([]byte, 20)
			rng.Read(h)
			b = append(b, h...)
		}
		raws = append(raws, b)
	}
	raws = append(raws, nil, []byte(" "), []byte("100644 \x00"), []byte("100644 a"))
	// Modes at and past 32 bits, signs, hex: filemode.New's edges.
	for _, mode := range []string{"37777777777", "40000000000", "77777777777777777777777", "+644", "-644", "0x1ff", "0o644", "1_0", "0"} {
		raws = append(raws, append([]byte(mode+" a\x00"), make([]byte, 20)...))
	}
	check := func(raw []byte) {
		t.Helper()
		o := &plumbing.MemoryObject{}
		o.SetType(plumbing.TreeObject)
		o.Write(raw)
		want := &object.Tree{}
		werr := want.Decode(o)
		got, gerr := decodeTree(o.Hash(), raw)
		if (werr == nil) != (gerr == nil) || werr != nil && werr.Error() != gerr.Error() {
			t.Fatalf("tree %q: go-git %v, decodeTree %v", raw, werr, gerr)
		}
		if werr == nil && (got.Hash != want.Hash || len(got.Entries) != len(want.Entries) || len(got.Entries) > 0 && !reflect.DeepEqual(got.Entries, want.Entries)) {
			t.Fatalf("tree %q: go-git %+v, decodeTree %+v", raw, want.Entries, got.Entries)
		}
	}
	for _, raw := range raws {
		check(raw)
		for i := 0; i < 200 && len(raw) > 0; i++ {
			p := bytes.Clone(raw)
			switch i % 3 {
			case 0:
				p[rng.Intn(len(p))] = []byte{0, ' ', '0', '7', '8', 'x', 0xff}[rng.Intn(7)]
			case 1:
				p = p[:rng.Intn(len(p))]
			default:
				p[rng.Intn(len(p))] = byte(rng.Intn(256))
			}
			check(p)
		}
	}
}

// TestDecodeTreeAllocs: decoding a received tree allocates the tree and
// its entries, not a string per name and per mode (2 per entry before).
func TestDecodeTreeAllocs(t *testing.T) {
	var raw []byte
	for i := range 100 {
		raw = append(raw, fmt.Sprintf("100644 file-%03d\x00", i)...)
		raw = append(raw, make([]byte, 20)...)
	}
	var tr *object.Tree
	n := testing.AllocsPerRun(50, func() {
		var err error
		if tr, err = decodeTree(plumbing.ZeroHash, raw); err != nil {
			t.Fatal(err)
		}
	})
	if len(tr.Entries) != 100 || tr.Entries[42].Name != "file-042" || tr.Entries[42].Mode != filemode.Regular {
		t.Fatalf("decoded %+v", tr.Entries[42])
	}
	if n > 2 {
		t.Errorf("decodeTree of 100 entries: %v allocations, want at most 2", n)
	}
}
