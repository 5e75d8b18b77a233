package lockstep

import (
	"errors"
	"fmt"
)

// Error codes. They match the HTTP API contract (DESIGN.md) one to one; the
// set is append-only because clients switch on these strings.
const (
	EINVALID       = "invalid_argument"      // 400: malformed input
	EUNAUTH        = "unauthenticated"       // 401: no key, unknown or revoked key
	EFORBIDDEN     = "permission_denied"     // 403: role or ownership forbids it
	ENOTFOUND      = "not_found"             // 404: repository, ref, commit, path ...
	EREFCONFLICT   = "ref_conflict"          // 409: compare-and-swap failed
	EMERGECONFLICT = "merge_conflict"        // 409: merge has conflicts
	ECONFLICT      = "already_exists"        // 409: a name is taken
	EGATEFAILED    = "gate_failed"           // 412: promote refused by the gate
	ETOOLARGE      = "too_large"             // 413: over a configured limit
	EPRECONDITION  = "precondition_required" // 428: write without expect_oid
	EUNAVAILABLE   = "unavailable"           // 503: a dependency is down or not configured
	EINTERNAL      = "internal"              // 500: anything else (details never shown)
)

// Error codes of idempotent writes (docs/idempotency.md).
const (
	// EIDEMREUSED (422): an Idempotency-Key sent again with a different
	// request (method, route, parameters or body).
	EIDEMREUSED = "idempotency_key_reused"
	// EINPROGRESS (409): the first request with this Idempotency-Key is
	// still running; retry later (Retry-After).
	EINPROGRESS = "in_progress"
)

// Error is the one application error type. Domain packages return it (or
// wrap it); the web package maps Code to an HTTP status in one table.
type Error struct {
	Code    string
	Message string
	Details map[string]any
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Errorf builds an *Error with a formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// WithDetails returns a copy of e carrying details.
func (e *Error) WithDetails(d map[string]any) *Error {
	c := *e
	c.Details = d
	return &c
}

// ErrorCode returns the code of the first *Error in err's chain, or
// EINTERNAL when there is none.
func ErrorCode(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	if err == nil {
		return ""
	}
	return EINTERNAL
}

// ErrorMessage returns the message of the first *Error in err's chain, or a
// generic text: internal details are never shown to clients.
func ErrorMessage(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Message
	}
	return "internal error"
}

// ErrorDetails returns the details of the first *Error in err's chain.
func ErrorDetails(err error) map[string]any {
	var e *Error
	if errors.As(err, &e) {
		return e.Details
	}
	return nil
}
