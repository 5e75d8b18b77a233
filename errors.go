package lockstep

import (
	"errors"
	"fmt"
)

// Error codes. They match the HTTP API contract (the ErrorCode enum of
// api/openapi.yaml) one to one; the set is append-only because clients
// switch on these strings.
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

// ERATELIMITED (429): over a per-key or server-wide bound of open
// sessions or streams; retry after Retry-After.
const ERATELIMITED = "rate_limited"

// ENOTCONFIGURED (501): the feature asked for is not configured on this
// server (e.g. database branching without --branch-database-url). It is a
// final answer, never retried: asking again changes nothing until the
// operator restarts the server with the setting.
const ENOTCONFIGURED = "not_configured"

// ENORUNNER (409): no live runner may take a run job for the workspace
// (runjob.go). It is a final answer, not retried: start a runner first.
const ENORUNNER = "no_runner"

// Error is the one application error type, after upspin's: Code and
// Message are for clients (the code is the API contract, the message is
// written for the caller and never carries driver text); Op and Err are for
// logs and traces (the operation that failed and the underlying cause, a
// driver or system error). Domain packages return it (or wrap it); adapters
// translate their drivers' errors into it; the web package maps Code to an
// HTTP status in one table and shows only Code, Message and Details.
type Error struct {
	Code    string
	Message string
	Details map[string]any
	// Op names the operation that failed ("sqlstore.CreateRepo",
	// "gate.Promote"); for logs only.
	Op string
	// Err is the cause (a driver error, a system error); kept for logs,
	// reachable through errors.Is and errors.As, never shown to clients.
	Err error
}

// Error is the log form: op, code, message and cause.
func (e *Error) Error() string {
	s := e.Code + ": " + e.Message
	if e.Op != "" {
		s = e.Op + ": " + s
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the cause, so errors.Is and errors.As see through e.
func (e *Error) Unwrap() error { return e.Err }

// E builds an *Error: op names the operation (for logs), code and msg are
// what the client sees, err (may be nil) is the cause kept for logs.
func E(op, code, msg string, err error) *Error {
	return &Error{Op: op, Code: code, Message: msg, Err: err}
}

// Errorf builds an *Error with a formatted message. The message is shown to
// clients: never format a driver's error into it (use E with the error as
// the cause).
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// WithDetails returns a copy of e carrying details.
func (e *Error) WithDetails(d map[string]any) *Error {
	c := *e
	c.Details = d
	return &c
}

// WithOp returns a copy of e naming op (kept when e already names one).
func (e *Error) WithOp(op string) *Error {
	c := *e
	if c.Op == "" {
		c.Op = op
	}
	return &c
}

// ErrorOp returns the operation named by the outermost *Error of err's
// chain that names one, or "".
func ErrorOp(err error) string {
	switch e := err.(type) {
	case nil:
		return ""
	case *Error:
		if e.Op != "" {
			return e.Op
		}
		return ErrorOp(e.Err)
	case interface{ Unwrap() []error }:
		for _, w := range e.Unwrap() {
			if op := ErrorOp(w); op != "" {
				return op
			}
		}
		return ""
	}
	return ErrorOp(errors.Unwrap(err))
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
