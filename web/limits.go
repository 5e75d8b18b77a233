package web

import (
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/lockstep-hq/lockstep"
)

// Request bodies: a declared length over the route's limit is refused
// before a byte of it is read, and a body must keep arriving.
//
// http.Server's ReadTimeout would bound the whole request, which either
// cuts off a large git push on a normal link or lets a slow client hold a
// connection (and its goroutines) for that long. Instead every Read of a
// body gets a connection read deadline (http.ResponseController) from a
// budget: BodyTimeout, plus the time BodyMinRate allows for the bytes
// received so far, minus the time already spent waiting for the client.
// A push at normal speed earns far more budget than it uses; a client
// below the rate runs out of it a BodyTimeout after it started, and no
// single wait is longer than BodyTimeout. Only time spent waiting in Read
// counts: what the handler does between reads is not the client's.

// Defaults of Config's body settings.
const (
	DefaultBodyTimeout = 30 * time.Second
	DefaultBodyMinRate = 4096 // bytes per second
)

// routeBodyLimit is the route's body limit, by its body kind in
// routeTable (routefacts.go): uploads up to MaxUploadBytes, JSON carrying
// file contents (edits, MCP) up to MaxEditBytes, a staged effect its
// service's request bound, any other route MaxJSONBytes.
func (s *Server) routeBodyLimit(c *gin.Context) int64 {
	switch factsOf(c.Request.Method + " " + c.FullPath()).body {
	case bodyEdit:
		return s.Config.MaxEditBytes
	case bodyUpload:
		if s.Config.MaxUploadBytes > 0 {
			return s.Config.MaxUploadBytes
		}
		return 512 << 20
	case bodyEffect:
		// The effect's own bound (--effect-max-body-bytes, twice, in
		// base64), which the handler decodes with: an effect it takes is
		// not refused here first.
		if s.Effects != nil {
			return max(s.Config.MaxJSONBytes, s.Effects.MaxRequestBytes())
		}
	}
	return s.Config.MaxJSONBytes
}

// bodyLimits is the middleware of both rules.
func (s *Server) bodyLimits(c *gin.Context) {
	if c.Request.Body == nil || c.Request.Body == http.NoBody {
		c.Next()
		return
	}
	rc := http.NewResponseController(c.Writer)
	if max := s.routeBodyLimit(c); c.Request.ContentLength > max {
		// The connection is closed after the answer (the body stays unread).
		c.Header("Connection", "close")
		writeError(c, lockstep.Errorf(lockstep.ETOOLARGE, "declared Content-Length %d is over this route's limit of %d bytes", c.Request.ContentLength, max).
			WithDetails(map[string]any{"limit": max}))
		leaveBodyUnread(c, rc, true)
		return
	}
	timeout, rate := s.Config.BodyTimeout, s.Config.BodyMinRate
	if timeout < 0 {
		tb := &trackedBody{ReadCloser: c.Request.Body}
		c.Request.Body = tb
		c.Next()
		leaveBodyUnread(c, rc, !tb.eof)
		return
	}
	if timeout == 0 {
		timeout = DefaultBodyTimeout
	}
	if rate <= 0 {
		rate = DefaultBodyMinRate
	}
	// A handler that never reads still bounds the wait for its body.
	if err := rc.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		c.Next() // not a net.Conn underneath (tests' recorders)
		return
	}
	rb := &rateBody{ReadCloser: c.Request.Body, rc: rc, timeout: timeout, rate: rate}
	c.Request.Body = rb
	c.Set(slowBodyKey, rb)
	c.Next()
	if leaveBodyUnread(c, rc, !rb.eof) {
		return
	}
	// The server drains up to 256 KiB of an unread body after the
	// handler to reuse the connection: bound that too.
	_ = rc.SetReadDeadline(time.Now().Add(timeout))
}

// leaveBodyUnread keeps net/http from reading what is left of the body
// (unread: not read to its end) of a refusal (any answer >= 400: no key,
// a key that may not, a declared length over the limit, a body cut at
// its limit) or of an answer that closes its connection. The server
// would drain up to 256 KiB of it, to reuse the connection, before it
// sends the answer; a read deadline in the past makes that drain fail at
// once, so the answer leaves now and the connection closes. Reports
// whether it did.
func leaveBodyUnread(c *gin.Context, rc *http.ResponseController, unread bool) bool {
	if !unread || (c.Writer.Status() < 400 && c.Writer.Header().Get("Connection") != "close") {
		return false
	}
	_ = rc.SetReadDeadline(time.Unix(1, 0))
	return true
}

// trackedBody tells whether a body was read to its end.
type trackedBody struct {
	io.ReadCloser
	eof bool
}

func (b *trackedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

const slowBodyKey = "lockstep.body"

// slowBodyError is the error to answer with when the request's body was
// cut off as too slow (the handler then sees a read error or, since the
// server cancels the request's context on a failed read, a canceled
// context), nil otherwise.
func slowBodyError(c *gin.Context) error {
	if v, ok := c.Get(slowBodyKey); ok {
		if rb := v.(*rateBody); rb.err != nil {
			return rb.err
		}
	}
	return nil
}

// rateBody enforces the budget on each Read.
type rateBody struct {
	io.ReadCloser
	rc       *http.ResponseController
	timeout  time.Duration
	rate     int64
	received int64
	waited   time.Duration
	err      error
	eof      bool // read to its end
}

func (b *rateBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	budget := b.timeout + time.Duration(float64(b.received)/float64(b.rate)*float64(time.Second)) - b.waited
	if budget > b.timeout {
		budget = b.timeout
	}
	if budget <= 0 {
		b.err = b.slow()
		return 0, b.err
	}
	start := time.Now()
	_ = b.rc.SetReadDeadline(start.Add(budget))
	n, err := b.ReadCloser.Read(p)
	b.waited += time.Since(start)
	b.received += int64(n)
	// No deadline between reads: the handler's own work is not the
	// client's, and the server's background read after EOF must not
	// time out.
	_ = b.rc.SetReadDeadline(time.Time{})
	if err == io.EOF {
		b.eof = true
	}
	if err != nil && isTimeout(err) {
		b.err = b.slow()
		return n, b.err
	}
	return n, err
}

func (b *rateBody) slow() error {
	return lockstep.Errorf(lockstep.EINVALID, "request body too slow: under %d bytes/s, or silent for %s (--body-min-rate, --body-timeout)", b.rate, b.timeout)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) || strings.Contains(err.Error(), "i/o timeout")
}
