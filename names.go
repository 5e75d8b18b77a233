package lockstep

import (
	"regexp"
	"strings"
)

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,99}$`)

// ValidateName checks a repository, workspace or branch-component name
// against the contract's rule `[a-z0-9][a-z0-9._-]{0,99}`. what names the
// field in the error message ("repository name", "branch").
func ValidateName(what, name string) error {
	if !nameRE.MatchString(name) || strings.Contains(name, "..") || strings.HasSuffix(name, ".lock") {
		return Errorf(EINVALID, "invalid %s %q: want [a-z0-9][a-z0-9._-]{0,99}, no \"..\", not ending in .lock", what, name)
	}
	return nil
}

var branchRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$`)

// ValidateBranch checks a branch name: git-valid, no "..", no "//", no
// component starting with "." or ending with ".lock".
func ValidateBranch(name string) error {
	bad := !branchRE.MatchString(name) || strings.Contains(name, "..") || strings.Contains(name, "//") ||
		strings.HasSuffix(name, "/") || strings.HasSuffix(name, ".lock") || strings.Contains(name, "/.") ||
		strings.Contains(name, ".lock/") || strings.Contains(name, "@{")
	if bad {
		return Errorf(EINVALID, "invalid branch name %q", name)
	}
	return nil
}

// ZeroOID is the all-zero object id: as an expected value it means "the
// branch must not exist yet"; as a new value it means "delete".
const ZeroOID = "0000000000000000000000000000000000000000"

var oidRE = regexp.MustCompile(`^[0-9a-f]{40}$`)

// ValidateOID checks a full lowercase hex SHA-1 object id.
func ValidateOID(what, oid string) error {
	if !oidRE.MatchString(oid) {
		return Errorf(EINVALID, "invalid %s %q: want 40 lowercase hex digits", what, oid)
	}
	return nil
}

// IsOID reports whether s is a full object id.
func IsOID(s string) bool { return oidRE.MatchString(s) }
