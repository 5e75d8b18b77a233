package gitstore

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/lockstep-hq/lockstep"
)

// MaxPathBytes bounds the length of a path in a tree (git fsck flags
// longer names as largePathname).
const MaxPathBytes = 4096

// MaxNameBytes bounds one path component (a tree entry name): 255 bytes,
// the NAME_MAX of the filesystems a checkout lands on. git stores longer
// names, but no clone or `lockstep checkout` can write them.
const MaxNameBytes = 255

// ValidatePath checks that p is a clean relative path that may appear in
// a Lockstep tree: non-empty, valid UTF-8 without NUL, not absolute, no
// empty, "." or ".." components, at most MaxPathBytes bytes (each
// component at most MaxNameBytes), and no
// component that git refuses (see validateComponent: ".git" and every name
// that NTFS or HFS+ resolve to it, ".git::$INDEX_ALLOCATION", "git~1",
// ".g\u200cit", ...). A directory component may not be ".gitmodules" or
// ".gitattributes" (or a look-alike): git fsck requires those to be files.
// It returns an invalid_argument error naming the path and the broken
// rule. The client scanner and every upload path apply the same rules.
func ValidatePath(p string) error {
	if p == "" {
		return lockstep.Errorf(lockstep.EINVALID, "empty path")
	}
	if len(p) > MaxPathBytes {
		return lockstep.Errorf(lockstep.EINVALID, "path %.64q…: longer than %d bytes", p, MaxPathBytes)
	}
	if strings.IndexByte(p, 0) >= 0 {
		return lockstep.Errorf(lockstep.EINVALID, "path %q: contains a NUL byte", p)
	}
	if !utf8.ValidString(p) {
		return lockstep.Errorf(lockstep.EINVALID, "path %q: not valid UTF-8", p)
	}
	if p[0] == '/' {
		return lockstep.Errorf(lockstep.EINVALID, "path %q: absolute path", p)
	}
	rest := p
	for {
		i := strings.IndexByte(rest, '/')
		c := rest
		if i >= 0 {
			c = rest[:i]
		}
		if err := validateComponent(c); err != nil {
			return lockstep.Errorf(lockstep.EINVALID, "path %q: %s", p, err.Message)
		}
		if i < 0 {
			return nil
		}
		if s := specialFile(c); s == ".gitmodules" || s == ".gitattributes" {
			return lockstep.Errorf(lockstep.EINVALID, "path %q: directory %q: %s must be a regular file", p, c, s)
		}
		rest = rest[i+1:]
	}
}

// validateComponent checks one path component (a tree entry name) against
// the name rules of git fsck (fsck_tree: emptyName, hasDot, hasDotdot,
// hasDotgit with its HFS+ and NTFS variants, fullPathname,
// largePathname), plus ours: at most MaxNameBytes bytes, valid UTF-8,
// and ".git" followed by any Unicode space (".git\u00a0") is refused too.
func validateComponent(c string) *lockstep.Error {
	switch {
	case c == "":
		return lockstep.Errorf(lockstep.EINVALID, "empty path component")
	case c == ".":
		return lockstep.Errorf(lockstep.EINVALID, `"." component`)
	case c == "..":
		return lockstep.Errorf(lockstep.EINVALID, `".." component (path traversal)`)
	case len(c) > MaxNameBytes:
		return lockstep.Errorf(lockstep.EINVALID, "name of %d bytes: a path component may be at most %d bytes (a checkout could not create it)", len(c), MaxNameBytes)
	case strings.IndexByte(c, 0) >= 0:
		return lockstep.Errorf(lockstep.EINVALID, "NUL byte in name")
	case strings.IndexByte(c, '/') >= 0:
		return lockstep.Errorf(lockstep.EINVALID, `"/" in name`)
	case !utf8.ValidString(c):
		return lockstep.Errorf(lockstep.EINVALID, "name is not valid UTF-8")
	case isDotGit(c):
		return lockstep.Errorf(lockstep.EINVALID, "%q component is reserved (git, NTFS or HFS+ read it as .git)", c)
	}
	return nil
}

// isDotGit reports whether a tree entry name is, or is read by some
// filesystem as, ".git": git's HFS+ rule (ignorable code points, ASCII
// case folding), its NTFS rule (trailing dots and spaces, alternate data
// streams after ':', the short name "git~1", and each part after a
// backslash, which Windows reads as a separator), and our own look-alike
// rule.
func isDotGit(c string) bool {
	if isHFSDot(c, "git") || isNTFSDotGit(c) || looksLikeDotGit(c) {
		return true
	}
	for i := strings.IndexByte(c, '\\'); i >= 0; {
		c = c[i+1:]
		if isNTFSDotGit(c) {
			return true
		}
		i = strings.IndexByte(c, '\\')
	}
	return false
}

