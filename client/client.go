// Package client is the Go client of the Lockstep HTTP API; the lockstep
// CLI is built on it and uses nothing else to reach the server. It has a
// typed method for every route of the API (web/routes.go; a test walks the
// router and fails on a route without one), sending and decoding the wire
// types of package api, and PushDir, the incremental push of a directory
// (stat cache, missing-object negotiation, one pack, compare-and-swap).
//
// Errors from the server come back as *Error with the contract's code,
// message and details; it unwraps to *lockstep.Error, so callers can also
// switch on lockstep.ErrorCode(err) exactly as the server does. Writes
// carry an Idempotency-Key and are retried (see Client and RetryPolicy).
package client

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/lockstep-hq/lockstep"
)

// Client talks to one Lockstep server with one API key. Every write
// carries an Idempotency-Key (one per logical operation, the same on each
// retry), so a request is retried safely on connection errors, timeouts,
// 502/503/504, 429 and 409 in_progress (see Retry).
type Client struct {
	BaseURL string // e.g. http://127.0.0.1:7070
	Key     string
	HTTP    *http.Client
	// Retry is the retry policy; the zero value means DefaultRetry.
	Retry RetryPolicy
	// NoIdempotencyKeys sends writes without an Idempotency-Key (for
	// comparisons); such writes are then never retried.
	NoIdempotencyKeys bool
	// OnRetry, when set, is told about each retry (the CLI prints it).
	OnRetry func(method, path string, attempt int, delay time.Duration, reason error)
}

// RetryPolicy says how a request is retried: capped exponential backoff
// with jitter, at least as long as the server's Retry-After.
type RetryPolicy struct {
	// MaxAttempts counts the first one; 1 disables retries (default 6).
	MaxAttempts int
	// BaseDelay is the first backoff (default 100 ms); it doubles per
	// retry up to MaxDelay (default 5 s); each delay is jittered to
	// between half and all of it.
	BaseDelay time.Duration
	MaxDelay  time.Duration
	// AttemptTimeout bounds one attempt, answer included (default 0: no
	// bound; a hung attempt is then only ended by the caller's context).
	AttemptTimeout time.Duration
	// MaxRetryAfter caps how long a server's Retry-After is honoured
	// (default 60 s).
	MaxRetryAfter time.Duration
}

// DefaultRetry is the policy of a client whose Retry is zero.
var DefaultRetry = RetryPolicy{MaxAttempts: 6, BaseDelay: 100 * time.Millisecond, MaxDelay: 5 * time.Second, MaxRetryAfter: 60 * time.Second}

func (p RetryPolicy) withDefaults() RetryPolicy {
	d := DefaultRetry
	if p.MaxAttempts > 0 {
		d.MaxAttempts = p.MaxAttempts
	}
	if p.BaseDelay > 0 {
		d.BaseDelay = p.BaseDelay
	}
	if p.MaxDelay > 0 {
		d.MaxDelay = p.MaxDelay
	}
	if p.MaxRetryAfter > 0 {
		d.MaxRetryAfter = p.MaxRetryAfter
	}
	d.AttemptTimeout = p.AttemptTimeout
	return d
}

// backoff is the delay before retry n (1-based): capped exponential, with
// "equal jitter" (between half and all of it).
func (p RetryPolicy) backoff(n int) time.Duration {
	d := p.BaseDelay
	for i := 1; i < n && d < p.MaxDelay; i++ {
		d *= 2
	}
	if d > p.MaxDelay {
		d = p.MaxDelay
	}
	half := d / 2
	return half + time.Duration(mrand.Int64N(int64(half)+1))
}

// New returns a client; baseURL defaults to http://127.0.0.1:7070.
func New(baseURL, key string) *Client {
	if baseURL == "" {
		baseURL = "http://127.0.0.1:7070"
	}
	return &Client{BaseURL: strings.TrimRight(baseURL, "/"), Key: key, HTTP: &http.Client{Timeout: 0}}
}

type idemKeyCtx struct{}

