package gitstore

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/lockstep-hq/lockstep"
)

// TestEditTreeMatchesGit applies edits to a stored tree and compares the
// result with git's write-tree of the same directory edited on disk.
func TestEditTreeMatchesGit(t *testing.T) {
	files := map[string]string{"README.md": "# hi\n", "src/a.go": "package a\n", "src/b.go": "package b\n",
		"src/deep/x/y.txt": "y\n", "docs/only.md": "only\n", "src.txt": "dot\n"}
	var entries []tarEntry
	for p, b := range files {
		entries = append(entries, tarEntry{Name: p, Body: b})
	}
	in, err := IngestTar(context.Background(), bytes.NewReader(makeTar(t, entries)), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	n := MustOpen(t)
	if _, err := n.WriteObjects(in.Objects); err != nil {
		t.Fatal(err)
	}
	edits := []TreeEdit{
		{Path: "src/a.go", Content: []byte("package a // changed\n")},
		{Path: "src/new/n.go", Content: []byte("package n\n")},
		{Path: "run.sh", Content: []byte("#!/bin/sh\n"), Executable: true},
		{Path: "docs/only.md", Delete: true},    // leaves docs/ empty: it disappears
		{Path: "src/deep", Delete: true},        // a whole directory
		{Path: "tmp.txt", Content: []byte("x")}, // written then deleted
		{Path: "tmp.txt", Delete: true},
		{Path: "empty", Content: nil},
	}
	tree, objs, err := n.EditTree(in.Tree, edits, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.WriteObjects(objs); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	for p, b := range files {
		os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755)
		os.WriteFile(filepath.Join(dir, p), []byte(b), 0o644)
	}
	for _, e := range edits {
		p := filepath.Join(dir, e.Path)
		if e.Delete {
			os.RemoveAll(p)
			continue
		}
		os.MkdirAll(filepath.Dir(p), 0o755)
		mode := os.FileMode(0o644)
		if e.Executable {
			mode = 0o755
		}
		os.WriteFile(p, e.Content, mode)
		os.Chmod(p, mode)
	}
	git(t, dir, nil, "init", "-q")
	git(t, dir, nil, "add", "-A")
	want := strings.TrimSpace(git(t, dir, nil, "write-tree"))
	if tree.String() != want {
		t.Fatalf("edited tree %s, git write-tree %s\nours:\n%s", tree, want, git(t, n.Dir(), nil, "--git-dir="+n.Dir(), "ls-tree", "-r", tree.String()))
	}
	git(t, n.Dir(), nil, "--git-dir="+n.Dir(), "fsck", "--strict", "--no-dangling")

	// Deleting everything gives the empty tree; editing an empty base works.
	empty, objs, err := n.EditTree(plumbing.ZeroHash, []TreeEdit{{Path: "a/b", Content: []byte("1")}, {Path: "a", Delete: true}}, Limits{})
	if err != nil || empty.String() != "4b825dc642cb6eb9a060e54bf8d69288fbee4904" || len(objs) == 0 {
		t.Fatalf("all deleted: %s %v (%d objects)", empty, err, len(objs))
	}
}

func TestEditTreeRefuses(t *testing.T) {
	n := MustOpen(t)
	base, objs, err := n.EditTree(plumbing.ZeroHash, []TreeEdit{{Path: "dir/file", Content: []byte("x")}, {Path: "file", Content: []byte("f")}}, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.WriteObjects(objs); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		e    TreeEdit
		lim  Limits
		code string
	}{
		{"traversal", TreeEdit{Path: "../x", Content: []byte("x")}, Limits{}, lockstep.EINVALID},
		{"absolute", TreeEdit{Path: "/etc/passwd", Content: []byte("x")}, Limits{}, lockstep.EINVALID},
		{"dot git", TreeEdit{Path: "a/.git/config", Content: []byte("x")}, Limits{}, lockstep.EINVALID},
		{"through a file", TreeEdit{Path: "file/x", Content: []byte("x")}, Limits{}, lockstep.EINVALID},
		{"onto a directory", TreeEdit{Path: "dir", Content: []byte("x")}, Limits{}, lockstep.EINVALID},
		{"delete missing", TreeEdit{Path: "nope", Delete: true}, Limits{}, lockstep.ENOTFOUND},
		{"delete below a file", TreeEdit{Path: "file/x", Delete: true}, Limits{}, lockstep.EINVALID},
		{"delete in missing dir", TreeEdit{Path: "no/x", Delete: true}, Limits{}, lockstep.ENOTFOUND},
		{"file too large", TreeEdit{Path: "big", Content: make([]byte, 11)}, Limits{MaxFileBytes: 10}, lockstep.ETOOLARGE},
	} {
		_, _, err := n.EditTree(base, []TreeEdit{tc.e}, tc.lim)
		if lockstep.ErrorCode(err) != tc.code {
			t.Errorf("%s: got %v, want %s", tc.name, err, tc.code)
		}
	}
	if _, _, err := n.EditTree(base, make([]TreeEdit, 3), Limits{MaxFiles: 2}); lockstep.ErrorCode(err) != lockstep.ETOOLARGE {
		t.Errorf("too many edits: %v", err)
	}
}
