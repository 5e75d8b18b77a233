package fssnap

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

func sampleManifest() *Manifest {
	return &Manifest{
		Root:      "/work/dir with space",
		CreatedAt: time.Unix(1765000000, 123456789),
		Entries: []Entry{
			{Path: ".", Type: TypeDir, Mode: 0o755, UID: 1000, GID: 1000, MtimeNs: 5, CtimeNs: 6, Ino: 2},
			{Path: "a", Type: TypeFile, Mode: 0o644, Size: 3, Hash: "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", MtimeNs: 1765000000000000001, CtimeNs: 1765000000000000000, Ino: 1 << 40},
			{Path: "a.old", Type: TypeFile, Mode: 0o4755, Size: 0, Hash: "NOT-HEX-legacy", MtimeNs: -7, CtimeNs: 9},
			{Path: "b", Type: TypeDir, Mode: 0o1777, UID: 1<<32 - 1, GID: 7},
			{Path: "b/dev", Type: TypeOther, Mode: 0o20644, Rdev: 0x0103},
			{Path: "b/link", Type: TypeSymlink, Mode: 0o777, Target: "../a"},
			{Path: "b/ünïcode\nname", Type: TypeFile, Size: 1 << 33, Hash: ""},
		},
	}
}

// TestManifestBinaryRoundTrip: every field of every entry type survives
// the binary form exactly, including hashes that are not lower-case hex.
func TestManifestBinaryRoundTrip(t *testing.T) {
	m := sampleManifest()
	data, err := encodeManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeManifest(data)
	if err != nil {
		t.Fatal(err)
	}
	if !got.CreatedAt.Equal(m.CreatedAt) || got.Root != m.Root {
		t.Fatalf("header %q %v, want %q %v", got.Root, got.CreatedAt, m.Root, m.CreatedAt)
	}
	if !reflect.DeepEqual(got.Entries, m.Entries) {
		t.Fatalf("entries differ:\n got %+v\nwant %+v", got.Entries, m.Entries)
	}
	// A zero creation time stays zero (racy: nothing is trusted).
	m.CreatedAt = time.Time{}
	data, _ = encodeManifest(m)
	if got, err = decodeManifest(data); err != nil || !got.CreatedAt.IsZero() {
		t.Fatalf("zero CreatedAt read back as %v, %v", got.CreatedAt, err)
	}
	// Unsorted entries are refused at encoding.
	m.Entries[1], m.Entries[2] = m.Entries[2], m.Entries[1]
	if _, err := encodeManifest(m); err == nil {
		t.Fatal("unsorted manifest encoded")
	}
}

// TestManifestBinaryCorruption: every single-byte change and every
// truncation of a stored manifest is refused, never read as another tree.
func TestManifestBinaryCorruption(t *testing.T) {
	data, err := encodeManifest(sampleManifest())
	if err != nil {
		t.Fatal(err)
	}
	for i := range data {
		for _, x := range []byte{0x01, 0x80, 0xff} {
			bad := append([]byte(nil), data...)
			bad[i] ^= x
			if _, err := decodeManifest(bad); !errors.Is(err, errCorrupt) {
				t.Fatalf("byte %d ^ %#x: err %v, want corrupt", i, x, err)
			}
		}
	}
	for n := 0; n < len(data); n++ {
		if _, err := decodeManifest(data[:n]); !errors.Is(err, errCorrupt) {
			t.Fatalf("truncated to %d bytes: err %v, want corrupt", n, err)
		}
	}
	if _, err := decodeManifest(append(append([]byte(nil), data...), 0)); !errors.Is(err, errCorrupt) {
		t.Fatalf("trailing byte: err %v, want corrupt", err)
	}
}

// TestManifestStoredCorrupt: a damaged stored manifest is an error that
// names the file (restore refuses; take falls back to copying everything).
func TestManifestStoredCorrupt(t *testing.T) {
	base := filepath.Join(t.TempDir(), "x.manifest")
	if err := writeManifest(base, sampleManifest()); err != nil {
		t.Fatal(err)
	}
	z, err := os.ReadFile(base + manifestBin)
	if err != nil {
		t.Fatal(err)
	}
	var m Manifest
	if err := readManifest(base, &m); err != nil || len(m.Entries) != len(sampleManifest().Entries) {
		t.Fatalf("read back: %d entries, %v", len(m.Entries), err)
	}
	z[len(z)/2] ^= 0x55
	if err := os.WriteFile(base+manifestBin, z, 0o600); err != nil {
		t.Fatal(err)
	}
	err = readManifest(base, &m)
	if !errors.Is(err, errCorrupt) {
		t.Fatalf("damaged file: err %v, want corrupt", err)
	}
}

// TestManifestReadsOldZstdJSON: a manifest of the previous version
// (<id>.manifest.json.zst) is read, and writing replaces it.
func TestManifestReadsOldZstdJSON(t *testing.T) {
	base := filepath.Join(t.TempDir(), "x.manifest")
	want := sampleManifest()
	js, _ := json.Marshal(want)
	if err := os.WriteFile(base+manifestZst, zstdEnc().EncodeAll(js, nil), 0o600); err != nil {
		t.Fatal(err)
	}
	var got Manifest
	if err := readManifest(base, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Entries, want.Entries) {
		t.Fatal("old manifest read differently")
	}
	if err := writeManifest(base, &got); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(base + manifestZst); !os.IsNotExist(err) {
		t.Fatalf("old form left beside the new one: %v", err)
	}
}

// TestManifestFileHashes: the hashes-only read (a drop's collection) finds
// exactly the files' sha256 hashes of the full decode, and refuses damage.
func TestManifestFileHashes(t *testing.T) {
	m := sampleManifest()
	data, err := encodeManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	got := map[[32]byte]bool{}
	if err := fileHashes(data, got); err != nil {
		t.Fatal(err)
	}
	want := map[[32]byte]bool{}
	for _, e := range m.Entries {
		if h, ok := rawHash(e); ok {
			want[h] = true
		}
	}
	if len(want) != 1 || !reflect.DeepEqual(got, want) {
		t.Fatalf("hashes %v, want %v", got, want)
	}
	for n := 0; n < len(data); n++ {
		if err := fileHashes(data[:n], map[[32]byte]bool{}); !errors.Is(err, errCorrupt) {
			t.Fatalf("truncated to %d bytes: %v", n, err)
		}
	}
}
