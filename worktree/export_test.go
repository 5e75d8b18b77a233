package worktree

import (
	"fmt"

	"github.com/go-git/go-git/v5/plumbing"
)

// FilesRead returns how many files have been opened for their content
// (hashing in Scan, packing in WritePack) since the process started.
func FilesRead() int64 { return readCount.Load() }

// TreesEncoded returns how many trees have been encoded and hashed since
// the process started.
func TreesEncoded() int64 { return treeEncodes.Load() }

// CacheWritten returns the write time the racy-git rule compares against.
func CacheWritten(c *StatCache) int64 { return c.written }

// SetCacheWritten overrides the cache's write time, to stage a racy entry.
func SetCacheWritten(c *StatCache, ns int64) { c.written = ns }

// SetCacheOID overwrites the oid cached for rel, keeping its stat: what the
// cache would hold had the file been rewritten, same size, in the same
// timestamp tick as the cache write.
func SetCacheOID(c *StatCache, rel string, oid plumbing.Hash) bool {
	c.needIndex()
	e, ok := c.get(rel)
	if !ok {
		return false
	}
	e.oid = oid
	c.set(rel, e)
	return true
}

// FillCache adds n synthetic entries shaped like a source tree's
// (dir%d/sub%d/file%d.go), for cache load/save benchmarks.
func FillCache(c *StatCache, n int) {
	for i := range n {
		p := fmt.Sprintf("dir%03d/sub%02d/file%05d.go", i/200, i/20%10, i)
		c.set(p, cacheEntry{
			st:  fileStat{size: int64(i * 37 % 20000), mtime: 1_790_000_000_000_000_000 + int64(i)*1_000_003, ctime: 1_790_000_000_000_000_000 + int64(i)*1_000_003, ino: uint64(1_000_000 + i), dev: 2049, mode: 0o100644},
			oid: plumbing.ComputeHash(plumbing.BlobObject, []byte(p)),
		})
	}
}

// SetWatchTestHook sets the hook the watcher calls before each event.
func SetWatchTestHook(f func()) { watchTestHook = f }

// CacheDirs returns the stat cache's directory table: path → tree oid.
func CacheDirs(c *StatCache) map[string]string {
	m := make(map[string]string, len(c.dirs))
	for i, d := range c.dirs {
		m[d] = c.dirOIDs[i].String()
	}
	return m
}

// CacheFiles returns the stat cache's files: path → blob oid.
func CacheFiles(c *StatCache) map[string]string {
	m := make(map[string]string, len(c.order))
	for i, p := range c.order {
		m[p] = c.vals[i].oid.String()
	}
	return m
}

// DropCacheDirs empties the directory table, as a version 2 cache has it.
func DropCacheDirs(c *StatCache) { c.dirs, c.dirOIDs = nil, nil }
