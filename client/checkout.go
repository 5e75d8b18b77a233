package client

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Checkout writes the tree of repo at rev into dir (which should be empty)
// and returns the commit it resolved to and the number of files written.
// wrap, when set, wraps the stream on its way in (for progress counting).
// The archive is extracted with ExtractTar as it arrives.
func (c *Client) Checkout(ctx context.Context, repo, rev, dir string, wrap func(io.Writer) io.Writer) (commit string, files int, err error) {
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		n, err := ExtractTar(pr, dir)
		files = n
		pr.CloseWithError(err)
		done <- err
	}()
	var w io.Writer = pw
	if wrap != nil {
		w = wrap(pw)
	}
	commit, err = c.Archive(ctx, repo, rev, w)
	pw.CloseWithError(err)
	xerr := <-done
	if err == nil {
		err = xerr
	}
	return commit, files, err
}

// ExtractTar writes a tar stream (an archive from the server) into dir and
// returns the number of files and symlinks written. A client never trusts
// a stream to stay inside dir: an absolute name, a name with "..", a name
// under a symlink the same stream created, a file that already exists and
// an entry type other than directory, file and symlink are refused.
func ExtractTar(r io.Reader, dir string) (int, error) {
	tr := tar.NewReader(r)
	files := 0
	links := map[string]bool{} // cleaned names of the symlinks written
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files, nil
		}
		if err != nil {
			return files, fmt.Errorf("read archive: %w", err)
		}
		name := filepath.Clean(h.Name)
		if filepath.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") {
			return files, fmt.Errorf("archive entry %q escapes the directory", h.Name)
		}
		for d := filepath.Dir(name); d != "." && d != "/"; d = filepath.Dir(d) {
			if links[d] {
				return files, fmt.Errorf("archive entry %q lies under the symlink %q", h.Name, d)
			}
		}
		p := filepath.Join(dir, name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return files, err
			}
		case tar.TypeSymlink:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return files, err
			}
			if err := os.Symlink(h.Linkname, p); err != nil {
				return files, err
			}
			links[name] = true
			files++
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return files, err
			}
			mode := os.FileMode(0o644)
			if h.Mode&0o111 != 0 {
				mode = 0o755
			}
			f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode)
			if err != nil {
				return files, err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return files, err
			}
			files++
		default:
			return files, fmt.Errorf("archive entry %q has unsupported type %q", h.Name, h.Typeflag)
		}
	}
}
