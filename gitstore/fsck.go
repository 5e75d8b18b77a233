package gitstore

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/config"
)

// The checks in this file follow git's fsck (fsck.c, submodule-config.c),
// rewritten from its documented rules: whatever `git fsck --strict` or a
// `git clone -c transfer.fsckObjects=true` would flag is refused at
// upload. They return plain messages; callers wrap them with the object
// or path they concern.

// Git's limits for .gitattributes (attr.h): larger files and longer lines
// are fsck errors.
const (
	maxAttributesBytes = 100 << 20
	maxAttributesLine  = 2048
	// maxGitmodulesBytes bounds a .gitmodules we parse; git flags one it
	// cannot load as gitmodulesLarge.
	maxGitmodulesBytes = 1 << 20
)

// checkSpecialContent checks the content of a .gitmodules or
// .gitattributes file (see checkSpecialEntry). size is the blob size;
// data may be nil when size is over what the caller keeps in memory.
func checkSpecialContent(special string, size int64, data []byte) error {
	switch special {
	case ".gitmodules":
		if data == nil || size > maxGitmodulesBytes {
			return fmt.Errorf(".gitmodules is %d bytes, too large to check (at most %d)", size, maxGitmodulesBytes)
		}
		return checkGitmodules(data)
	case ".gitattributes":
		if data == nil || size > maxAttributesBytes {
			return fmt.Errorf(".gitattributes is %d bytes, over git's limit of %d", size, maxAttributesBytes)
		}
		return checkAttributesLines(bytes.NewReader(data))
	}
	return nil
}

// checkAttributesLines refuses a .gitattributes line of
// maxAttributesLine bytes or more (git stops reading at a NUL).
func checkAttributesLines(r io.Reader) error {
	br := bufio.NewReader(r)
	line := 0
	for {
		c, err := br.ReadByte()
		if err == io.EOF || err == nil && c == 0 {
			return nil
		}
		if err != nil {
			return err
		}
		if c == '\n' {
			line = 0
			continue
		}
		if line++; line >= maxAttributesLine {
			return fmt.Errorf(".gitattributes has a line of %d bytes or more, git's limit is %d", maxAttributesLine, maxAttributesLine-1)
		}
	}
}

// checkGitmodules applies fsck's .gitmodules rules: submodule names
// without a ".." component, URLs that are not command-line options and
// that cannot smuggle a newline or escape their host, paths that are not
// command-line options, no "!command" update. A file our config parser
// cannot read is refused (git would read it some other way).
func checkGitmodules(data []byte) (err error) {
	cfg := config.New()
	func() {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("could not parse .gitmodules")
			}
		}()
		if e := config.NewDecoder(bytes.NewReader(data)).Decode(cfg); e != nil {
			err = fmt.Errorf("could not parse .gitmodules: %v", e)
		}
	}()
	if err != nil {
		return err
	}
	for _, s := range cfg.Sections {
		if !s.IsName("submodule") {
			continue
		}
		for _, ss := range s.Subsections {
			if !submoduleNameOK(ss.Name) {
				return fmt.Errorf(".gitmodules: disallowed submodule name %q", ss.Name)
			}
			for _, o := range ss.Options {
				switch {
				case o.IsKey("url") && !submoduleURLOK(o.Value):
					return fmt.Errorf(".gitmodules: disallowed submodule url %q", o.Value)
				case o.IsKey("path") && strings.HasPrefix(o.Value, "-"):
					return fmt.Errorf(".gitmodules: disallowed submodule path %q", o.Value)
				case o.IsKey("update") && strings.HasPrefix(o.Value, "!"):
					return fmt.Errorf(".gitmodules: disallowed submodule update setting %q", o.Value)
				}
			}
		}
	}
	return nil
}

func isXSep(c byte) bool { return c == '/' || c == '\\' }

// submoduleNameOK: not empty, no ".." component ('/' or '\\' separated).
func submoduleNameOK(name string) bool {
	if name == "" {
		return false
	}
	start := 0
	for i := 0; i <= len(name); i++ {
		if i == len(name) || isXSep(name[i]) {
			if name[start:i] == ".." {
				return false
			}
			start = i + 1
		}
	}
	return true
}

// submoduleURLOK follows git's check_submodule_url.
func submoduleURLOK(u string) bool {
	if strings.HasPrefix(u, "-") {
		return false
	}
	dot := func(s string) bool { return len(s) >= 2 && s[0] == '.' && isXSep(s[1]) }
	dotdot := func(s string) bool { return len(s) >= 3 && s[0] == '.' && s[1] == '.' && isXSep(s[2]) }
	if dot(u) || dotdot(u) || strings.HasPrefix(u, "git://") {
		if strings.Contains(percentDecode(u), "\n") {
			return false
		}
		next, ups := u, 0
		for {
			if dotdot(next) {
				ups++
				next = next[3:]
			} else if dot(next) {
				next = next[2:]
			} else {
				break
			}
		}
		if ups > 0 && next != "" && (next[0] == ':' || next[0] == '/') {
			return false
		}
		return true
	}
	curl := ""
	for _, p := range []string{"http::", "https::", "ftp::", "ftps::"} {
		if strings.HasPrefix(u, p) {
			curl = u[len(p):]
		}
	}
	for _, p := range []string{"http://", "https://", "ftp://", "ftps://"} {
		if strings.HasPrefix(u, p) {
			curl = u
		}
	}
	if curl == "" {
		return true
	}
	parsed, err := url.Parse(curl)
	if err != nil || parsed.Host == "" || !strings.Contains(curl, "://") {
		return false
	}
	return !strings.Contains(percentDecode(curl), "\n")
}

