package lockstep_test

import (
	"fmt"
	"io/fs"
	"strings"
	"syscall"
	"testing"

	"github.com/lockstep-hq/lockstep"
)

// ResourceError: running out of descriptors or memory is unavailable
// whatever code an inner layer gave it; other errors are left alone.
func TestResourceError(t *testing.T) {
	open := &fs.PathError{Op: "open", Path: "/data/networks/x.git/objects/ab/cd", Err: syscall.EMFILE}
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"EMFILE from open", fmt.Errorf("read commit: %w", open), lockstep.EUNAVAILABLE},
		{"ENFILE", fmt.Errorf("pipe: %w", syscall.ENFILE), lockstep.EUNAVAILABLE},
		{"ENOMEM from exec", fmt.Errorf("fork/exec git: %w", syscall.ENOMEM), lockstep.EUNAVAILABLE},
		{"not_found caused by EMFILE", lockstep.E("repo.Commit", lockstep.ENOTFOUND, "commit not found", open), lockstep.EUNAVAILABLE},
		{"a real miss", lockstep.Errorf(lockstep.ENOTFOUND, "commit not found"), lockstep.ENOTFOUND},
		{"ENOENT", &fs.PathError{Op: "open", Path: "x", Err: syscall.ENOENT}, lockstep.EINTERNAL},
	} {
		got := lockstep.ResourceError(tc.err)
		if code := lockstep.ErrorCode(got); code != tc.want {
			t.Errorf("%s: code %s, want %s", tc.name, code, tc.want)
		}
		if tc.want == lockstep.EUNAVAILABLE {
			if msg := lockstep.ErrorMessage(got); msg == "" || strings.Contains(msg, "/data") {
				t.Errorf("%s: message %q", tc.name, msg)
			}
			if lockstep.ErrorOp(tc.err) != "" && lockstep.ErrorOp(got) != lockstep.ErrorOp(tc.err) {
				t.Errorf("%s: op %q lost", tc.name, lockstep.ErrorOp(tc.err))
			}
		}
	}
}
