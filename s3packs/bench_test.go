package s3packs

import (
	"context"
	"path/filepath"
	"strconv"
	"testing"
)

// BenchmarkPack measures PutPack and GetPack of a small (4 KiB) and a
// 10 MB pack against the test S3 server (loopback in scripts/test and
// scripts/bench). Each put uploads under a new network, so the pack is
// really written every time.
func BenchmarkPack(b *testing.B) {
	s, _, _ := mustStore(b)
	ctx := context.Background()
	for _, size := range []struct {
		name string
		n    int
	}{{"4KiB", 4 << 10}, {"10MB", 10 << 20}} {
		h, packPath, idxPath := makePack(b, size.n)
		b.Run("put/"+size.name, func(b *testing.B) {
			b.SetBytes(int64(size.n))
			for i := 0; b.Loop(); i++ {
				if err := s.PutPack(ctx, "bench-put-"+size.name+"-"+strconv.Itoa(i), h, packPath, idxPath); err != nil {
					b.Fatal(err)
				}
			}
		})
		if err := s.PutPack(ctx, "bench-get", h, packPath, idxPath); err != nil {
			b.Fatal(err)
		}
		dst := b.TempDir()
		b.Run("get/"+size.name, func(b *testing.B) {
			b.SetBytes(int64(size.n))
			for b.Loop() {
				if err := s.GetPack(ctx, "bench-get", h, filepath.Join(dst, "p.pack"), filepath.Join(dst, "p.idx")); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
