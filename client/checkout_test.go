package client_test

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockstep-hq/lockstep/client"
)

type tarEntry struct {
	name, link, body string
	typ              byte
}

func mkTar(t *testing.T, es ...tarEntry) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range es {
		h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: 0o644, Size: int64(len(e.body))}
		if e.typ != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if e.typ == tar.TypeReg {
			tw.Write([]byte(e.body))
		}
	}
	tw.Close()
	return &buf
}

// An archive cannot write outside the directory: not by name, and not
// through a symlink it created itself (a file under "out" after
// "out -> <elsewhere>" would land in elsewhere).
func TestExtractTarStaysInside(t *testing.T) {
	outside := t.TempDir()
	for _, tc := range []struct {
		name string
		es   []tarEntry
		want string
	}{
		{"dotdot", []tarEntry{{name: "../x", body: "x", typ: tar.TypeReg}}, "escapes"},
		{"absolute", []tarEntry{{name: "/tmp/x", body: "x", typ: tar.TypeReg}}, "escapes"},
		{"under own symlink", []tarEntry{{name: "out", link: outside, typ: tar.TypeSymlink}, {name: "out/pwned", body: "x", typ: tar.TypeReg}}, "under the symlink"},
		{"deep under own symlink", []tarEntry{{name: "a/out", link: outside, typ: tar.TypeSymlink}, {name: "a/out/b/pwned", body: "x", typ: tar.TypeReg}}, "under the symlink"},
		{"hard link", []tarEntry{{name: "h", link: "/etc/passwd", typ: tar.TypeLink}}, "unsupported type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			_, err := client.ExtractTar(mkTar(t, tc.es...), dir)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to say %q", err, tc.want)
			}
		})
	}
	ents, _ := os.ReadDir(outside)
	if len(ents) != 0 {
		t.Fatalf("an archive wrote outside its directory: %v", ents)
	}
}

func TestExtractTarWritesTree(t *testing.T) {
	dir := t.TempDir()
	n, err := client.ExtractTar(mkTar(t,
		tarEntry{name: "src/", typ: tar.TypeDir},
		tarEntry{name: "src/main.go", body: "package main\n", typ: tar.TypeReg},
		tarEntry{name: "link", link: "src/main.go", typ: tar.TypeSymlink},
	), dir)
	if err != nil || n != 2 {
		t.Fatalf("ExtractTar = %d, %v; want 2 entries", n, err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "link")); err != nil || string(b) != "package main\n" {
		t.Fatalf("link reads %q, %v", b, err)
	}
}
