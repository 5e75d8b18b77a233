package web

import (
	"context"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
)

// Responses: a client must keep reading. http.Server's WriteTimeout would
// bound the whole response, cutting off a large clone on a normal link;
// instead, as for request bodies (limits.go), every write of a response
// gets a connection write deadline from a budget: WriteTimeout, plus the
// time WriteMinRate allows for the bytes sent so far, minus the time
// already spent waiting for the client. Only time spent blocked in a write
// counts (what the handler computes between writes is not the client's).
// A client below the rate, or one that stops reading, is disconnected
// once the budget is gone; the request's context is then cancelled, so a
// `git upload-pack` serving it is killed (git.go).

// Defaults of Config's response settings.
const (
	DefaultWriteTimeout = 30 * time.Second
	DefaultWriteMinRate = 4096 // bytes per second
)

// writeLimits is the middleware.
func (s *Server) writeLimits(c *gin.Context) {
	timeout, rate := s.Config.WriteTimeout, s.Config.WriteMinRate
	if timeout < 0 {
		c.Next()
		return
	}
	if timeout == 0 {
		timeout = DefaultWriteTimeout
	}
	if rate <= 0 {
		rate = DefaultWriteMinRate
	}
	rc := http.NewResponseController(c.Writer)
	if err := rc.SetWriteDeadline(time.Time{}); err != nil {
		c.Next() // not a net.Conn underneath (tests' recorders)
		return
	}
	ctx, cancel := context.WithCancel(c.Request.Context())
	defer cancel()
	c.Request = c.Request.WithContext(ctx)
	w := &rateWriter{ResponseWriter: c.Writer, rc: rc, timeout: timeout, rate: rate, cancel: cancel}
	c.Writer = w
	c.Next()
	// What is still buffered is sent after the handler returns: bound
	// that too.
	if w.err == nil {
		_ = rc.SetWriteDeadline(time.Now().Add(w.budget()))
	}
}

// rateWriter enforces the budget on each write and flush.
type rateWriter struct {
	gin.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	rate    int64
	sent    int64
	waited  time.Duration
	cancel  context.CancelFunc
	err     error
}

func (w *rateWriter) budget() time.Duration {
	b := w.timeout + time.Duration(float64(w.sent)/float64(w.rate)*float64(time.Second)) - w.waited
	return min(b, w.timeout)
}

func (w *rateWriter) begin() (time.Time, error) {
	if w.err != nil {
		return time.Time{}, w.err
	}
	b := w.budget()
	if b <= 0 {
		w.fail(http.ErrHandlerTimeout)
		return time.Time{}, w.err
	}
	now := time.Now()
	_ = w.rc.SetWriteDeadline(now.Add(b))
	return now, nil
}

func (w *rateWriter) end(start time.Time, n int, err error) {
	w.waited += time.Since(start)
	w.sent += int64(n)
	_ = w.rc.SetWriteDeadline(time.Time{})
	if err != nil {
		w.fail(err)
	}
}

// fail ends the response: the connection is unusable, and whatever
// serves the request (a git subprocess) is stopped.
func (w *rateWriter) fail(err error) {
	if w.err == nil {
		w.err = err
		w.cancel()
	}
}

func (w *rateWriter) Write(p []byte) (int, error) {
	start, err := w.begin()
	if err != nil {
		return 0, err
	}
	n, err := w.ResponseWriter.Write(p)
	w.end(start, n, err)
	return n, err
}

func (w *rateWriter) WriteString(s string) (int, error) {
	start, err := w.begin()
	if err != nil {
		return 0, err
	}
	n, err := w.ResponseWriter.WriteString(s)
	w.end(start, n, err)
	return n, err
}

func (w *rateWriter) Flush() {
	start, err := w.begin()
	if err != nil {
		return
	}
	err = w.rc.Flush()
	w.end(start, 0, err)
}

// Unwrap lets http.ResponseController reach the connection.
func (w *rateWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