// WithIdempotencyKey makes the writes sent with ctx use key (1-255
// visible ASCII characters) instead of a generated one: one logical
// operation the caller may itself repeat later (after a restart).
func WithIdempotencyKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, idemKeyCtx{}, key)
}

// NewIdempotencyKey returns a random key.
func NewIdempotencyKey() string {
	var b [16]byte
	crand.Read(b[:])
	return "lsc_" + hex.EncodeToString(b[:])
}

// BodyFunc is a request body that can be produced again for a retry (a
// streamed pack is rebuilt instead of buffered). Each call returns a new
// reader of the same bytes; a returned io.Closer is closed after the
// attempt.
type BodyFunc func() (io.Reader, error)

// Replayed reports whether an answer was replayed from an earlier request
// with the same Idempotency-Key (the Idempotent-Replayed header).
func Replayed(resp *http.Response) bool {
	return resp != nil && resp.Header.Get("Idempotent-Replayed") == "true"
}

// retryable is a failure worth another attempt.
type retryable struct {
	err        error
	retryAfter time.Duration
}

func (r *retryable) Error() string { return r.err.Error() }
func (r *retryable) Unwrap() error { return r.err }

// Request sends one request, retried per c.Retry. body may be nil, an
// io.Reader (sent as is with contentType; retried when it is an
// io.Seeker, or when no byte of it was sent yet), a BodyFunc, or a value
// encoded as JSON. out, when non-nil, receives the decoded JSON answer; a
// *[]byte or io.Writer receives the raw body (an io.Writer answer is not
// retried once bytes reached it). Writes (POST, PUT, PATCH, DELETE) carry
// an Idempotency-Key: the context's (WithIdempotencyKey) or a new one per
// call, the same on every attempt.
func (c *Client) Request(ctx context.Context, method, path string, query url.Values, body any, contentType string, out any) (*http.Response, error) {
	var next func() (io.Reader, func(), error) // a body per attempt; nil body for none
	switch b := body.(type) {
	case nil:
	case BodyFunc:
		next = func() (io.Reader, func(), error) {
			r, err := b()
			if err != nil {
				return nil, nil, err
			}
			return r, func() {
				if cl, ok := r.(io.Closer); ok {
					cl.Close()
				}
			}, nil
		}
	case io.Reader:
		if sk, ok := b.(io.Seeker); ok {
			off, err := sk.Seek(0, io.SeekCurrent)
			if err != nil {
				return nil, err
			}
			next = func() (io.Reader, func(), error) {
				if _, err := sk.Seek(off, io.SeekStart); err != nil {
					return nil, nil, err
				}
				return io.NopCloser(b), func() {}, nil
			}
		} else {
			cr := &countingReader{r: b}
			next = func() (io.Reader, func(), error) { return io.NopCloser(cr), func() {}, nil }
			body = cr
		}
	default:
		buf, err := json.Marshal(b)
		if err != nil {
			return nil, err
		}
		next = func() (io.Reader, func(), error) { return bytes.NewReader(buf), func() {}, nil }
		contentType = "application/json"
	}
	u := c.BaseURL + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	key := ""
	switch method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		key, _ = ctx.Value(idemKeyCtx{}).(string)
		if key == "" && !c.NoIdempotencyKeys {
			key = NewIdempotencyKey()
		}
	}
	pol := c.Retry.withDefaults()
	if key == "" && method != http.MethodGet && method != http.MethodHead {
		pol.MaxAttempts = 1 // a write without a key is not safe to repeat
	}
	for attempt := 1; ; attempt++ {
		resp, err := c.attempt(ctx, pol, method, u, next, contentType, key, out)
		var re *retryable
		if err == nil || !errors.As(err, &re) {
			return resp, err
		}
		if ctx.Err() != nil {
			return resp, fmt.Errorf("%s %s: %w", method, path, ctx.Err())
		}
		if cr, ok := body.(*countingReader); ok && cr.n > 0 {
			return resp, fmt.Errorf("%s %s: %w (not retried: the streamed body cannot be sent again)", method, path, re.err)
		}
		if attempt >= pol.MaxAttempts {
			return resp, fmt.Errorf("%s %s: gave up after %d attempts: %w", method, path, attempt, re.err)
		}
		d := pol.backoff(attempt)
		if re.retryAfter > d {
			d = min(re.retryAfter, pol.MaxRetryAfter)
		}
		if c.OnRetry != nil {
			c.OnRetry(method, path, attempt, d, re.err)
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return resp, fmt.Errorf("%s %s: %w (after: %v)", method, path, ctx.Err(), re.err)
		case <-t.C:
		}
	}
}

