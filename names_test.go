package lockstep_test

import (
	"errors"
	"math/rand"
	"os/exec"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/lockstep-hq/lockstep"
)

// gitAccepts asks the git CLI, the oracle, whether ref is a valid full ref
// name (`git check-ref-format <ref>`: exit 0 valid, 1 invalid).
func gitAccepts(t testing.TB, ref string) bool {
	t.Helper()
	err := exec.Command("git", "check-ref-format", ref).Run()
	if err == nil {
		return true
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 1 {
		return false
	}
	t.Fatalf("git check-ref-format %q: %v", ref, err)
	return false
}

// branchSeeds are the names of issue 9 and every rule of
// git-check-ref-format(1), each on its own and at a component boundary.
var branchSeeds = []string{
	"main", "feature/x", "foo.", "HEAD", "refs/heads/x", "-foo", "ab", "ab/cd", "a b", "é", "Ünïcödé/ß",
	"\xff", "a\xffb", "a/.b", ".a", "a.", "a/b.", "a.lock", "a.lock/b", "a/b.lock", "a..b", "a/..", "x/", "/x", "x//y",
	"*", "a*", "a?", "a[", "a\\b", "a~1", "a^", "a:b", "a\tb", "a\x7fb", "a\x01", "@", "@/x", "x/@", "a@b", "a@{b", "@{",
	"a@", "{", "a{b", "a.b", "a/b/c", "v1.2.3", "UPPER", "a_b-c", "0123456789abcdef0123456789abcdef01234567",
	"a\u200db", "a\u202eb", "a\u00a0b", "a\u3000b", "\ue000", "a\u0301", "\U0001F600", "a.lo", ".lock", "lock", "a/.lock",
	strings.Repeat("a", 200), strings.Repeat("a", 201), "a/" + strings.Repeat("b", 198), "conflicts/main",
}

func TestCheckRefFormatMatchesGit(t *testing.T) {
	for _, s := range branchSeeds {
		full := "refs/heads/" + s
		if got, want := lockstep.CheckRefFormat(full) == nil, gitAccepts(t, full); got != want {
			t.Errorf("CheckRefFormat(%q) accepts=%v, git accepts=%v (err %v)", full, got, want, lockstep.CheckRefFormat(full))
		}
		if s != "" && s[0] != '-' {
			if got, want := lockstep.CheckRefFormat(s) == nil, gitAccepts(t, s); got != want {
				t.Errorf("CheckRefFormat(%q) accepts=%v, git accepts=%v", s, got, want)
			}
		}
	}
}

// TestCheckRefFormatGeneratedTable compares with git on names generated
// from the characters and sequences git's rules single out.
func TestCheckRefFormatGeneratedTable(t *testing.T) {
	rng := rand.New(rand.NewSource(9))
	atoms := []string{"a", "B", "/", ".", "..", "@", "{", "@{", ".lock", "lock", "-", "~", " ", "*", "é", "\xff", "\x01", "\u200d", "HEAD", "refs/"}
	seen := map[string]bool{}
	for len(seen) < 150 {
		var b strings.Builder
		for k := 1 + rng.Intn(4); k > 0; k-- {
			b.WriteString(atoms[rng.Intn(len(atoms))])
		}
		seen[b.String()] = true
	}
	for s := range seen {
		checkBranchAgainstGit(t, s)
	}
}

// checkBranchAgainstGit is the property of the fuzz target: the pure Go
// rules equal git's, and ValidateBranch accepts nothing git refuses (and
// refuses with a reason).
func checkBranchAgainstGit(t testing.TB, s string) {
	t.Helper()
	full := "refs/heads/" + s
	git := gitAccepts(t, full)
	if got := lockstep.CheckRefFormat(full) == nil; got != git {
		t.Errorf("CheckRefFormat(%q) accepts=%v, git accepts=%v", full, got, git)
	}
	err := lockstep.ValidateBranch(s)
	if err == nil && !git {
		t.Errorf("ValidateBranch(%q) accepts a name git refuses", s)
	}
	if err != nil {
		if lockstep.ErrorCode(err) != lockstep.EINVALID {
			t.Errorf("ValidateBranch(%q): code %s, want invalid_argument", s, lockstep.ErrorCode(err))
		}
		if r, _ := lockstep.ErrorDetails(err)["reason"].(string); r == "" {
			t.Errorf("ValidateBranch(%q): no reason in %v", s, err)
		}
	}
}

func TestValidateBranchRules(t *testing.T) {
	for _, s := range []string{"main", "feature/x", "Ünïcödé/ß", "v1.2.3", "UPPER", "a_b-c", "@", "a@b", "x/@", "\U0001F600", "a\u0301",
		strings.Repeat("a", 200)} {
		if err := lockstep.ValidateBranch(s); err != nil {
			t.Errorf("ValidateBranch(%q) = %v, want accepted", s, err)
		}
	}
	for s, why := range map[string]string{
		"foo.":                   `end with "."`,
		"HEAD":                   "HEAD is not a branch",
		"refs/heads/x":           "without refs/heads/",
		"-foo":                   `start with "-"`,
		"a\xffb":                 "UTF-8",
		"a\u200db":               "U+200D is not printable",
		"a\u202eb":               "U+202E",
		"a\u00a0b":               "U+00A0",
		"\ue000":                 "U+E000",
		strings.Repeat("a", 201): "longer than 200 bytes",
		"0123456789abcdef0123456789abcdef01234567": "commit id",
		"a..b":   `".."`,
		"a@{b":   `"@{"`,
		"x//y":   "empty component",
		"a.lock": ".lock",
		"a b":    "not allowed",
		"":       "empty",
	} {
		err := lockstep.ValidateBranch(s)
		if err == nil || lockstep.ErrorCode(err) != lockstep.EINVALID || !strings.Contains(err.Error(), why) {
			t.Errorf("ValidateBranch(%q) = %v, want invalid_argument mentioning %q", s, err, why)
		}
	}
}

// FuzzValidateBranch checks ValidateBranch and CheckRefFormat against the
// git CLI (`git check-ref-format`) on every input. Without -fuzz, go test
// runs the seeds.
func FuzzValidateBranch(f *testing.F) {
	for _, s := range branchSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if strings.IndexByte(s, 0) >= 0 {
			// A NUL cannot be passed to git as an argument; a control
			// character, which we refuse.
			if lockstep.ValidateBranch(s) == nil || lockstep.CheckRefFormat("refs/heads/"+s) == nil {
				t.Fatalf("%q with NUL accepted", s)
			}
			return
		}
		if len(s) > 4096 {
			return
		}
		checkBranchAgainstGit(t, s)
		if lockstep.ValidateBranch(s) == nil && (!utf8.ValidString(s) || len(s) > lockstep.MaxBranchBytes) {
			t.Fatalf("ValidateBranch(%q) accepted a name outside our own rules", s)
		}
	})
}
