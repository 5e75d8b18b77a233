package procenv

import (
	"slices"
	"testing"
)

func TestMerge(t *testing.T) {
	got := Merge([]string{"A=1", "PATH=/bin", "B=2", "A=0"}, []string{"A=3", "C=4"})
	if want := []string{"PATH=/bin", "B=2", "A=3", "C=4"}; !slices.Equal(got, want) {
		t.Fatalf("Merge = %q, want %q", got, want)
	}
	if got := Merge(nil, nil); len(got) != 0 {
		t.Fatalf("Merge(nil, nil) = %q", got)
	}
}
