package web

import (
	"context"
	"net/http"
	"sync"

	"github.com/gin-gonic/gin"

	"github.com/lockstep-hq/lockstep"
)

// DefaultMaxConcurrentUploads is the number of uploads (tar worktrees,
// object packs, git pushes) served at once when
// Config.MaxConcurrentUploads is zero.
const DefaultMaxConcurrentUploads = 8

// uploadSlot bounds concurrent uploads: each holds decompression state,
// a spool file and a pack write, so a burst of small requests that expand
// server-side cannot add up without limit. Beyond the bound the answer
// is 503 unavailable with Retry-After, at once (never queued: a queued
// request still holds its connection and body).
func (s *Server) uploadSlot(c *gin.Context) {
	if c.Request.Context().Value(heldSlot{}) != nil {
		// An MCP request that holds a slot calls this route in-process
		// (mcpSlot): its slot covers the call.
		c.Next()
		return
	}
	if k := caller(c); k != nil && k.Role != lockstep.RoleAdmin && s.Config.QuotaUploads > 0 {
		if n, ok := s.keyUploads.take(k.ID, s.Config.QuotaUploads); !ok {
			c.Header("Retry-After", "1")
			writeError(c, lockstep.Errorf(lockstep.ERATELIMITED, "upload quota: key %s has %d uploads in progress, its limit (quota-uploads); retry when one ends", k.Name, n))
			c.Abort()
			return
		}
		defer s.keyUploads.release(k.ID)
	}
	select {
	case s.uploads <- struct{}{}:
		if s.Metrics != nil {
			s.Metrics.Uploads.Inc()
			defer s.Metrics.Uploads.Dec()
		}
		defer func() { <-s.uploads }()
		c.Next()
	default:
		c.Header("Retry-After", "1")
		writeError(c, lockstep.Errorf(lockstep.EUNAVAILABLE, "%d uploads in progress, the server's limit (--max-concurrent-uploads); retry shortly", cap(s.uploads)))
		c.Abort()
	}
}

// heldSlot marks a request context whose MCP request holds an upload slot.
type heldSlot struct{}

// mcpSlot admits a POST /mcp that may carry file contents the way
// uploadSlot admits an upload, before a byte of its body is read: a body
// over --max-json-bytes (or of unknown length) takes an upload slot, and
// the tool calls it carries run the API in-process under that slot. A
// smaller request takes none; its writes take a slot of their own on the
// edits route (a tool error, not a retry, when none is free).
func (s *Server) mcpSlot(c *gin.Context) {
	if c.Request.Method != http.MethodPost || (c.Request.ContentLength >= 0 && c.Request.ContentLength <= s.Config.MaxJSONBytes) {
		c.Next()
		return
	}
	s.uploadSlot(c)
}

// mcpHoldSlot runs after mcpSlot took a slot: the in-process calls see it.
func (s *Server) mcpHoldSlot(c *gin.Context) {
	if c.Request.Method == http.MethodPost && (c.Request.ContentLength < 0 || c.Request.ContentLength > s.Config.MaxJSONBytes) {
		c.Request = c.Request.WithContext(context.WithValue(c.Request.Context(), heldSlot{}, true))
	}
	c.Next()
}

// keyCounts counts what each key has in progress (its uploads), per
// replica.
type keyCounts struct {
	mu sync.Mutex
	m  map[string]int
}

// take counts one more for key unless it has limit already; it returns
// the count before and whether it took one.
func (k *keyCounts) take(key string, limit int) (int, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	n := k.m[key]
	if n >= limit {
		return n, false
	}
	if k.m == nil {
		k.m = map[string]int{}
	}
	k.m[key] = n + 1
	return n, true
}

// release ends one of key's.
func (k *keyCounts) release(key string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.m[key] <= 1 {
		delete(k.m, key)
		return
	}
	k.m[key]--
}

// count is what key has in progress.
func (k *keyCounts) count(key string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.m[key]
}