// specialFile returns which of the files git fsck treats specially
// (".gitmodules", ".gitattributes", ".gitignore", ".mailmap") the name
// c is or aliases on HFS+ or NTFS, or "".
func specialFile(c string) string {
	// Fast path (every tree entry of a push comes here): an alias starts
	// with '.', an HFS+ ignorable (non-ASCII), or an NTFS short name
	// ("gi7eba~1", "gitmod~1", "maba30~1", "~1…"), unless a backslash
	// makes a later part the name. specialFileSlow decides the rest.
	if c == "" {
		return ""
	}
	switch b := c[0]; {
	case b|0x20 == 'g', b|0x20 == 'm':
		// From an ASCII letter, only an NTFS short name ("gitmod~1",
		// "gi7eba~1", "maba30~1"): a '~' in the first 8 bytes ("go.mod",
		// "main.go" and the like are common entry names).
		if strings.IndexByte(c[:min(len(c), 8)], '~') < 0 && strings.IndexByte(c, '\\') < 0 {
			return ""
		}
	case b == '.', b == '~', b >= utf8.RuneSelf:
	default:
		if strings.IndexByte(c, '\\') < 0 {
			return ""
		}
	}
	return specialFileSlow(c)
}

// specialFileSlow is specialFile without its fast path.
func specialFileSlow(c string) string {
	for _, s := range []struct{ name, short, dotted string }{
		{"gitmodules", "gi7eba", ".gitmodules"}, {"gitattributes", "gi7d29", ".gitattributes"},
		{"gitignore", "gi250a", ".gitignore"}, {"mailmap", "maba30", ".mailmap"},
	} {
		if isHFSDot(c, s.name) || isNTFSDotGeneric(c, s.name, s.short) {
			return s.dotted // a constant: no string built per entry
		}
	}
	// fsck also reads the part after each backslash as a name on NTFS
	// (for .gitmodules).
	for i := strings.IndexByte(c, '\\'); i >= 0; {
		c = c[i+1:]
		if isNTFSDotGeneric(c, "gitmodules", "gi7eba") {
			return ".gitmodules"
		}
		i = strings.IndexByte(c, '\\')
	}
	return ""
}

// hfsIgnorable reports the code points HFS+ drops from names (zero-width
// joiners, direction marks and overrides, the byte-order mark).
func hfsIgnorable(r rune) bool {
	switch {
	case r >= 0x200c && r <= 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x206a && r <= 0x206f, r == 0xfeff:
		return true
	}
	return false
}

// isHFSDot reports whether HFS+ reads name as "." followed by needle (an
// ASCII lower-case word): ignorable code points are skipped, ASCII letters
// compared without case; the name ends there or at a '/'. A malformed
// UTF-8 sequence counts as the end of the name (as in git).
func isHFSDot(name, needle string) bool {
	i := 0
	next := func() rune {
		for i < len(name) {
			r, size := utf8.DecodeRuneInString(name[i:])
			if r == utf8.RuneError && size <= 1 {
				i = len(name)
				return 0
			}
			i += size
			if !hfsIgnorable(r) {
				return r
			}
		}
		return 0
	}
	if next() != '.' {
		return false
	}
	for j := 0; j < len(needle); j++ {
		r := next()
		if r > 127 || asciiLower(byte(r)) != needle[j] {
			return false
		}
	}
	r := next()
	return r == 0 || r == '/'
}

// isNTFSDotGit reports whether NTFS reads name as ".git": ".git" or its
// short name "git~1" (any case), then only dots and spaces up to the end,
// a separator ('/' or '\\') or ':' (an alternate data stream such as
// "::$INDEX_ALLOCATION").
func isNTFSDotGit(name string) bool {
	var rest string
	switch {
	case len(name) >= 4 && name[0] == '.' && asciiEqualFold(name[1:4], "git"):
		rest = name[4:]
	case len(name) >= 5 && asciiEqualFold(name[:3], "git") && name[3:5] == "~1":
		rest = name[5:]
	default:
		return false
	}
	for i := 0; i < len(rest); i++ {
		switch rest[i] {
		case '/', '\\', ':':
			return true
		case '.', ' ':
		default:
			return false
		}
	}
	return true
}