// percentDecode decodes %XX sequences, leaving malformed ones as they are.
func percentDecode(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
				b.WriteByte(byte(v))
				i += 2
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// checkHeaders is fsck's verify_headers: no NUL before the end of the
// header block, which ends with "\n\n" or a final "\n".
func checkHeaders(data []byte) error {
	for i, c := range data {
		switch c {
		case 0:
			return fmt.Errorf("unterminated header: NUL at offset %d", i)
		case '\n':
			if i+1 < len(data) && data[i+1] == '\n' {
				return nil
			}
		}
	}
	if len(data) > 0 && data[len(data)-1] == '\n' {
		return nil
	}
	return fmt.Errorf("unterminated header")
}

// hexLine parses "<40 hex>\n" at the start of b.
func hexLine(b []byte) ([]byte, bool) {
	if len(b) < 41 || b[40] != '\n' {
		return b, false
	}
	for _, c := range b[:40] {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return b, false
		}
	}
	return b[41:], true
}

// checkCommitObject applies fsck_commit: tree, parent, exactly one
// author and a committer line, each ident well formed; no NUL anywhere.
func checkCommitObject(data []byte) error {
	_, _, err := checkCommitLinks(data, nil)
	return err
}

// checkCommitLinks is checkCommitObject returning the commit's tree and
// its parents (appended to parents). They are what object.Commit.Decode
// reads from a commit that passes: the first line's tree and the parent
// lines right after it (go-git, like git, ignores "tree" and "parent"
// headers anywhere else), lowercase hex only, so receiving a pack decodes
// each commit once (TestCommitLinksMatchGoGit).
func checkCommitLinks(data []byte, parents []plumbing.Hash) (plumbing.Hash, []plumbing.Hash, error) {
	var tree plumbing.Hash
	if err := checkHeaders(data); err != nil {
		return tree, parents, err
	}
	b, ok := bytes.CutPrefix(data, []byte("tree "))
	if !ok {
		return tree, parents, fmt.Errorf("invalid format - expected 'tree' line")
	}
	if b, ok = hexLine(b); !ok {
		return tree, parents, fmt.Errorf("invalid 'tree' line format - bad sha1")
	}
	hex.Decode(tree[:], data[len("tree "):len("tree ")+40])
	for {
		rest, ok := bytes.CutPrefix(b, []byte("parent "))
		if !ok {
			break
		}
		if b, ok = hexLine(rest); !ok {
			return tree, parents, fmt.Errorf("invalid 'parent' line format - bad sha1")
		}
		var p plumbing.Hash
		hex.Decode(p[:], rest[:40])
		parents = append(parents, p)
	}
	if err := checkCommitRest(data, b); err != nil {
		return tree, parents, err
	}
	return tree, parents, nil
}

// checkCommitRest checks what follows a commit's parent lines (b):
// exactly one author, a committer, no NUL in data.
func checkCommitRest(data, b []byte) error {
	authors := 0
	for {
		rest, ok := bytes.CutPrefix(b, []byte("author "))
		if !ok {
			break
		}
		authors++
		var err error
		if b, err = checkIdent(rest); err != nil {
			return err
		}
	}
	switch {
	case authors == 0:
		return fmt.Errorf("invalid format - expected 'author' line")
	case authors > 1:
		return fmt.Errorf("invalid format - multiple 'author' lines")
	}
	rest, ok := bytes.CutPrefix(b, []byte("committer "))
	if !ok {
		return fmt.Errorf("invalid format - expected 'committer' line")
	}
	if _, err := checkIdent(rest); err != nil {
		return err
	}
	if bytes.IndexByte(data, 0) >= 0 {
		return fmt.Errorf("NUL byte in the commit object body")
	}
	return nil
}

