package lockstep

import (
	"errors"
	"syscall"
)

// Exhausted reports whether err (anywhere in its chain) says that the
// process or the machine ran out of a resource: file descriptors (EMFILE,
// ENFILE) or memory (ENOMEM), whether from opening a file, creating a pipe
// or starting a subprocess. Such a failure says nothing about the request
// or the data it names: it is retried later, never answered as a missing
// object or an internal error.
func Exhausted(err error) bool {
	return err != nil && (errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) || errors.Is(err, syscall.ENOMEM))
}

// ResourceError returns err as unavailable (503, Retry-After) when
// Exhausted(err), whatever code an inner layer gave it (a failed open
// read as "not found" is still exhaustion); the cause is kept for the
// log. Other errors are returned unchanged.
func ResourceError(err error) error {
	if !Exhausted(err) {
		return err
	}
	var le *Error
	if errors.As(err, &le) && le.Code == EUNAVAILABLE {
		return err
	}
	return &Error{Op: ErrorOp(err), Code: EUNAVAILABLE, Err: err,
		Message: "the server is out of file descriptors or memory: nothing was changed; retry later"}
}
