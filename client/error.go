package client

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/api"
)

// Error is an error answer of the server: the HTTP status and the
// envelope's code, message and details. Switch on Code (the contract's
// codes: invalid_argument, not_found, ref_conflict, …):
//
//	var e *client.Error
//	if errors.As(err, &e) && e.Code == "ref_conflict" { ... e.Details["actual"] ... }
//
// (ref_conflict's details are ref, expected and actual.) An error the
// client decides before any request (PushDir of a path that is not a
// directory, a local I/O error) is a *lockstep.Error, not an Error;
// lockstep.ErrorCode reads the code of both. It unwraps to the equivalent *lockstep.Error, so lockstep.ErrorCode and
// lockstep.ErrorDetails give the same answers as on the server. An answer
// that is not an envelope (a proxy's HTML page) is code internal with the
// status and the body's text as its message.
type Error struct {
	Status  int
	Code    string
	Message string
	Details map[string]any

	le *lockstep.Error
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Unwrap returns the error as a *lockstep.Error.
func (e *Error) Unwrap() error {
	if e.le == nil {
		e.le = &lockstep.Error{Code: e.Code, Message: e.Message, Details: e.Details}
	}
	return e.le
}

func decodeErrorBody(status int, b []byte) error {
	var env api.ErrorEnvelope
	if err := json.Unmarshal(b, &env); err != nil || env.Error.Code == "" {
		return newError(status, lockstep.EINTERNAL, fmt.Sprintf("HTTP %d: %s", status, strings.TrimSpace(string(b))), nil)
	}
	return newError(status, env.Error.Code, env.Error.Message, env.Error.Details)
}

func newError(status int, code, msg string, details map[string]any) *Error {
	e := &Error{Status: status, Code: code, Message: msg, Details: details}
	e.Unwrap()
	return e
}