// isNTFSDotGeneric reports whether NTFS reads name as "." + needle: the
// name itself, its regular 8.3 short name (first six letters, "~1" to
// "~4") or its fall-back short name (shortPrefix, derived from a hash of
// the name, then "~" and digits), each followed only by dots and spaces
// up to the end or a ':'.
func isNTFSDotGeneric(name, needle, shortPrefix string) bool {
	onlySpacesAndPeriods := func(i int) bool {
		for ; i < len(name); i++ {
			switch name[i] {
			case ':':
				return true
			case ' ', '.':
			default:
				return false
			}
		}
		return true
	}
	if len(name) > len(needle) && name[0] == '.' && asciiEqualFold(name[1:1+len(needle)], needle) {
		return onlySpacesAndPeriods(1 + len(needle))
	}
	if len(name) >= 8 && asciiEqualFold(name[:6], needle[:6]) && name[6] == '~' && name[7] >= '1' && name[7] <= '4' {
		return onlySpacesAndPeriods(8)
	}
	sawTilde := false
	i := 0
	for ; i < 8; i++ {
		if i >= len(name) {
			return false
		}
		c := name[i]
		switch {
		case sawTilde:
			if c < '0' || c > '9' {
				return false
			}
		case c == '~':
			i++
			if i >= len(name) || name[i] < '1' || name[i] > '9' {
				return false
			}
			sawTilde = true
		case i >= 6, c&0x80 != 0, asciiLower(c) != shortPrefix[i]:
			return false
		}
	}
	return onlySpacesAndPeriods(i)
}

// looksLikeDotGit is our own rule on top of git's: ".git" with ignorable
// code points anywhere and trailing Unicode spaces, dots or ignorables
// (".git\u00a0", ".GIT\u2003") is refused too: some tools and
// filesystems trim or fold them.
func looksLikeDotGit(name string) bool {
	if name == "" || name[0] != '.' && name[0] < utf8.RuneSelf {
		return false // fast path: must start with '.' or an ignorable
	}
	var b strings.Builder
	for _, r := range name {
		if !hfsIgnorable(r) {
			b.WriteRune(r)
		}
	}
	t := strings.TrimRightFunc(b.String(), func(r rune) bool { return r == '.' || unicode.IsSpace(r) })
	return asciiEqualFold(t, ".git")
}

func asciiLower(c byte) byte {
	if c >= 'A' && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

func asciiEqualFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		if asciiLower(a[i]) != asciiLower(b[i]) {
			return false
		}
	}
	return true
}

// checkSymlinkTarget applies the rules every symlink target must obey on
// its own: not empty, no NUL, not absolute.
func checkSymlinkTarget(path, target string) error {
	switch {
	case target == "":
		return lockstep.Errorf(lockstep.EINVALID, "symlink %q: empty target", path)
	case strings.IndexByte(target, 0) >= 0:
		return lockstep.Errorf(lockstep.EINVALID, "symlink %q: NUL byte in target", path)
	case target[0] == '/':
		return lockstep.Errorf(lockstep.EINVALID, "symlink %q: absolute target %q", path, target)
	}
	return nil
}

// checkSymlinkName refuses symlinks that git fsck flags
// (gitmodulesSymlink, gitattributesSymlink, gitignoreSymlink,
// mailmapSymlink, including their HFS+/NTFS aliases): these files must be
// regular files.
func checkSymlinkName(path string) error {
	name := path[strings.LastIndexByte(path, '/')+1:]
	if s := specialFile(name); s != "" {
		return lockstep.Errorf(lockstep.EINVALID, "symlink %q: %s must be a regular file", path, s)
	}
	return nil
}

// checkSpecialEntry applies fsck's rules for an entry of the given kind
// ("file", "symlink", "directory", "submodule") named name at path:
// .gitmodules and .gitattributes (and aliases) must be regular files;
// .gitignore and .mailmap must not be symlinks. It returns the special
// name when the file's content must be checked too (checkSpecialContent).
func checkSpecialEntry(path, name, kind string) (string, error) {
	s := specialFile(name)
	if s == "" {
		return "", nil
	}
	switch kind {
	case "file":
		if s == ".gitmodules" || s == ".gitattributes" {
			return s, nil
		}
		return "", nil
	case "symlink":
		return "", lockstep.Errorf(lockstep.EINVALID, "symlink %q: %s must be a regular file", path, s)
	}
	if s == ".gitmodules" || s == ".gitattributes" {
		return "", lockstep.Errorf(lockstep.EINVALID, "%s %q: %s must be a regular file", kind, path, s)
	}
	return "", nil
}
