package gitstore

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/lockstep-hq/lockstep"
)

func modeString(m filemode.FileMode) string { return fmt.Sprintf("%06o", uint32(m)) }

func entryType(m filemode.FileMode) string {
	switch m {
	case filemode.Dir:
		return "tree"
	case filemode.Symlink:
		return "symlink"
	case filemode.Submodule:
		return "commit"
	}
	return "blob"
}

// tree reads and decodes tree h.
func (n *Network) tree(h plumbing.Hash) (*object.Tree, error) {
	obj, err := n.typed(plumbing.TreeObject, h)
	if err != nil {
		return nil, err
	}
	t := &object.Tree{}
	if err := t.Decode(obj); err != nil {
		return nil, fmt.Errorf("decode tree %s: %w", h, err)
	}
	return t, nil
}

// cleanPath turns an API path into components ("" and "/" are the root).
func cleanPath(p string) ([]string, error) {
	p = strings.Trim(p, "/")
	if p == "" {
		return nil, nil
	}
	if err := ValidatePath(p); err != nil {
		return nil, lockstep.Errorf(lockstep.ENOTFOUND, "path %q not found", p)
	}
	return strings.Split(p, "/"), nil
}

// lookup walks path from the tree of treeOrCommit and returns the entry
// it names; the root is returned as a Dir entry.
func (n *Network) lookup(treeOrCommit plumbing.Hash, path string) (object.TreeEntry, error) {
	root, err := n.treeOf(treeOrCommit)
	if err != nil {
		return object.TreeEntry{}, err
	}
	comps, err := cleanPath(path)
	if err != nil {
		return object.TreeEntry{}, err
	}
	cur := object.TreeEntry{Mode: filemode.Dir, Hash: root}
	for i, c := range comps {
		if cur.Mode != filemode.Dir {
			return object.TreeEntry{}, lockstep.Errorf(lockstep.ENOTFOUND, "path %q not found: %q is not a directory", path, strings.Join(comps[:i], "/"))
		}
		t, err := n.tree(cur.Hash)
		if err != nil {
			return object.TreeEntry{}, err
		}
		found := false
		for _, e := range t.Entries {
			if e.Name == c {
				cur, found = e, true
				break
			}
		}
		if !found {
			return object.TreeEntry{}, lockstep.Errorf(lockstep.ENOTFOUND, "path %q not found", path)
		}
	}
	return cur, nil
}

// TreeEntries lists the directory at path ("" for the root) of a commit
// or tree, in git order. Returns not_found if the object, the path or a
// directory there is missing.
func (n *Network) TreeEntries(treeOrCommit plumbing.Hash, path string) ([]TreeEntry, error) {
	e, err := n.lookup(treeOrCommit, path)
	if err != nil {
		return nil, err
	}
	if e.Mode != filemode.Dir {
		return nil, lockstep.Errorf(lockstep.ENOTFOUND, "path %q is not a directory", path)
	}
	t, err := n.tree(e.Hash)
	if err != nil {
		return nil, err
	}
	prefix := strings.Trim(path, "/")
	if prefix != "" {
		prefix += "/"
	}
	out := make([]TreeEntry, 0, len(t.Entries))
	for _, te := range t.Entries {
		x := TreeEntry{Name: te.Name, Path: prefix + te.Name, Mode: modeString(te.Mode), Type: entryType(te.Mode), Hash: te.Hash}
		if te.Mode.IsFile() {
			if x.Size, err = n.objectSize(te.Hash); errors.Is(err, plumbing.ErrObjectNotFound) {
				return nil, lockstep.Errorf(lockstep.ENOTFOUND, "blob %s of %q not found", te.Hash, x.Path)
			} else if err != nil {
				return nil, fmt.Errorf("size of blob %s of %q: %w", te.Hash, x.Path, err)
			}
		}
		out = append(out, x)
	}
	return out, nil
}

// Blob returns the file (or symlink: its target) at path of a commit or
// tree, and a reader of its content that the caller must close. Returns
// not_found if the object or path is missing or the path is not a file.
func (n *Network) Blob(treeOrCommit plumbing.Hash, path string) (*BlobInfo, io.ReadCloser, error) {
	e, err := n.lookup(treeOrCommit, path)
	if err != nil {
		return nil, nil, err
	}
	if !e.Mode.IsFile() {
		return nil, nil, lockstep.Errorf(lockstep.ENOTFOUND, "path %q is not a file", path)
	}
	size, r, err := n.openBlob(e.Hash)
	if err != nil {
		return nil, nil, err
	}
	return &BlobInfo{Hash: e.Hash, Mode: modeString(e.Mode), Size: size}, r, nil
}

// Archive writes the tree of a commit or tree to w as a tar stream:
// directories, regular files (0644 or 0755) and symlinks, entries in git
// order, modification time the commit's committer time (zero time for a
// bare tree). Objects are read one at a time and large files stream from
// disk: neither the archive nor a large file is ever held in memory. Returns not_found if the object is missing.
func (n *Network) Archive(ctx context.Context, w io.Writer, treeOrCommit plumbing.Hash) error {
	mtime := time.Unix(0, 0)
	if obj, err := n.object(treeOrCommit); err == nil && obj.Type() == plumbing.CommitObject {
		c, err := n.commitObject(treeOrCommit)
		if err != nil {
			return err
		}
		mtime = c.Committer.When
	}
	root, err := n.treeOf(treeOrCommit)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	if err := n.archiveTree(ctx, tw, root, "", mtime); err != nil {
		return err
	}
	return tw.Close()
}

func (n *Network) archiveTree(ctx context.Context, tw *tar.Writer, h plumbing.Hash, prefix string, mtime time.Time) error {
	t, err := n.tree(h)
	if err != nil {
		return err
	}
	for _, e := range t.Entries {
		if err := ctx.Err(); err != nil {
			return err
		}
		p := prefix + e.Name
		hdr := &tar.Header{Name: p, ModTime: mtime, Format: tar.FormatPAX, Uname: "root", Gname: "root"}
		switch e.Mode {
		case filemode.Dir:
			hdr.Typeflag, hdr.Name, hdr.Mode = tar.TypeDir, p+"/", 0o755
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			if err := n.archiveTree(ctx, tw, e.Hash, p+"/", mtime); err != nil {
				return err
			}
		case filemode.Symlink:
			obj, err := n.typed(plumbing.BlobObject, e.Hash)
			if err != nil {
				return err
			}
			hdr.Typeflag, hdr.Linkname, hdr.Mode = tar.TypeSymlink, symlinkTarget(obj), 0o777
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
		case filemode.Regular, filemode.Executable, filemode.Deprecated:
			size, r, err := n.openBlob(e.Hash)
			if err != nil {
				return err
			}
			hdr.Typeflag, hdr.Size, hdr.Mode = tar.TypeReg, size, 0o644
			if e.Mode == filemode.Executable {
				hdr.Mode = 0o755
			}
			if err := tw.WriteHeader(hdr); err != nil {
				r.Close()
				return err
			}
			_, err = io.Copy(tw, r)
			r.Close()
			if err != nil {
				return err
			}
		case filemode.Submodule:
			// A gitlink has no content here; git archive writes an empty
			// directory.
			hdr.Typeflag, hdr.Name, hdr.Mode = tar.TypeDir, p+"/", 0o755
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
		}
	}
	return nil
}
