package gitstore

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// Fuzz targets. `go test` runs their seeds; `go test -fuzz FuzzX ./repo/`
// explores. A crasher found becomes a seed in testdata/fuzz and a
// regression test.

// pathSeeds are names git refuses, their near misses and ordinary ones.
var pathSeeds = []string{
	"a", "a/b", "src/main.go", ".github/ci.yml", ".gitignore", ".gitmodules", "git", "gitx", ".gitx", ".git-x",
	".git", ".GIT", ".Git/config", "a/.git", ".git.", ".git ", ".git. . ", "git~1", "GIT~1/x", "git~2",
	".git::$INDEX_ALLOCATION", ".git:x", ".g\u200cit", ".GIT\u200d", "\u200e.git", ".git\u00a0", ".git\ufeff",
	"a\\.git", "x\\git~1\\y", ".gitmodules/x", ".GITMODULES /x", "gitmod~1/x", "gi7eba~1/x", ".gitattributes/x",
	"..", ".", "a/../b", "a//b", "/abs", "a/", "", "a\x00b", "\xff", ".git\xff",
}

func FuzzValidatePath(f *testing.F) {
	for _, s := range pathSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		err := ValidatePath(p)
		if err != nil {
			if !strings.Contains(err.Error(), "invalid_argument") && !strings.Contains(err.Error(), "path") && !strings.Contains(err.Error(), "empty") {
				t.Fatalf("unexpected error form %v", err)
			}
			return
		}
		comps := strings.Split(p, "/")
		for i, c := range comps {
			if c == "" || c == "." || c == ".." || strings.ContainsRune(c, 0) {
				t.Fatalf("accepted %q with component %q", p, c)
			}
			// An independent, naive reading of "is .git": drop every
			// ignorable code point, cut at ':' or '\\', trim dots and
			// spaces, fold case.
			naive := strings.Map(func(r rune) rune {
				if hfsIgnorable(r) {
					return -1
				}
				return r
			}, c)
			for _, part := range strings.Split(naive, "\\") {
				if k := strings.IndexByte(part, ':'); k >= 0 {
					part = part[:k]
				}
				part = strings.TrimRight(part, ". ")
				if strings.EqualFold(part, ".git") || strings.EqualFold(part, "git~1") {
					t.Fatalf("accepted %q: component %q reads as .git", p, c)
				}
			}
			if i < len(comps)-1 {
				if s := specialFile(c); s == ".gitmodules" || s == ".gitattributes" {
					t.Fatalf("accepted %q: %s as a directory", p, s)
				}
			}
		}
	})
}

func tarSeed(entries ...*tar.Header) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range entries {
		tw.WriteHeader(h)
		if h.Typeflag == tar.TypeReg {
			tw.Write(bytes.Repeat([]byte("x"), int(h.Size)))
		}
	}
	tw.Close()
	return buf.Bytes()
}

func FuzzIngestTar(f *testing.F) {
	reg := func(name string, size int64) *tar.Header {
		return &tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: size}
	}
	f.Add(tarSeed(reg("a.txt", 3), reg("dir/b.txt", 100)))
	f.Add(tarSeed(reg("big", 300), reg("big2", 300))) // spooled (threshold 64 below)
	f.Add(tarSeed(&tar.Header{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755}, &tar.Header{Name: "d/l", Typeflag: tar.TypeSymlink, Linkname: "../x"}))
	f.Add(tarSeed(&tar.Header{Name: ".gitmodules/", Typeflag: tar.TypeDir, Mode: 0o755}))
	f.Add(tarSeed(reg(".gitmodules", 10)))
	f.Add(tarSeed(&tar.Header{Name: ".git::$INDEX_ALLOCATION/config", Typeflag: tar.TypeReg, Size: 1}))
	f.Add(tarSeed(&tar.Header{Name: "x", Typeflag: tar.TypeLink, Linkname: "y"}))
	f.Add(gzipBytes(tarSeed(reg("z", 1000))))
	f.Add([]byte{})
	f.Add([]byte{0x1f, 0x8b, 0, 0})
	lim := Limits{MaxUploadBytes: 1 << 20, MaxFileBytes: 64 << 10, MaxFiles: 200}
	spoolDir := f.TempDir() // spool files are removed on Close or failure
	f.Fuzz(func(t *testing.T, data []byte) {
		in, err := ingestTar(context.Background(), bytes.NewReader(data), lim, spoolDir, 64)
		if err != nil {
			// A refused upload leaves no spool file behind.
			if left, _ := os.ReadDir(spoolDir); len(left) != 0 {
				t.Fatalf("refused upload (%v) left %d spool files", err, len(left))
			}
			return
		}
		defer func() {
			in.Close()
			if left, _ := os.ReadDir(spoolDir); len(left) != 0 {
				t.Fatalf("closed upload left %d spool files", len(left))
			}
		}()
		// Every tree built is one git fsck accepts by name, and every
		// object can be read back.
		for _, o := range in.Objects {
			if o.Type() != plumbing.TreeObject {
				r, err := o.Reader()
				if err != nil {
					t.Fatal(err)
				}
				if n, _ := io.Copy(io.Discard, r); n != o.Size() {
					t.Fatalf("blob %s: read %d of %d bytes", o.Hash(), n, o.Size())
				}
				r.Close()
				continue
			}
			tr := &object.Tree{}
			if err := tr.Decode(o); err != nil {
				t.Fatal(err)
			}
			for _, e := range tr.Entries {
				if err := validateComponent(e.Name); err != nil {
					t.Fatalf("stored name %q: %v", e.Name, err)
				}
				if _, err := checkSpecialEntry(e.Name, e.Name, entryKind(e.Mode)); err != nil {
					t.Fatalf("stored entry %q (%s): %v", e.Name, e.Mode, err)
				}
			}
		}
	})
}

func FuzzReceivePack(f *testing.F) {
	if _, err := exec.LookPath("git"); err == nil {
		dir := f.TempDir()
		git(f, dir, nil, "init", "-q")
		c := clientCommit(f, dir, map[string]string{"a/b.txt": strings.Repeat("text\n", 50), "l": "->a/b.txt", ".gitmodules": "[submodule \"x\"]\n\tpath = x\n\turl = ./x\n"})
		f.Add(packObjects(f, dir+"/.git", c+"\n", "--revs"))
	}
	f.Add([]byte("PACK\x00\x00\x00\x02\x00\x00\x00\x01"))
	f.Add([]byte("PACK\x00\x00\x00\x02\x00\x00\x00\x00" + strings.Repeat("\x00", 20)))
	f.Add([]byte{})
	n, err := Open(f.TempDir(), Options{})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { n.Close() })
	lim := Limits{MaxUploadBytes: 1 << 20, MaxFileBytes: 256 << 10, MaxFiles: 1000}
	f.Fuzz(func(t *testing.T, data []byte) {
		if _, err := n.ReceivePack(bytes.NewReader(data), lim); err != nil {
			return
		}
	})
}
