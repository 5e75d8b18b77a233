// Package filebucket is the file:// backend of the bucket registry: a
// directory on a local (or shared) filesystem holding each network's
// packs as DIR/networks/<network>/pack-<hash>.{pack,idx}. Every file is
// written to a temp file in its destination directory, fsynced, renamed
// into place and its directory fsynced, so a crash leaves either the whole
// file or none (a stray temp file at most, never listed). Useful for the
// object-storage mode on one machine and for tests without S3.
package filebucket

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/bucket"
)

// Bucket is a directory of packs.
type Bucket struct {
	root string // the directory holding networks/
}

var _ bucket.Bucket = (*Bucket)(nil)

// New opens (creating it when missing) the bucket in dir.
func New(dir string) (*Bucket, error) {
	if err := os.MkdirAll(filepath.Join(dir, "networks"), 0o700); err != nil {
		return nil, fmt.Errorf("object store %s: %w", dir, err)
	}
	return &Bucket{root: dir}, nil
}

// location is a parsed file:// URL: the bucket's directory.
type location string

// Location parses file:///ABSOLUTE/DIR (no host, no query): the
// registry's file:// backend.
func Location(raw string, _ func(string) string) (bucket.Location, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "file" || u.Host != "" || u.Opaque != "" || u.RawQuery != "" || !filepath.IsAbs(u.Path) {
		return nil, fmt.Errorf("%q: want file:///absolute/directory (no host, no query)", raw)
	}
	return location(filepath.Clean(u.Path)), nil
}

// Open creates the directory if needed and checks it can be written.
func (l location) Open(ctx context.Context) (bucket.Bucket, error) {
	b, err := New(string(l))
	if err != nil {
		return nil, err
	}
	probe, err := os.CreateTemp(filepath.Join(b.root, "networks"), ".tmp-probe-")
	if err != nil {
		return nil, fmt.Errorf("object store %s is not writable: %w", l, err)
	}
	probe.Close()
	os.Remove(probe.Name())
	return b, nil
}

func (l location) String() string { return "file://" + string(l) }

func (b *Bucket) networkDir(network string) string {
	return filepath.Join(b.root, "networks", network)
}

func (b *Bucket) packPaths(network, h string) (pack, idx string, err error) {
	if err := bucket.CheckNetwork(network); err != nil {
		return "", "", err
	}
	if err := lockstep.CheckPackHash(h); err != nil {
		return "", "", err
	}
	base := filepath.Join(b.networkDir(network), "pack-"+h)
	return base + ".pack", base + ".idx", nil
}

// PutPack stores the pack, then its index (see bucket.Bucket).
func (b *Bucket) PutPack(ctx context.Context, network, h, packPath, idxPath string) error {
	pack, idx, err := b.packPaths(network, h)
	if err != nil {
		return err
	}
	if err := bucket.CheckPackFiles(packPath, idxPath, h); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(pack), 0o700); err != nil {
		return fmt.Errorf("put pack %s: %w", h, err)
	}
	for _, f := range [][2]string{{packPath, pack}, {idxPath, idx}} {
		if _, err := os.Stat(f[1]); err == nil {
			continue // already stored: same name, same bytes
		}
		if err := copyFile(f[0], f[1]); err != nil {
			return fmt.Errorf("put pack %s: %w", h, err)
		}
	}
	return nil
}

// GetPack copies the pack and its index out, checked (see bucket.Bucket).
func (b *Bucket) GetPack(ctx context.Context, network, h, packPath, idxPath string) error {
	pack, idx, err := b.packPaths(network, h)
	if err != nil {
		return err
	}
	tmpPack := filepath.Join(filepath.Dir(packPath), ".tmp_get-"+filepath.Base(packPath))
	tmpIdx := filepath.Join(filepath.Dir(idxPath), ".tmp_get-"+filepath.Base(idxPath))
	defer os.Remove(tmpPack)
	defer os.Remove(tmpIdx)
	for _, f := range [][2]string{{pack, tmpPack}, {idx, tmpIdx}} {
		if err := copyFile(f[0], f[1]); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return lockstep.Errorf(lockstep.ENOTFOUND, "pack %s of %s is not in the object store", h, network)
			}
			return fmt.Errorf("get pack %s: %w", h, err)
		}
	}
	if err := bucket.CheckPackFiles(tmpPack, tmpIdx, h); err != nil {
		return err
	}
	// The index reaches its name last: a reader takes a pack as present
	// once its index is.
	for _, f := range [][2]string{{tmpPack, packPath}, {tmpIdx, idxPath}} {
		if err := os.Rename(f[0], f[1]); err != nil {
			return fmt.Errorf("get pack %s: %w", h, err)
		}
		syncDir(filepath.Dir(f[1]))
	}
	return nil
}

