package fssnap

import (
	"fmt"
	"os"
	"path/filepath"
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
