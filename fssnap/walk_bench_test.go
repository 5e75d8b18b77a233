package fssnap

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"
)

// BenchmarkWalk: the full walk of the benchmark tree (2,000 files in
// ~400 directories) against a take's walk that reuses the previous
// manifest's names of unchanged directories.
func BenchmarkWalk(b *testing.B) {
	dir := filepath.Join(b.TempDir(), "tree")
	os.Mkdir(dir, 0o755)
	for d := 0; d < 400; d++ { // 2,000 files, 5 a directory, 20 directories a level
		sub := filepath.Join(dir, fmt.Sprintf("a%02d", d/20), fmt.Sprintf("b%02d", d%20))
		os.MkdirAll(sub, 0o755)
		for f := 0; f < 5; f++ {
			os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%d.txt", f)), []byte("content"), 0o644)
		}
	}
	time.Sleep(2 * racyWindow)
	prev, err := BuildManifest(dir, nil)
	if err != nil {
		b.Fatal(err)
	}
	time.Sleep(2 * racyWindow)
	b.Run("full", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := walk(dir); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("prev", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := walkPrev(dir, prev); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkManifestCodec: the stored manifest's round trip for 2,400
// entries (2,000 files), binary+zstd against the previous JSON+zstd.
func BenchmarkManifestCodec(b *testing.B) {
	m := &Manifest{Root: "/work/tree", CreatedAt: time.Now()}
	m.Entries = append(m.Entries, Entry{Path: ".", Type: TypeDir, Mode: 0o755})
	for d := 0; d < 400; d++ {
		dp := fmt.Sprintf("a%02d/b%02d", d/20, d%20)
		m.Entries = append(m.Entries, Entry{Path: dp, Type: TypeDir, Mode: 0o755, MtimeNs: 1765000000123456789, CtimeNs: 1765000000123456789, Ino: uint64(1000 + d)})
		for f := 0; f < 5; f++ {
			m.Entries = append(m.Entries, Entry{Path: fmt.Sprintf("%s/f%d.txt", dp, f), Type: TypeFile, Mode: 0o644, Size: 10000,
				Hash: fmt.Sprintf("%064x", d*5+f+1<<200%7), MtimeNs: 1765000000123456789, CtimeNs: 1765000000123456789, Ino: uint64(5000 + d*5 + f)})
		}
	}
	sortEntries(m)
	dir := b.TempDir()
	base := filepath.Join(dir, "x.manifest")
	b.Run("binary-write", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if err := writeManifest(base, m); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("binary-read", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			var got Manifest
			if err := readManifest(base, &got); err != nil {
				b.Fatal(err)
			}
		}
	})
	js := filepath.Join(dir, "y.manifest")
	b.Run("json-write", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			data, _ := json.Marshal(m)
			os.WriteFile(js+manifestZst, zstdEnc().EncodeAll(data, nil), 0o600)
		}
	})
	b.Run("json-read", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			var got Manifest
			if err := readManifestJSON(js, &got); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func sortEntries(m *Manifest) {
	sort.Slice(m.Entries, func(i, j int) bool { return m.Entries[i].Path < m.Entries[j].Path })
}
