package repo

import (
	"strings"
	"unicode/utf8"

	"github.com/lockstep-hq/lockstep"
)

// MaxPathBytes bounds the length of a path in a tree.
const MaxPathBytes = 4096

// ValidatePath checks that p is a clean relative path that may appear in
// a Lockstep tree: non-empty, valid UTF-8 without NUL, not absolute, no
// empty, "." or ".." components, no ".git" component in any letter case
// (also not as ".git." / ".git " or the NTFS short name "git~1", which some
// filesystems resolve to ".git"), at most MaxPathBytes bytes. It returns an
// invalid_argument error naming the path and the broken rule. The client
// scanner and the smart-HTTP push apply the same rules.
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
	for c := range strings.SplitSeq(p, "/") {
		if err := validateComponent(c); err != nil {
			return lockstep.Errorf(lockstep.EINVALID, "path %q: %s", p, err.Message)
		}
	}
	return nil
}

// validateComponent checks one path component (a tree entry name).
func validateComponent(c string) *lockstep.Error {
	switch {
	case c == "":
		return lockstep.Errorf(lockstep.EINVALID, "empty path component")
	case c == ".":
		return lockstep.Errorf(lockstep.EINVALID, `"." component`)
	case c == "..":
		return lockstep.Errorf(lockstep.EINVALID, `".." component (path traversal)`)
	case strings.IndexByte(c, 0) >= 0:
		return lockstep.Errorf(lockstep.EINVALID, "NUL byte in name")
	case strings.IndexByte(c, '/') >= 0:
		return lockstep.Errorf(lockstep.EINVALID, `"/" in name`)
	case !utf8.ValidString(c):
		return lockstep.Errorf(lockstep.EINVALID, "name is not valid UTF-8")
	case isDotGit(c):
		return lockstep.Errorf(lockstep.EINVALID, "%q component is reserved", c)
	}
	return nil
}

func isDotGit(c string) bool {
	t := strings.TrimRight(c, ". ")
	return strings.EqualFold(t, ".git") || strings.EqualFold(c, "git~1")
}

// escapesLexically reports whether target, taken relative to the
// directory dir (slash-separated, "" for the root), leaves the root.
// It also returns the resolved components.
func resolveLexically(dir []string, target string) ([]string, bool) {
	stack := append([]string(nil), dir...)
	for c := range strings.SplitSeq(target, "/") {
		switch c {
		case "", ".":
		case "..":
			if len(stack) == 0 {
				return nil, true
			}
			stack = stack[:len(stack)-1]
		default:
			stack = append(stack, c)
		}
	}
	return stack, false
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

// checkSymlinkName refuses symlinks that git itself refuses to check out
// or that git fsck flags (gitmodulesSymlink, gitattributesSymlink,
// gitignoreSymlink, mailmapSymlink): these files must be regular files.
func checkSymlinkName(path string) error {
	name := path[strings.LastIndexByte(path, '/')+1:]
	t := strings.TrimRight(name, ". ")
	for _, reserved := range []string{".gitmodules", ".gitattributes", ".gitignore", ".mailmap"} {
		if strings.EqualFold(t, reserved) {
			return lockstep.Errorf(lockstep.EINVALID, "symlink %q: %s must be a regular file", path, reserved)
		}
	}
	return nil
}
