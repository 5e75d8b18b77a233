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

// TestIsDotGitFastPath: isDotGit (asked for every entry name of a
// received tree) answers as its slow path does on names built from
// .git's aliases (HFS+ ignorables, NTFS short names, trailing dots and
// spaces, backslashes) and common entry names.
func TestIsDotGitFastPath(t *testing.T) {
	pieces := []string{
		".", "~", "1", "2", "g", "G", "i", "I", "t", "T", " ", ":", "\\", "/", "x", "a", "\u200c", "\u200f", "\u202a",
		"\u206f", "\ufeff", "\u00e9", "\xff", ".git", ".GIT", "git~1", "GIT~1", "go.mod", "main.go", "README", "gitlab",
	}
	rng := rand.New(rand.NewSource(2))
	dotGit := 0
	for i := 0; i < 300000; i++ {
		var sb strings.Builder
		for k := rng.Intn(5); k >= 0; k-- {
			sb.WriteString(pieces[rng.Intn(len(pieces))])
		}
		c := sb.String()
		got, want := isDotGit(c), isDotGitSlow(c)
		if got != want {
			t.Fatalf("isDotGit(%q) = %v, isDotGitSlow: %v", c, got, want)
		}
		if want {
			dotGit++
		}
	}
	for _, c := range []string{".git", "GIT~1", "x\\.git", "a\\git~1. ", "\u200c.gIt", ".git. . ", ".git::$INDEX_ALLOCATION"} {
		if !isDotGit(c) {
			t.Errorf("isDotGit(%q) = false", c)
		}
	}
	if dotGit == 0 {
		t.Error("no generated name is .git: the test does not cover it")
	}
	t.Logf("%d of 300000 generated names are .git", dotGit)
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
