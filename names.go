package lockstep

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/lockstep-hq/lockstep/internal/lazyre"
)

var nameRE = lazyre.New(`^[a-z0-9][a-z0-9._-]{0,99}$`)

// ValidateName checks a repository, workspace or branch-component name
// against the contract's rule `[a-z0-9][a-z0-9._-]{0,99}`. what names the
// field in the error message ("repository name", "branch").
func ValidateName(what, name string) error {
	if !nameRE.MatchString(name) || strings.Contains(name, "..") || strings.HasSuffix(name, ".lock") {
		return Errorf(EINVALID, "invalid %s %q: want [a-z0-9][a-z0-9._-]{0,99}, no \"..\", not ending in .lock", what, name)
	}
	return nil
}

// MaxBranchBytes bounds a branch name. git itself has no limit, but every
// branch is also a file path in the on-disk ref mirror, and a component
// longer than the file system's 255 bytes could not be written there.
const MaxBranchBytes = 200

// ValidateBranch checks a branch name (without "refs/heads/"). Every name
// it accepts is one `git check-ref-format refs/heads/<name>` accepts (see
// CheckRefFormat); on top of git's rules it refuses, each with its own
// message, names that git takes but that are traps:
//
//   - "HEAD" (git branch refuses it too) and names starting with "refs/"
//     or "-" (read as a full ref name or as an option);
//   - 40 hex digits (read as a commit id by every revision argument);
//   - invalid UTF-8 (cannot round-trip through JSON), and runes that are
//     not printable: Unicode format characters (zero-width joiners, bidi
//     overrides), non-ASCII spaces, private-use and unassigned code points,
//     which make two different names look the same to a reviewer;
//   - names longer than MaxBranchBytes bytes.
//
// Upper case and printable non-ASCII letters are accepted, as git does.
func ValidateBranch(name string) error {
	bad := func(why string) error {
		return Errorf(EINVALID, "invalid branch name %q: %s", name, why).WithDetails(map[string]any{"branch": name, "reason": why})
	}
	switch {
	case name == "":
		return bad("empty")
	case len(name) > MaxBranchBytes:
		return bad("longer than 200 bytes")
	case !utf8.ValidString(name):
		return bad("not valid UTF-8")
	case name == "HEAD":
		return bad("HEAD is not a branch")
	case strings.HasPrefix(name, "refs/"):
		return bad("give the branch name without refs/heads/ (names may not start with refs/)")
	case name[0] == '-':
		return bad("a name may not start with \"-\"")
	case IsOID(name):
		return bad("40 hex digits would read as a commit id")
	}
	if why := refFormatProblem("refs/heads/" + name); why != "" {
		return bad(why)
	}
	for _, r := range name {
		if r >= utf8.RuneSelf && !unicode.IsPrint(r) {
			return bad(fmt.Sprintf("character %U is not printable (format, space, private-use or unassigned code point)", r))
		}
	}
	return nil
}

// CheckRefFormat checks a full ref name (such as "refs/heads/main") with
// exactly the rules of `git check-ref-format` (no --allow-onelevel, no
// --refspec-pattern, no --normalize): it accepts what git accepts and
// refuses, with invalid_argument naming the rule, what git refuses.
func CheckRefFormat(ref string) error {
	if why := refFormatProblem(ref); why != "" {
		return Errorf(EINVALID, "invalid ref name %q: %s", ref, why)
	}
	return nil
}

// refFormatProblem returns why git would refuse ref, or "". The rules are
// those of git's check_refname_format (refs.c), written from its
// documentation (git-check-ref-format(1)) and checked against the git CLI
// by the tests: bytes >= 0x80 are not examined (git takes any).
func refFormatProblem(ref string) string {
	if ref == "" {
		return "empty"
	}
	if ref == "@" {
		return "the name \"@\" alone is reserved"
	}
	components := 0
	for rest := ref; ; {
		c, after, more := strings.Cut(rest, "/")
		if why := refComponentProblem(c); why != "" {
			return why
		}
		components++
		if !more {
			break
		}
		rest = after
	}
	if ref[len(ref)-1] == '.' {
		return "it may not end with \".\""
	}
	if components < 2 {
		return "it needs at least one \"/\""
	}
	return ""
}

func refComponentProblem(c string) string {
	if c == "" {
		return "empty component (leading, trailing or doubled \"/\")"
	}
	if c[0] == '.' {
		return "a component may not start with \".\""
	}
	var last byte
	for i := 0; i < len(c); i++ {
		b := c[i]
		switch {
		case b < 0x20 || b == 0x7f:
			return "control characters are not allowed"
		case b == ' ' || b == '~' || b == '^' || b == ':' || b == '?' || b == '[' || b == '\\' || b == '*':
			return "character " + string(rune(b)) + " is not allowed (none of space ~ ^ : ? * [ \\)"
		case b == '.' && last == '.':
			return "\"..\" is not allowed"
		case b == '{' && last == '@':
			return "\"@{\" is not allowed"
		}
		last = b
	}
	if strings.HasSuffix(c, ".lock") {
		return "a component may not end with \".lock\""
	}
	return ""
}

// ZeroOID is the all-zero object id: as an expected value it means "the
// branch must not exist yet"; as a new value it means "delete".
const ZeroOID = "0000000000000000000000000000000000000000"

var oidRE = lazyre.New(`^[0-9a-f]{40}$`)

// ValidateOID checks a full lowercase hex SHA-1 object id.
func ValidateOID(what, oid string) error {
	if !oidRE.MatchString(oid) {
		return Errorf(EINVALID, "invalid %s %q: want 40 lowercase hex digits", what, oid)
	}
	return nil
}

// IsOID reports whether s is a full object id.
func IsOID(s string) bool { return oidRE.MatchString(s) }

// RefsClash reports whether refs a and b cannot both exist because one
// would be a directory of the other on disk ("refs/heads/ab" and
// "refs/heads/ab/cd"), the file/directory rule git enforces.
func RefsClash(a, b string) bool {
	if len(a) > len(b) {
		a, b = b, a
	}
	return len(b) > len(a) && b[len(a)] == '/' && b[:len(a)] == a
}
