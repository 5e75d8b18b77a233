package lockstep

import (
	"errors"
	"fmt"
)

// RefMismatch is the one reason a ref move is refused by compare-and-swap
// (gitaly's MismatchingStateError): Ref of Repo is at Actual, not at
// Expected, the value the move was computed on; or, with Conflicting set,
// Ref cannot be created because Conflicting exists and one would be a
// directory of the other (git's file/directory rule). ZeroOID means the
// ref does not exist. It is the cause (Error.Err) of every ref_conflict,
// so callers read typed fields with errors.As, never Details.
type RefMismatch struct {
	Repo        string
	Ref         string
	Expected    string
	Actual      string
	Conflicting string
}

// Error is the log form.
func (m *RefMismatch) Error() string {
	if m.Conflicting != "" {
		return fmt.Sprintf("%s %s clashes with %s", m.Repo, m.Ref, m.Conflicting)
	}
	return fmt.Sprintf("%s %s is at %s, not %s", m.Repo, m.Ref, m.Actual, m.Expected)
}

// RefConflict is the one constructor of a failed compare-and-swap:
// ref_conflict (409) with details ref, expected and actual (full oids;
// ZeroOID for a ref that does not exist), the JSON clients parse.
func RefConflict(repo, ref, expected, actual string) *Error {
	return refMismatchError(&RefMismatch{Repo: repo, Ref: ref, Expected: expected, Actual: actual})
}

// RefNameConflict is the error of creating ref in repo while other exists
// and the two clash (RefsClash): ref_conflict (409), details naming both.
func RefNameConflict(repo, ref, other string) *Error {
	return refMismatchError(&RefMismatch{Repo: repo, Ref: ref, Expected: ZeroOID, Actual: ZeroOID, Conflicting: other})
}

func refMismatchError(m *RefMismatch) *Error {
	d := map[string]any{"ref": m.Ref, "expected": m.Expected, "actual": m.Actual}
	var msg string
	if m.Conflicting != "" {
		d["conflicting_ref"] = m.Conflicting
		msg = fmt.Sprintf("%s: %s cannot be created: %s exists, and a ref cannot also be a directory of refs (as in git); delete it or choose another name",
			m.Repo, m.Ref, m.Conflicting)
	} else {
		msg = fmt.Sprintf("%s %s is at %s, not %s", m.Repo, m.Ref, shortOID(m.Actual), shortOID(m.Expected))
	}
	return &Error{Code: EREFCONFLICT, Message: msg, Details: d, Err: m}
}

// AsRefMismatch returns the RefMismatch of a ref_conflict err, if any.
func AsRefMismatch(err error) (*RefMismatch, bool) {
	var m *RefMismatch
	ok := errors.As(err, &m)
	return m, ok
}

func shortOID(oid string) string {
	if oid == ZeroOID {
		return "nothing (it does not exist)"
	}
	if len(oid) > 12 {
		return oid[:12]
	}
	return oid
}
