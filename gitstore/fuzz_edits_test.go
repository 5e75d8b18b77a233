package gitstore

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/lockstep-hq/lockstep"
)

// FuzzEdits drives the object-store half of the edits route (POST
// /repos/{repo}/edits, MCP file_write and files_edit: EditTree, then
// WriteObjects, WriteCommit and the ref move's CheckRootTree) with
// generated trees: paths (one per line), a file's content and size, a
// .gitmodules and a .gitattributes. Whatever it accepts must pass
// `git fsck --strict` and check out with git; whatever it refuses is
// refused with invalid_argument, too_large or not_found, never an
// internal error. (It lives here, not in web or repositories: a fuzzing
// build of those instruments SQLite, pgx and gin and takes minutes.)
func FuzzEdits(f *testing.F) {
	mod := func(extra string) string {
		return "[submodule \"lib\"]\n\tpath = lib\n\turl = https://example.com/lib.git\n" + extra
	}
	f.Add("a.txt\nsrc/main.go", []byte("hello\n"), "", "", uint16(0), false)
	f.Add("bin/run", []byte("#!/bin/sh\n"), mod(""), "*.go text eol=lf\n", uint16(0), true)
	f.Add("x", []byte("x"), mod("\tupdate = !sh -c id\n"), "", uint16(0), false)
	f.Add("x", []byte("x"), "[submodule \"lib\"]\n\turl = -oProxyCommand=touch /tmp/pwned\n", "", uint16(0), false)
	f.Add("x", []byte("x"), "[submodule \"../../x\"]\n\turl = ./x\n", "", uint16(0), false)
	f.Add("x", []byte("x"), "", "*.txt text", uint16(2100), false)
	f.Add(".GIT/config\ngit~1/x", []byte("[core]\n"), "", "", uint16(0), false)
	f.Add(strings.Repeat("n", 255)+"/ok\n"+strings.Repeat("n", 256), []byte("x"), "", "", uint16(0), false)
	f.Add("a\na/b", []byte("x"), "", "", uint16(0), false)
	f.Add("big", []byte("0123456789"), "", "", uint16(60000), false)
	f.Fuzz(func(t *testing.T, paths string, content []byte, modules, attrs string, size uint16, executable bool) {
		if int(size) > len(content) && len(content) > 0 {
			content = bytes.Repeat(content, int(size)/len(content)+1)[:size]
		}
		var edits []TreeEdit
		for i, p := range strings.Split(paths, "\n") {
			if i == 6 {
				break
			}
			edits = append(edits, TreeEdit{Path: p, Content: content, Executable: executable})
		}
		if modules != "" {
			edits = append(edits, TreeEdit{Path: ".gitmodules", Content: []byte(modules)})
		}
		if attrs != "" {
			if size > 0 {
				attrs = strings.Repeat("a", int(size)) + " " + attrs // a long line
			}
			edits = append(edits, TreeEdit{Path: ".gitattributes", Content: []byte(attrs)})
		}
		desc := func() string {
			return fmt.Sprintf("paths %q (%d bytes each), .gitmodules %q, .gitattributes %.200q", paths, len(content), modules, attrs)
		}
		n, err := Open(filepath.Join(t.TempDir(), "net.git"), Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer n.Close()
		commit, err := func() (plumbing.Hash, error) {
			tree, objs, err := n.EditTree(plumbing.ZeroHash, edits, Limits{MaxUploadBytes: 1 << 20, MaxFileBytes: 256 << 10, MaxFiles: 16})
			if err != nil {
				return plumbing.ZeroHash, err
			}
			if _, err := n.WriteObjects(objs); err != nil {
				return plumbing.ZeroHash, err
			}
			sig := object.Signature{Name: "fuzz", Email: "fuzz@lockstep.local", When: time.Unix(1700000000, 0)}
			c, _, err := n.WriteCommit(CommitSpec{Tree: tree, Author: sig, Committer: sig, Message: "edit\n"})
			if err != nil {
				return plumbing.ZeroHash, err
			}
			return c, n.CheckRootTree(tree)
		}()
		if err != nil {
			switch lockstep.ErrorCode(err) {
			case lockstep.EINVALID, lockstep.ETOOLARGE, lockstep.ENOTFOUND:
				return
			}
			t.Fatalf("edits %s: %v (%s)", desc(), err, lockstep.ErrorCode(err))
		}
		for _, e := range edits {
			for _, c := range strings.Split(e.Path, "/") {
				if len(c) > MaxNameBytes {
					t.Fatalf("accepted %q: a component of %d bytes", e.Path, len(c))
				}
			}
		}
		work := t.TempDir()
		run := func(args ...string) {
			cmd := exec.Command("git", args...)
			cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+work, "GIT_DIR="+n.Dir(),
				"GIT_WORK_TREE="+filepath.Join(work, "w"), "GIT_INDEX_FILE="+filepath.Join(work, "index"))
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("accepted edits %s, but git %s: %v\n%s", desc(), strings.Join(args, " "), err, out)
			}
		}
		run("fsck", "--strict", "--no-dangling")
		if err := os.Mkdir(filepath.Join(work, "w"), 0o755); err != nil {
			t.Fatal(err)
		}
		run("read-tree", commit.String())
		run("checkout-index", "-a")
	})
}
