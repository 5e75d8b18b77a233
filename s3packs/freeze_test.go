package s3packs

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/internal/testenv"
)

// countingTransport counts the requests sent (issue 21 item 10).
type countingTransport struct {
	rt http.RoundTripper
	n  atomic.Int64
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.rt.RoundTrip(r)
}

// TestFrozenServerFailsFast: issue 21 item 10. A server that accepts
// connections but never answers (SIGSTOP) makes an upload fail as
// unavailable after one try and one retry per object (pack and index):
// not three tries of four timeouts each. The message names neither the
// endpoint's host nor its port.
func TestFrozenServerFailsFast(t *testing.T) {
	own := testenv.StartS3(t)
	own.MakeBucket(t, "frozen")
	t.Cleanup(own.Thaw)
	cfg := configFor(own.S3Server, "frozen", "")
	cfg.Timeout = time.Second
	ct := &countingTransport{}
	s, err := newStore(cfg, func(rt http.RoundTripper) http.RoundTripper { ct.rt = rt; return ct })
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	h, packPath, idxPath := makePack(t, 1000)
	if err := s.PutPack(ctx, "n", h, packPath, idxPath); err != nil {
		t.Fatal(err)
	}

	own.Freeze(t)
	h2, packPath2, idxPath2 := makePack(t, 2000)
	before := ct.n.Load()
	// A hang detector, not a performance bound: the old client took
	// 3 attempts × 4 timeouts per object.
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	err = s.PutPack(ctx, "n", h2, packPath2, idxPath2)
	if ctx.Err() != nil {
		t.Fatalf("upload to a frozen server hung until the test's deadline: %v", err)
	}
	if lockstep.ErrorCode(err) != lockstep.EUNAVAILABLE {
		t.Fatalf("upload to a frozen server: %v (code %s), want unavailable", err, lockstep.ErrorCode(err))
	}
	if sent := ct.n.Load() - before; sent > 2*attempts {
		t.Errorf("upload to a frozen server sent %d requests, want at most %d (pack and index, one retry each)", sent, 2*attempts)
	}
	host, port, _ := strings.Cut(own.Endpoint, ":")
	if msg := lockstep.ErrorMessage(err); strings.Contains(msg, host) || strings.Contains(msg, port) {
		t.Errorf("message names the endpoint %s: %q", own.Endpoint, msg)
	}
}