// attempt sends the request once. A *retryable error means another
// attempt may succeed.
func (c *Client) attempt(ctx context.Context, pol RetryPolicy, method, u string, next func() (io.Reader, func(), error), contentType, key string, out any) (*http.Response, error) {
	actx := ctx
	if pol.AttemptTimeout > 0 {
		var cancel context.CancelFunc
		actx, cancel = context.WithTimeout(ctx, pol.AttemptTimeout)
		defer cancel()
	}
	var rd io.Reader
	if next != nil {
		r, done, err := next()
		if err != nil {
			return nil, err
		}
		defer done()
		rd = r
	}
	req, err := http.NewRequestWithContext(actx, method, u, rd)
	if err != nil {
		return nil, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if c.Key != "" {
		req.Header.Set("Authorization", "Bearer "+c.Key)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, err
		}
		return nil, &retryable{err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 400 {
		b, rerr := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if rerr != nil {
			return resp, &retryable{err: fmt.Errorf("reading the answer: %w", rerr)}
		}
		e := decodeErrorBody(resp.StatusCode, b)
		if !Replayed(resp) && retryStatus(resp.StatusCode, lockstep.ErrorCode(e)) {
			return resp, &retryable{err: e, retryAfter: retryAfter(resp.Header.Get("Retry-After"))}
		}
		return resp, e
	}
	switch o := out.(type) {
	case nil:
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			return resp, &retryable{err: fmt.Errorf("reading the answer: %w", err)}
		}
	case io.Writer:
		cw := &countingWriter{w: o}
		if _, err := io.Copy(cw, resp.Body); err != nil {
			if cw.n == 0 && ctx.Err() == nil {
				return resp, &retryable{err: fmt.Errorf("reading the answer: %w", err)}
			}
			return resp, err
		}
	default:
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			if ctx.Err() != nil {
				return resp, err
			}
			return resp, &retryable{err: fmt.Errorf("reading the answer: %w", err)}
		}
		if p, ok := out.(*[]byte); ok {
			*p = b
			return resp, nil
		}
		if err := json.Unmarshal(b, out); err != nil {
			return resp, fmt.Errorf("decode the answer: %w", err)
		}
	}
	return resp, nil
}

// retryStatus: statuses another attempt may change.
func retryStatus(status int, code string) bool {
	if code == lockstep.ENOTCONFIGURED {
		return false // a feature not configured stays so: final
	}
	switch status {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	case http.StatusConflict:
		return code == lockstep.EINPROGRESS
	}
	return false
}

// retryAfter parses a Retry-After value (seconds or an HTTP date).
func retryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n >= 0 {
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := time.Until(t); d > 0 {
			return d
		}
	}
	return 0
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

func (c *Client) get(ctx context.Context, path string, q url.Values, out any) error {
	_, err := c.Request(ctx, http.MethodGet, path, q, nil, "", out)
	return err
}

func (c *Client) post(ctx context.Context, path string, body, out any) error {
	_, err := c.Request(ctx, http.MethodPost, path, nil, body, "", out)
	return err
}

func (c *Client) put(ctx context.Context, path string, body, out any) error {
	_, err := c.Request(ctx, http.MethodPut, path, nil, body, "", out)
	return err
}

func (c *Client) del(ctx context.Context, path string, q url.Values, out any) error {
	_, err := c.Request(ctx, http.MethodDelete, path, q, nil, "", out)
	return err
}

// WaitReady polls /healthz until the server answers or ctx ends.
func (c *Client) WaitReady(ctx context.Context) error {
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.BaseURL+"/healthz", nil)
		resp, err := c.HTTP.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("server at %s not ready: %w", c.BaseURL, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
