package worktree

import "github.com/go-git/go-git/v5/plumbing"

// FilesRead returns how many files have been opened for their content
// (hashing in Scan, packing in WritePack) since the process started.
func FilesRead() int64 { return readCount.Load() }

// CacheWritten returns the write time the racy-git rule compares against.
func CacheWritten(c *StatCache) int64 { return c.written }

// SetCacheWritten overrides the cache's write time, to stage a racy entry.
func SetCacheWritten(c *StatCache, ns int64) { c.written = ns }

// SetCacheOID overwrites the oid cached for rel, keeping its stat: what the
// cache would hold had the file been rewritten, same size, in the same
// timestamp tick as the cache write.
func SetCacheOID(c *StatCache, rel string, oid plumbing.Hash) bool {
	e, ok := c.entries[rel]
	if !ok {
		return false
	}
	e.oid = oid
	c.entries[rel] = e
	return true
}
