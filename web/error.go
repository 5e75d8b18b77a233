package web

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/lockstep-hq/lockstep"
)

// statuses maps every error code to its HTTP status: the one table.
var statuses = map[string]int{
	lockstep.EINVALID:       http.StatusBadRequest,
	lockstep.EUNAUTH:        http.StatusUnauthorized,
	lockstep.EFORBIDDEN:     http.StatusForbidden,
	lockstep.ENOTFOUND:      http.StatusNotFound,
	lockstep.EREFCONFLICT:   http.StatusConflict,
	lockstep.EMERGECONFLICT: http.StatusConflict,
	lockstep.ECONFLICT:      http.StatusConflict,
	lockstep.EGATEFAILED:    http.StatusPreconditionFailed,
	lockstep.ETOOLARGE:      http.StatusRequestEntityTooLarge,
	lockstep.EPRECONDITION:  http.StatusPreconditionRequired,
	lockstep.EUNAVAILABLE:   http.StatusServiceUnavailable,
	lockstep.EINTERNAL:      http.StatusInternalServerError,
	// idempotent writes (idempotency.go)
	lockstep.EIDEMREUSED:  http.StatusUnprocessableEntity,
	lockstep.EINPROGRESS:  http.StatusConflict,
	lockstep.ERATELIMITED: http.StatusTooManyRequests,
	// a feature not configured on this server: final, not retried
	lockstep.ENOTCONFIGURED: http.StatusNotImplemented,
	// no live runner may take a run job for the workspace: final
	lockstep.ENORUNNER: http.StatusConflict,
}

// StatusOf returns the HTTP status of an error code.
func StatusOf(code string) int {
	if s, ok := statuses[code]; ok {
		return s
	}
	return http.StatusInternalServerError
}

// retryAfterSeconds is the Retry-After of every 503 that did not set its own.
const retryAfterSeconds = "5"

type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code    string         `json:"code"`
	Message string         `json:"message"`
	Details map[string]any `json:"details,omitempty"`
}

// writeError writes the JSON error envelope: the code, the safe message
// and the details of the error, nothing else. The operation that failed and
// the cause (a driver's error, which may name hosts, tables or queries) go
// to the request log with the request id, never to the client.
func writeError(c *gin.Context, err error) {
	writeErrorStatus(c, 0, err)
}

func writeErrorStatus(c *gin.Context, status int, err error) {
	if slow := slowBodyError(c); slow != nil {
		status, err = 0, slow
	}
	err = exhaustedError(c, err)
	code := lockstep.ErrorCode(err)
	if status == 0 {
		status = StatusOf(code)
	}
	// The log form: "op: code: message: cause" (logging writes it with
	// the request id).
	c.Set("error", err.Error())
	if op := lockstep.ErrorOp(err); op != "" {
		c.Set("error_op", op)
	}
	if status == http.StatusServiceUnavailable && c.Writer.Header().Get("Retry-After") == "" {
		c.Header("Retry-After", retryAfterSeconds) // a dependency (database, disk) is down: retry, it is not a bug
	}
	c.AbortWithStatusJSON(status, errorBody{Error: errorDetail{Code: code, Message: lockstep.ErrorMessage(err), Details: lockstep.ErrorDetails(err)}})
}

// exhaustedError makes resource exhaustion (out of file descriptors or
// memory) a 503 whatever an inner layer called it, and marks the request
// so that /readyz reports it for a while (Server.logging records it).
func exhaustedError(c *gin.Context, err error) error {
	if !lockstep.Exhausted(err) {
		return err
	}
	c.Set(exhaustedKey, true)
	return lockstep.ResourceError(err)
}

// exhaustedKey marks a request that failed for want of a resource.
const exhaustedKey = "resource_exhausted"

// decodeJSON reads a JSON body strictly: size-limited, unknown fields and
// trailing data refused, every failure an invalid_argument envelope.
func (s *Server) decodeJSON(c *gin.Context, v any) error {
	return s.decodeJSONLimit(c, v, s.Config.MaxJSONBytes)
}

// decodeJSONLimit is decodeJSON with another body limit (routes that carry
// file content).
func (s *Server) decodeJSONLimit(c *gin.Context, v any, limit int64) error {
	if ct := c.ContentType(); ct != "" && ct != "application/json" {
		return lockstep.Errorf(lockstep.EINVALID, "content type %q: want application/json", ct)
	}
	body := http.MaxBytesReader(c.Writer, c.Request.Body, limit)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &mbe):
			return lockstep.Errorf(lockstep.ETOOLARGE, "request body over %d bytes", limit)
		case errors.Is(err, io.EOF):
			return lockstep.Errorf(lockstep.EINVALID, "empty request body: want a JSON object")
		case errors.As(err, &se):
			return lockstep.Errorf(lockstep.EINVALID, "malformed JSON at byte %d: %v", se.Offset, err)
		case errors.As(err, &te):
			return lockstep.Errorf(lockstep.EINVALID, "field %q: want %s, got %s", te.Field, te.Type, te.Value)
		case strings.HasPrefix(err.Error(), "json: unknown field"):
			return lockstep.Errorf(lockstep.EINVALID, "unknown field %s", strings.TrimPrefix(err.Error(), "json: unknown field "))
		default:
			return lockstep.Errorf(lockstep.EINVALID, "malformed JSON: %v", err)
		}
	}
	if dec.More() {
		return lockstep.Errorf(lockstep.EINVALID, "trailing data after the JSON object")
	}
	return nil
}

// queryInt parses an optional integer query parameter.
func queryInt(c *gin.Context, name string, def int) (int, error) {
	v := c.Query(name)
	if v == "" {
		return def, nil
	}
	var n int
	if _, err := fmt.Sscan(v, &n); err != nil || n < 0 {
		return 0, lockstep.Errorf(lockstep.EINVALID, "query parameter %s=%q: want a non-negative integer", name, v)
	}
	return n, nil
}

// queryBool parses an optional boolean query parameter.
func queryBool(c *gin.Context, name string) (bool, error) {
	switch strings.ToLower(c.Query(name)) {
	case "", "0", "false", "no":
		return false, nil
	case "1", "true", "yes":
		return true, nil
	}
	return false, lockstep.Errorf(lockstep.EINVALID, "query parameter %s=%q: want true or false", name, c.Query(name))
}
