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

// TestSpecialFileAllocates: asked for every tree entry of a push,
// specialFile allocates nothing, neither for common names starting with
// g or m (go.mod, main.go, Makefile: answered by the fast path) nor for
// the special names themselves (".gitignore" built a string each time).
func TestSpecialFileAllocates(t *testing.T) {
	for c, want := range map[string]string{"go.mod": "", "main.go": "", "Makefile": "", "middleware": "", "GNUmakefile": "",
		"gitlab-ci.yml": "", ".gitignore": ".gitignore", ".mailmap": ".mailmap", "gitmod~1": ".gitmodules", "GI7D29~1": ".gitattributes"} {
		if s := specialFile(c); s != want {
			t.Fatalf("specialFile(%q) = %q, want %q", c, s, want)
		}
		if n := testing.AllocsPerRun(100, func() { specialFile(c) }); n != 0 {
			t.Errorf("specialFile(%q): %v allocations", c, n)
		}
	}
}
