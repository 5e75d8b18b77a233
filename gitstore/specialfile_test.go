package gitstore

import (
	"math/rand"
	"strings"
	"testing"
)

// TestSpecialFileFastPath checks specialFile's fast path against
// specialFileSlow on names built from the pieces git's HFS+ and NTFS
// alias rules look at: the same answer for every name.
func TestSpecialFileFastPath(t *testing.T) {
	pieces := []string{
		".", "~", "1", "4", "9", "0", "g", "G", "i", "t", "m", "M", "a", "b", "e", "7", "d", "2", "5", "3",
		" ", ":", "\\", "/", "x", "\u200c", "\ufeff", "\u00e9", "\xff",
		".gitmodules", ".GITATTRIBUTES", ".gitignore", ".mailmap", "gitmod~1", "GI7EBA~1", "gi7d29~2",
		"gi250a~9", "maba30~1", "gitatt~3", "~1234567", "mailma~1", "modules", "attributes",
	}
	rng := rand.New(rand.NewSource(1))
	special := map[string]int{}
	for i := 0; i < 300000; i++ {
		var sb strings.Builder
		for k := rng.Intn(5); k >= 0; k-- {
			sb.WriteString(pieces[rng.Intn(len(pieces))])
		}
		c := sb.String()
		got, want := specialFile(c), specialFileSlow(c)
		if got != want {
			t.Fatalf("specialFile(%q) = %q, specialFileSlow: %q", c, got, want)
		}
		special[want]++
	}
	for _, s := range []string{"", ".gitmodules", ".gitattributes", ".gitignore", ".mailmap"} {
		if special[s] == 0 {
			t.Errorf("no generated name is %q: the test does not cover it", s)
		}
	}
	t.Logf("%v", special)
}
