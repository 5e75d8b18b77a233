package lockstep_test

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"

	"github.com/lockstep-hq/lockstep"
)

func TestErrorKeepsOpAndCause(t *testing.T) {
	cause := fmt.Errorf("read: %w", fs.ErrPermission)
	err := fmt.Errorf("outer: %w", lockstep.E("sqlstore.RepoByName", lockstep.EUNAVAILABLE, "the metadata database is unavailable; retry later", cause))
	if lockstep.ErrorCode(err) != lockstep.EUNAVAILABLE || lockstep.ErrorMessage(err) != "the metadata database is unavailable; retry later" {
		t.Fatalf("client view: %q %q", lockstep.ErrorCode(err), lockstep.ErrorMessage(err))
	}
	if lockstep.ErrorOp(err) != "sqlstore.RepoByName" {
		t.Fatalf("op %q", lockstep.ErrorOp(err))
	}
	if !errors.Is(err, fs.ErrPermission) {
		t.Fatal("errors.Is does not see the cause through *Error")
	}
	var pe *fs.PathError
	wrapped := lockstep.E("op", lockstep.EINTERNAL, "internal error", &fs.PathError{Op: "open", Path: "/x", Err: fs.ErrNotExist})
	if !errors.As(wrapped, &pe) || pe.Path != "/x" {
		t.Fatal("errors.As does not see the cause through *Error")
	}
	// The log form has everything; the message has none of the cause.
	if s := err.Error(); !strings.Contains(s, "sqlstore.RepoByName") || !strings.Contains(s, "permission denied") {
		t.Fatalf("log form %q", s)
	}
	if strings.Contains(lockstep.ErrorMessage(err), "permission") {
		t.Fatal("the client message carries the cause")
	}
	// The outermost op wins; an error without one reports "".
	inner := lockstep.E("inner", lockstep.ENOTFOUND, "x", nil)
	if op := lockstep.ErrorOp(lockstep.E("outer", lockstep.ENOTFOUND, "x", inner)); op != "outer" {
		t.Fatalf("op %q, want outer", op)
	}
	if op := lockstep.ErrorOp(fmt.Errorf("%w: %w", lockstep.Errorf(lockstep.EINVALID, "no op"), inner)); op != "inner" {
		t.Fatalf("op through a multi-wrap %q, want inner", op)
	}
	if op := lockstep.ErrorOp(errors.New("plain")); op != "" {
		t.Fatalf("op of a plain error %q", op)
	}
	// WithOp keeps an op already set and never changes the original.
	e := lockstep.Errorf(lockstep.ENOTFOUND, "gone")
	if e.WithOp("a").Op != "a" || e.Op != "" || e.WithOp("a").WithOp("b").Op != "a" {
		t.Fatal("WithOp")
	}
}

// TestRefConflictDetails: the one ref_conflict error keeps the JSON
// details clients parse, and carries its fields typed.
func TestRefConflictDetails(t *testing.T) {
	old, cur := strings.Repeat("a", 40), strings.Repeat("b", 40)
	err := lockstep.RefConflict("app", "refs/heads/main", old, cur)
	d := lockstep.ErrorDetails(err)
	if len(d) != 3 || d["ref"] != "refs/heads/main" || d["expected"] != old || d["actual"] != cur {
		t.Errorf("details %v", d)
	}
	if msg := lockstep.ErrorMessage(err); msg != "app refs/heads/main is at bbbbbbbbbbbb, not aaaaaaaaaaaa" {
		t.Errorf("message %q", msg)
	}
	wrapped := fmt.Errorf("push: %w", err)
	if m, ok := lockstep.AsRefMismatch(wrapped); !ok || m.Expected != old || m.Actual != cur || m.Conflicting != "" {
		t.Errorf("typed fields %+v %v", m, ok)
	}
	clash := lockstep.RefNameConflict("app", "refs/heads/a/b", "refs/heads/a")
	d = lockstep.ErrorDetails(clash)
	if d["conflicting_ref"] != "refs/heads/a" || d["expected"] != lockstep.ZeroOID || d["actual"] != lockstep.ZeroOID {
		t.Errorf("clash details %v", d)
	}
	if m, ok := lockstep.AsRefMismatch(clash); !ok || m.Conflicting != "refs/heads/a" {
		t.Errorf("clash typed fields %+v", m)
	}
	if _, ok := lockstep.AsRefMismatch(lockstep.Errorf(lockstep.EREFCONFLICT, "x")); ok {
		t.Errorf("a plain error has no mismatch")
	}
}
