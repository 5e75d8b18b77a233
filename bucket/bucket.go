// Package bucket is the seam between the object-storage mode of a fork
// network (package replica) and the place its packs live: the Bucket
// interface the replica needs, the PackInfo it lists, and the registry of
// backends chosen by URL scheme at start-up (upspin's Register/Dial, as
// an explicit map built by cmd, not a global). A backend is one package
// (s3packs for s3://, filebucket for file://) plus one line in the map;
// buckettest is the contract every backend passes.
package bucket

import (
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/lockstep-hq/lockstep"
)

// Bucket stores the packs of every fork network: pack-<hash>.pack and
// pack-<hash>.idx under the network's name, written once, never changed.
// The metadata database's pack list is the truth about which packs are
// live; the bucket only holds bytes.
type Bucket interface {
	// PutPack uploads the pack and its index from local files under hash
	// h (the pack's SHA-1 trailer, which is checked); a pack already
	// stored under h is left as it is (same name, same bytes). Durable
	// when it returns. Errors: invalid_argument (the files do not match
	// h, or a bad network name or hash), unavailable (the bucket cannot
	// be reached), permission_denied (it refuses the write).
	PutPack(ctx context.Context, network, h, packPath, idxPath string) error
	// GetPack downloads the pack and its index into packPath and idxPath
	// (each checked against h, then renamed into place; the index last).
	// Errors: not_found (either is missing), invalid_argument (the bytes
	// do not match the name; nothing written), unavailable.
	GetPack(ctx context.Context, network, h, packPath, idxPath string) error
	// ListPacks lists network's stored packs sorted by hash, incomplete
	// ones (a pack without its index) included, for garbage collection.
	ListPacks(ctx context.Context, network string) ([]PackInfo, error)
	// DeletePack deletes the index, then the pack (a half-deleted pack is
	// listed as incomplete). Deleting a missing pack succeeds.
	DeletePack(ctx context.Context, network, h string) error
	// ListNetworks lists the networks with objects in the bucket, sorted.
	ListNetworks(ctx context.Context) ([]string, error)
	// Ping checks the bucket answers (readiness). Errors: unavailable.
	Ping(ctx context.Context) error
}

// PackInfo describes a stored pack.
type PackInfo struct {
	Hash string
	// PackSize and IdxSize are the sizes of the two objects; 0 if absent
	// (an upload that stopped after the pack: garbage after a grace period).
	PackSize, IdxSize int64
	// Modified is the later upload time of the two, for GC's grace period.
	Modified time.Time
}

// Complete reports whether both the pack and its index are stored.
func (p PackInfo) Complete() bool { return p.PackSize > 0 && p.IdxSize > 0 }

// SortPacks sorts packs by hash (the order ListPacks returns).
func SortPacks(p []PackInfo) {
	sort.Slice(p, func(i, j int) bool { return p[i].Hash < p[j].Hash })
}

// Location is a parsed bucket URL, checked but not yet reached.
type Location interface {
	// Open reaches the bucket and runs the backend's start-up checks
	// (bounded by the backend's own timeout): a clear one-line error
	// when it cannot be used.
	Open(ctx context.Context) (Bucket, error)
	// String is the URL for logs, without credentials.
	String() string
}

// Backend parses a URL of its scheme (credentials, if any, from getenv)
// into a Location. Its errors are one line naming setting.
type Backend func(raw string, getenv func(string) string) (Location, error)

// Backends is the registry: URL scheme → backend. cmd builds it, one
// line per backend.
type Backends map[string]Backend

// Parse chooses the backend by raw's scheme and parses raw with it.
// setting names the configuration in errors.
func (b Backends) Parse(setting, raw string, getenv func(string) string) (Location, error) {
	scheme := ""
	if u, err := url.Parse(raw); err == nil {
		scheme = u.Scheme
	}
	be, ok := b[scheme]
	if !ok {
		var known []string
		for s := range b {
			known = append(known, s+"://")
		}
		sort.Strings(known)
		return nil, fmt.Errorf("%s=%q: not scheme %q: want one of %s", setting, raw, scheme, strings.Join(known, ", "))
	}
	loc, err := be(raw, getenv)
	if err != nil && !strings.Contains(err.Error(), setting) {
		err = fmt.Errorf("%s: %w", setting, err)
	}
	return loc, err
}

// CheckNetwork refuses network names that could escape their directory
// or key prefix: invalid_argument unless 1 to 128 letters, digits, '-',
// '_' or '.', and not . or ..
func CheckNetwork(network string) error {
	if network == "" || len(network) > 128 || network == "." || network == ".." {
		return lockstep.Errorf(lockstep.EINVALID, "network name %q: 1 to 128 characters, not . or ..", network)
	}
	for i := 0; i < len(network); i++ {
		c := network[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return lockstep.Errorf(lockstep.EINVALID, "network name %q: only letters, digits, '-', '_' and '.'", network)
		}
	}
	return nil
}

// CheckPackFiles checks that the pack at packPath and the index at
// idxPath are pack h: the pack's SHA-1 trailer is h and is the SHA-1 of
// what precedes it; the index names pack h and matches its own trailer.
// invalid_argument when they do not.
func CheckPackFiles(packPath, idxPath, h string) error {
	for _, f := range []struct {
		path  string
		named int // where in the last 40 bytes the pack's hash is
	}{{packPath, 20}, {idxPath, 0}} {
		sum, tail, err := hashFile(f.path)
		if err != nil {
			return err
		}
		if !bytes.Equal(tail[20:], sum) || hex.EncodeToString(tail[f.named:f.named+20]) != h {
			return lockstep.Errorf(lockstep.EINVALID, "%s is not pack %s (or is corrupt)", filepath.Base(f.path), h)
		}
	}
	return nil
}

// hashFile returns the SHA-1 of the file at path without its last 20
// bytes (a pack's or an index's trailer), and its last 40 bytes.
func hashFile(path string) (sum, tail []byte, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	if fi.Size() < 52 {
		return nil, nil, lockstep.Errorf(lockstep.EINVALID, "%s is too short to be a pack or index", filepath.Base(path))
	}
	h := sha1.New()
	if _, err := io.CopyN(h, f, fi.Size()-20); err != nil {
		return nil, nil, err
	}
	tail = make([]byte, 40)
	if _, err := f.ReadAt(tail, fi.Size()-40); err != nil {
		return nil, nil, err
	}
	return h.Sum(nil), tail, nil
}
