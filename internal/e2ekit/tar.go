package e2ekit

import (
	"archive/tar"
	"bytes"
	"io"
	"sort"
	"strings"
	"testing"
)

// TarEntry is one tar member for TarEntries.
type TarEntry struct {
	Name     string
	Body     string
	Mode     int64
	Type     byte // tar.TypeReg by default
	Linkname string
}

// TarOf builds an uncompressed tar of regular files (0644), sorted by name.
func TarOf(t testing.TB, files map[string]string) []byte {
	t.Helper()
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	es := make([]TarEntry, len(names))
	for i, n := range names {
		es[i] = TarEntry{Name: n, Body: files[n]}
	}
	return TarEntries(t, es...)
}

// TarEntries builds a tar from explicit members.
func TarEntries(t testing.TB, es ...TarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range es {
		h := &tar.Header{Name: e.Name, Mode: e.Mode, Typeflag: e.Type, Linkname: e.Linkname, Format: tar.FormatPAX}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Mode == 0 {
			h.Mode = 0o644
			if h.Typeflag == tar.TypeDir {
				h.Mode = 0o755
			}
		}
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.Body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatalf("tar header %q: %v", e.Name, err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := io.WriteString(tw, e.Body); err != nil {
				t.Fatalf("tar body: %v", err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatalf("tar close: %v", err)
	}
	return buf.Bytes()
}

// Untar reads a tar into path → entry (regular files, symlinks).
func Untar(t testing.TB, b []byte) map[string]TarEntry {
	t.Helper()
	out := map[string]TarEntry{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("read tar: %v", err)
		}
		if h.Typeflag == tar.TypeDir {
			continue
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatalf("read tar %s: %v", h.Name, err)
		}
		out[strings.TrimPrefix(h.Name, "./")] = TarEntry{Name: h.Name, Body: string(body), Mode: h.Mode, Type: h.Typeflag, Linkname: h.Linkname}
	}
}
