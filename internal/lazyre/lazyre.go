// Package lazyre is a regular expression compiled on first use.
//
// Go runs every linked package's initialiser before main, and the one
// lockstep binary links the server with the client: a package-level
// regexp.MustCompile of a bounded repetition such as `[a-z0-9._-]{0,99}`
// builds a program of ~1,700 allocations (~120 KB, 0.1–0.3 ms), paid by
// every command, `lockstep version` included. Names and ids are checked
// with these patterns, so they are declared with New and compiled on the
// first match instead.
package lazyre

import (
	"regexp"
	"sync"
)

// RE is a regular expression compiled on its first use. The zero value
// is not usable; declare one with New.
type RE struct {
	expr string
	once sync.Once
	re   *regexp.Regexp
}

// New returns expr, to be compiled on first use. A bad expression
// panics there, as regexp.MustCompile would at start-up; each package's
// tests exercise its patterns.
func New(expr string) *RE { return &RE{expr: expr} }

// Regexp returns the compiled expression.
func (r *RE) Regexp() *regexp.Regexp {
	r.once.Do(func() { r.re = regexp.MustCompile(r.expr) })
	return r.re
}

// MatchString reports whether s contains a match of the expression.
func (r *RE) MatchString(s string) bool { return r.Regexp().MatchString(s) }

// String returns the source text of the expression.
func (r *RE) String() string { return r.expr }
