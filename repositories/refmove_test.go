package repositories

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep"
)

// TestRetryMoves: the one retry loop recomputes a write only while it
// loses a race, within the policy's attempts and time; a name clash, any
// other error and success end it at once.
func TestRetryMoves(t *testing.T) {
	now := time.Unix(1000, 0)
	s := &Service{now: func() time.Time { return now }}
	lost := lockstep.RefConflict("app", "refs/heads/main", "a", "b")
	clash := lockstep.RefNameConflict("app", "refs/heads/a/b", "refs/heads/a")
	other := errors.New("disk full")
	cases := []struct {
		name   string
		policy retryPolicy
		errs   []error // what try returns, in turn (nil past the end)
		tries  int
		want   error
	}{
		{"no retry", noRetry, []error{lost, lost}, 1, lost},
		{"until it lands", retryPolicy{attempts: 5}, []error{lost, lost}, 3, nil},
		{"attempts bound", retryPolicy{attempts: 3}, []error{lost, lost, lost, lost}, 3, lost},
		{"time bound", retryPolicy{attempts: 10, until: now}, []error{lost, lost}, 1, lost},
		{"a clash is final", retryPolicy{attempts: 5}, []error{clash, lost}, 1, clash},
		{"other errors are final", retryPolicy{attempts: 5}, []error{other, lost}, 1, other},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tries, slept := 0, 0
			p := c.policy
			p.backoff = func(attempt int) time.Duration {
				if attempt != tries-1 {
					t.Errorf("backoff(%d) after try %d", attempt, tries)
				}
				slept++
				return time.Nanosecond
			}
			err := s.retryMoves(context.Background(), p, func(attempt int) error {
				if attempt != tries {
					t.Errorf("attempt %d on try %d", attempt, tries+1)
				}
				tries++
				if tries <= len(c.errs) {
					return c.errs[tries-1]
				}
				return nil
			})
			if err != c.want || tries != c.tries || slept != c.tries-1 {
				t.Errorf("err %v after %d tries (%d pauses), want %v after %d", err, tries, slept, c.want, c.tries)
			}
		})
	}
}

// TestExpect: the one pre-check of a write computed on a ref's value.
func TestExpect(t *testing.T) {
	r := &lockstep.Repo{Name: "app"}
	if err := expect(r, "refs/heads/main", "", "abc"); err != nil {
		t.Errorf("no expectation: %v", err)
	}
	if err := expect(r, "refs/heads/main", "abc", "abc"); err != nil {
		t.Errorf("met expectation: %v", err)
	}
	err := expect(r, "refs/heads/main", "abc", lockstep.ZeroOID)
	m, ok := lockstep.AsRefMismatch(err)
	if lockstep.ErrorCode(err) != lockstep.EREFCONFLICT || !ok || m.Expected != "abc" || m.Actual != lockstep.ZeroOID || m.Ref != "refs/heads/main" {
		t.Errorf("stale expectation: %v, %+v", err, m)
	}
}
