package lockstep

import (
	"context"
	"time"
)

type requestStartKey struct{}

// WithRequestStart returns ctx carrying the time its request arrived. A
// replica's cache of a shared network (object-storage mode) that was
// brought up to date after that moment already shows the request every
// write committed before it began, so the later steps of the request
// skip the check (one generation read per request, not per step).
func WithRequestStart(ctx context.Context, t time.Time) context.Context {
	return context.WithValue(ctx, requestStartKey{}, t)
}

// RequestStart returns the time WithRequestStart recorded in ctx.
func RequestStart(ctx context.Context) (time.Time, bool) {
	t, ok := ctx.Value(requestStartKey{}).(time.Time)
	return t, ok
}