// checkIdent applies fsck_ident to "Name <email> 1234567890 +0000\n" and
// returns what follows the line.
func checkIdent(b []byte) ([]byte, error) {
	nl := bytes.IndexByte(b, '\n')
	if nl < 0 {
		return nil, fmt.Errorf("invalid author/committer line - missing end of line")
	}
	line, after := b[:nl], b[nl+1:]
	if len(line) > 0 && line[0] == '<' {
		return nil, fmt.Errorf("invalid author/committer line - missing space before email")
	}
	lt := bytes.IndexAny(line, "<>")
	switch {
	case lt < 0:
		return nil, fmt.Errorf("invalid author/committer line - missing email")
	case line[lt] == '>':
		return nil, fmt.Errorf("invalid author/committer line - bad name")
	case lt == 0 || line[lt-1] != ' ':
		return nil, fmt.Errorf("invalid author/committer line - missing space before email")
	}
	p := line[lt+1:]
	gt := bytes.IndexAny(p, "<>")
	if gt < 0 || p[gt] == '<' {
		return nil, fmt.Errorf("invalid author/committer line - bad email")
	}
	p = p[gt+1:]
	if len(p) == 0 || p[0] != ' ' {
		return nil, fmt.Errorf("invalid author/committer line - missing space before date")
	}
	p = bytes.TrimLeft(p[1:], " \t")
	if len(p) == 0 || p[0] < '0' || p[0] > '9' {
		return nil, fmt.Errorf("invalid author/committer line - bad date")
	}
	if p[0] == '0' && (len(p) < 2 || p[1] != ' ') {
		return nil, fmt.Errorf("invalid author/committer line - zero-padded date")
	}
	i := 0
	for i < len(p) && p[i] >= '0' && p[i] <= '9' {
		i++
	}
	// git's timestamps are unsigned 64-bit, and dates must fit what
	// its date code can print (date_overflows): below 2^63.
	if _, err := strconv.ParseInt(string(p[:i]), 10, 64); err != nil {
		return nil, fmt.Errorf("invalid author/committer line - date causes integer overflow")
	}
	p = p[i:]
	if len(p) != 6 || p[0] != ' ' || (p[1] != '+' && p[1] != '-') {
		return nil, fmt.Errorf("invalid author/committer line - bad time zone")
	}
	for _, c := range p[2:] {
		if c < '0' || c > '9' {
			return nil, fmt.Errorf("invalid author/committer line - bad time zone")
		}
	}
	return after, nil
}

// checkTagObject applies fsck_tag: object, type, tag (a valid ref name
// under refs/tags/) and tagger lines, optional gpgsig, no other header.
func checkTagObject(data []byte) error {
	if err := checkHeaders(data); err != nil {
		return err
	}
	b, ok := bytes.CutPrefix(data, []byte("object "))
	if !ok {
		return fmt.Errorf("invalid format - expected 'object' line")
	}
	if b, ok = hexLine(b); !ok {
		return fmt.Errorf("invalid 'object' line format - bad sha1")
	}
	if b, ok = bytes.CutPrefix(b, []byte("type ")); !ok {
		return fmt.Errorf("invalid format - expected 'type' line")
	}
	typ, b, ok := bytes.Cut(b, []byte("\n"))
	if !ok {
		return fmt.Errorf("invalid format - unexpected end after 'type' line")
	}
	switch string(typ) {
	case "commit", "tree", "blob", "tag":
	default:
		return fmt.Errorf("invalid 'type' value")
	}
	if b, ok = bytes.CutPrefix(b, []byte("tag ")); !ok {
		return fmt.Errorf("invalid format - expected 'tag' line")
	}
	name, b, ok := bytes.Cut(b, []byte("\n"))
	if !ok {
		return fmt.Errorf("invalid format - unexpected end after 'tag' line")
	}
	if !refNameOK("refs/tags/" + string(name)) {
		return fmt.Errorf("invalid 'tag' name: %q", name)
	}
	rest, ok := bytes.CutPrefix(b, []byte("tagger "))
	if !ok {
		// Early tags have no tagger: a warning, an error under --strict.
		return fmt.Errorf("invalid format - expected 'tagger' line")
	}
	var err error
	if b, err = checkIdent(rest); err != nil {
		return err
	}
	if rest, ok := bytes.CutPrefix(b, []byte("gpgsig ")); ok {
		b = rest
	} else if rest, ok := bytes.CutPrefix(b, []byte("gpgsig-sha256 ")); ok {
		b = rest
	} else {
		goto end
	}
	if _, b, ok = bytes.Cut(b, []byte("\n")); !ok {
		return fmt.Errorf("invalid format - unexpected end after 'gpgsig' line")
	}
	for len(b) > 0 && b[0] == ' ' {
		if _, b, ok = bytes.Cut(b, []byte("\n")); !ok {
			return fmt.Errorf("invalid format - unexpected end in 'gpgsig' continuation line")
		}
	}
end:
	if len(b) > 0 && b[0] != '\n' {
		return fmt.Errorf("invalid format - extra header(s) after 'tagger'")
	}
	return nil
}

// refNameOK is git's check_refname_format without options, for the tag
// names inside tag objects.
func refNameOK(name string) bool {
	if name == "" || name == "@" || strings.HasSuffix(name, ".") || strings.HasSuffix(name, "/") ||
		strings.Contains(name, "..") || strings.Contains(name, "@{") || strings.Contains(name, "//") {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c < 0x20 || c == 0x7f || strings.IndexByte(" ~^:?*[\\", c) >= 0 {
			return false
		}
	}
	for _, comp := range strings.Split(name, "/") {
		if comp == "" || comp[0] == '.' || strings.HasSuffix(comp, ".lock") {
			return false
		}
	}
	return true
}
