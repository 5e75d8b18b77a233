package delivery

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/lockstep-hq/lockstep"
)

// Sender sends the single attempts of an outbox (hook deliveries,
// effects) with the target rules of this package: an address dialed is
// checked unless its host is allowed by name, redirects are not followed,
// no proxy is used.
type Sender struct {
	guarded, open *http.Client
	allow         AllowList
}

// NewSender returns a Sender whose requests time out after timeout;
// setting names the allow list in a refusal ("--hook-allow-hosts").
func NewSender(timeout time.Duration, allow AllowList, setting string) *Sender {
	guarded, open := targetClients(timeout, allow, setting)
	return &Sender{guarded: guarded, open: open, allow: allow}
}

// Send makes one attempt of req. It returns the receiver's status code (0
// when none answered) and an error unless the receiver answered 2xx: a
// redirect is an error (not followed), a dial refused for an internal
// address is the refusal's reason, a transport error is the cause
// without the URL (which may carry a receiver's token). The body read is
// bounded and discarded.
func (s *Sender) Send(req *http.Request) (int, error) {
	client := s.guarded
	if s.allow.hostAllowed(req.URL.Hostname()) {
		client = s.open
	}
	resp, err := client.Do(req)
	if err != nil {
		var be *blockedError
		var ue *url.Error
		switch {
		case errors.As(err, &be):
			err = be // the reason, without the transport's wrapping
		case errors.As(err, &ue) && req.Context().Err() == nil:
			err = ue.Err
		}
		return 0, err
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	switch {
	case resp.StatusCode >= 300 && resp.StatusCode <= 399:
		err = fmt.Errorf("receiver answered %d (redirect to %q): redirects are not followed; use the final URL", resp.StatusCode, Truncate(lockstep.RedactURL(resp.Header.Get("Location")), 200))
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		err = fmt.Errorf("receiver answered %d", resp.StatusCode)
	}
	return resp.StatusCode, err
}

// Backoff is the delay before attempt n+1 of an outbox row:
// first·2^(n-1) with ±20% jitter, capped at max.
func Backoff(n int, first, max time.Duration) time.Duration {
	d := first
	for i := 1; i < n && d < max; i++ {
		d *= 2
	}
	if d > max {
		d = max
	}
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// Truncate cuts s to n bytes (an attempt's error, a Location header).
func Truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return strings.TrimSpace(s)
}