// ListPacks lists network's packs, sorted by hash (see bucket.Bucket).
func (b *Bucket) ListPacks(ctx context.Context, network string) ([]bucket.PackInfo, error) {
	if err := bucket.CheckNetwork(network); err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(b.networkDir(network))
	if errors.Is(err, fs.ErrNotExist) {
		return []bucket.PackInfo{}, nil
	}
	if err != nil {
		return nil, lockstep.E("filebucket.ListPacks", lockstep.EUNAVAILABLE, "the object store cannot be read", err)
	}
	byHash := map[string]*bucket.PackInfo{}
	for _, e := range entries {
		h, ext, found := strings.Cut(strings.TrimPrefix(e.Name(), "pack-"), ".")
		if !found || !strings.HasPrefix(e.Name(), "pack-") || lockstep.CheckPackHash(h) != nil || (ext != "pack" && ext != "idx") {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue // deleted meanwhile
		}
		p := byHash[h]
		if p == nil {
			p = &bucket.PackInfo{Hash: h}
			byHash[h] = p
		}
		if ext == "pack" {
			p.PackSize = fi.Size()
		} else {
			p.IdxSize = fi.Size()
		}
		if fi.ModTime().After(p.Modified) {
			p.Modified = fi.ModTime()
		}
	}
	out := make([]bucket.PackInfo, 0, len(byHash))
	for _, p := range byHash {
		out = append(out, *p)
	}
	bucket.SortPacks(out)
	return out, nil
}

// DeletePack deletes the index, then the pack (see bucket.Bucket); a
// network left without packs disappears from ListNetworks.
func (b *Bucket) DeletePack(ctx context.Context, network, h string) error {
	pack, idx, err := b.packPaths(network, h)
	if err != nil {
		return err
	}
	for _, p := range []string{idx, pack} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("delete pack %s: %w", h, err)
		}
	}
	syncDir(filepath.Dir(pack))
	os.Remove(filepath.Dir(pack)) // only when empty
	return nil
}

// ListNetworks lists the networks with a file in the bucket, sorted.
func (b *Bucket) ListNetworks(ctx context.Context) ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(b.root, "networks"))
	if err != nil {
		return nil, lockstep.E("filebucket.ListNetworks", lockstep.EUNAVAILABLE, "the object store cannot be read", err)
	}
	var out []string
	for _, e := range entries {
		if !e.IsDir() || bucket.CheckNetwork(e.Name()) != nil {
			continue
		}
		if inside, err := os.ReadDir(filepath.Join(b.root, "networks", e.Name())); err == nil && len(inside) > 0 {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out, nil
}

// Ping checks the directory is there.
func (b *Bucket) Ping(ctx context.Context) error {
	if fi, err := os.Stat(filepath.Join(b.root, "networks")); err != nil || !fi.IsDir() {
		return lockstep.E("filebucket.Ping", lockstep.EUNAVAILABLE, "the object store directory "+b.root+" is missing", err)
	}
	return nil
}

// copyFile writes src to dst atomically and durably: a temp file beside
// dst, fsynced, renamed, the directory fsynced.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".tmp-put-")
	if err != nil {
		return err
	}
	done := false
	defer func() {
		if !done {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err := io.Copy(tmp, in); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		os.Remove(tmp.Name())
		done = true
		return err
	}
	done = true
	syncDir(filepath.Dir(dst))
	return nil
}

func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}
