package lazyre

import (
	"sync"
	"testing"
)

func TestMatchesLikeRegexp(t *testing.T) {
	re := New(`^[a-z0-9][a-z0-9._-]{0,99}$`)
	if re.re != nil {
		t.Fatal("compiled before first use")
	}
	for s, want := range map[string]bool{"a": true, "a.b-c_d": true, "": false, "-a": false, "A": false} {
		if got := re.MatchString(s); got != want {
			t.Errorf("MatchString(%q) = %v, want %v", s, got, want)
		}
	}
	if re.String() != `^[a-z0-9][a-z0-9._-]{0,99}$` || re.Regexp().String() != re.String() {
		t.Errorf("String() = %q", re.String())
	}
}

// TestConcurrentFirstUse: the first uses may race (go test -race).
func TestConcurrentFirstUse(t *testing.T) {
	re := New(`^x+$`)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if !re.MatchString("xxx") {
				t.Error("no match")
			}
		})
	}
	wg.Wait()
}

func TestBadExpressionPanicsOnUse(t *testing.T) {
	re := New(`(`)
	defer func() {
		if recover() == nil {
			t.Error("a bad expression did not panic on first use")
		}
	}()
	re.MatchString("x")
}
