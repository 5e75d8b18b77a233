package fssnap

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lockstep-hq/lockstep"
)

// Snapshot is one point-in-time copy of a directory.
type Snapshot struct {
	ID        string    `json:"id"`
	Driver    string    `json:"driver"`
	Dir       string    `json:"dir"`
	CreatedAt time.Time `json:"created_at"`
	// Path holds the snapshot's data (btrfs subvolume, copy tree); empty for
	// overlay, whose data is Layers.
	Path   string   `json:"path,omitempty"`
	Layers []string `json:"layers,omitempty"` // overlay lower layers, top first
	// Objects is the content store of a copy or reflink snapshot (its
	// files' data by sha256, shared with the directory's other
	// snapshots); empty for snapshots of earlier versions, whose copy tree
	// is Path.
	Objects string `json:"objects,omitempty"`
	Files   int    `json:"files"` // regular files, when known
	Bytes   int64  `json:"bytes"` // their total size, when known
	// LazyManifest: the snapshot's manifest is not written by the take
	// but built from the snapshot itself (its read-only subvolume or
	// layers, with CreatedAt as its racy reference) when it is first
	// needed (LoadManifest, a verified restore), then stored.
	LazyManifest bool `json:"lazy_manifest,omitempty"`

	// Manifest is set by Take when the driver computed one anyway (copy,
	// reflink); callers can use it instead of building their own.
	Manifest *Manifest `json:"-"`
}

// Driver snapshots one directory at a time.
//
// Errors: invalid_argument when dir does not suit the driver (not a
// subvolume, overlay not prepared, not a directory); not_found when the
// snapshot id is unknown for dir; unavailable when the filesystem refuses
// (EBUSY on umount, missing privileges); anything else is internal.
type Driver interface {
	// Name is "overlay", "btrfs", "reflink" or "copy".
	Name() string
	// Take snapshots dir. The directory must be quiescent (no process
	// writing to it) for the snapshot to be consistent.
	Take(ctx context.Context, dir string) (Snapshot, error)
	// Restore makes dir identical to snapshot id. Processes with their cwd
	// or open files inside dir must be gone (overlay, btrfs).
	Restore(ctx context.Context, dir, id string) error
	// List returns dir's snapshots, oldest first.
	List(dir string) ([]Snapshot, error)
	// Drop deletes a snapshot and its data.
	Drop(dir, id string) error
}

// Preparer is implemented by drivers that must set a directory up before
// the first Take (overlay) and can tear it down again.
type Preparer interface {
	// Prepare converts dir so that the driver can snapshot it; it is
	// idempotent.
	Prepare(ctx context.Context, dir string) error
	// Unprepare turns dir back into a plain directory holding its current
	// content and drops every snapshot of it.
	Unprepare(ctx context.Context, dir string) error
}

// Driver names.
const (
	NameOverlay = "overlay"
	NameBtrfs   = "btrfs"
	NameReflink = "reflink"
	NameCopy    = "copy"
)

// Options configure every driver.
type Options struct {
	// StateRoot holds snapshot records and manifests. Default:
	// DefaultStateRoot(os.Getenv).
	StateRoot string
	// DataRoot, if set, holds snapshot data that must live on the
	// directory's filesystem (btrfs, reflink, overlay layers). Default: the
	// state root when on the same device, else
	// "<filesystem root>/.lockstep-snapshots".
	DataRoot string
	// MaxLayers bounds the overlay lower-layer stack; deeper stacks are
	// flattened. Default 16.
	MaxLayers int
	// Now is the clock (default time.Now).
	Now func() time.Time
}

func (o Options) withDefaults() Options {
	if o.StateRoot == "" {
		o.StateRoot = DefaultStateRoot(os.Getenv)
	}
	if o.MaxLayers <= 0 {
		o.MaxLayers = 16
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// DefaultStateRoot is /var/lib/lockstep/snapshots for root,
// $XDG_STATE_HOME/lockstep/snapshots (or ~/.local/state/...) otherwise.
func DefaultStateRoot(getenv func(string) string) string {
	if os.Geteuid() == 0 {
		return "/var/lib/lockstep/snapshots"
	}
	if x := getenv("XDG_STATE_HOME"); x != "" {
		return filepath.Join(x, "lockstep", "snapshots")
	}
	return filepath.Join(getenv("HOME"), ".local", "state", "lockstep", "snapshots")
}

// New returns the driver with that name.
func New(name string, opts Options) (Driver, error) {
	opts = opts.withDefaults()
	b := base{opts: opts}
	switch name {
	case NameOverlay:
		return &Overlay{base: b}, nil
	case NameBtrfs:
		return &Btrfs{base: b}, nil
	case NameReflink:
		return &Copy{base: b, reflink: true}, nil
	case NameCopy:
		return &Copy{base: b}, nil
	}
	return nil, lockstep.Errorf(lockstep.EINVALID, "unknown snapshot driver %q", name)
}

// Detect picks the best driver for dir: overlay if dir is an overlay that
// Prepare set up, btrfs if dir is a subvolume, reflink if the data root
// supports FICLONE, else copy.
func Detect(dir string, opts Options) (Driver, error) {
	opts = opts.withDefaults()
	abs, err := absDir(dir)
	if err != nil {
		return nil, err
	}
	b := base{opts: opts}
	ov := &Overlay{base: b}
	if ov.prepared(abs) {
		return ov, nil
	}
	var sfs unix.Statfs_t
	if err := unix.Statfs(abs, &sfs); err != nil {
		return nil, fmt.Errorf("statfs %s: %w", abs, err)
	}
	if sfs.Type == unix.BTRFS_SUPER_MAGIC && isSubvolume(abs) {
		if dr, err := b.dataRoot(abs); err == nil && sameDevFS(dr, abs) {
			return &Btrfs{base: b}, nil
		}
	}
	if dr, err := b.dataRoot(abs); err == nil && probeReflink(dr) {
		return &Copy{base: b, reflink: true}, nil
	}
	return &Copy{base: b}, nil
}

// base holds the state-root bookkeeping every driver shares.
type base struct{ opts Options }

func absDir(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", lockstep.Errorf(lockstep.EINVALID, "directory %q: %v", dir, err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return "", lockstep.Errorf(lockstep.ENOTFOUND, "directory %s: %v", abs, err)
	}
	if !fi.IsDir() {
		return "", lockstep.Errorf(lockstep.EINVALID, "%s is not a directory", abs)
	}
	return abs, nil
}

// dirKey names a directory in the state and data roots.
func dirKey(abs string) string {
	s := sha256.Sum256([]byte(abs))
	return filepath.Base(abs) + "-" + hex.EncodeToString(s[:6])
}

// metaDir is where snapshot records of abs live.
func (b base) metaDir(abs string) string {
	return filepath.Join(b.opts.StateRoot, dirKey(abs))
}

// dataRoot is where data that must share abs's filesystem lives.
func (b base) dataRoot(abs string) (string, error) {
	if b.opts.DataRoot != "" {
		return filepath.Join(b.opts.DataRoot, dirKey(abs)), nil
	}
	if err := os.MkdirAll(b.opts.StateRoot, 0o700); err == nil && sameDev(b.opts.StateRoot, abs) {
		return filepath.Join(b.opts.StateRoot, dirKey(abs), "data"), nil
	}
	root, err := fsRoot(abs)
	if err != nil {
		return "", err
	}
	if root == abs {
		// Nowhere on this filesystem is outside dir: fall back to the
		// state root (reflink and btrfs will then refuse, copy works).
		return filepath.Join(b.opts.StateRoot, dirKey(abs), "data"), nil
	}
	return filepath.Join(root, ".lockstep-snapshots", dirKey(abs)), nil
}

// sameDev reports whether a and b are on the same filesystem.
func sameDev(a, b string) bool {
	var sa, sb unix.Statfs_t
	if unix.Statfs(a, &sa) != nil || unix.Statfs(b, &sb) != nil || sa.Type != sb.Type {
		return false
	}
	if sa.Fsid != sb.Fsid && sa.Type != unix.BTRFS_SUPER_MAGIC {
		return false
	}
	m := mountsOf(a, b)
	if sa.Type == unix.BTRFS_SUPER_MAGIC {
		// f_fsid and st_dev differ per subvolume: compare the mounted device.
		return m[0].source != "" && m[0].source == m[1].source
	}
	return m[0].dev == m[1].dev
}

// sameDevFS is like sameDev but creates a (possibly missing) a first.
func sameDevFS(a, b string) bool {
	if err := os.MkdirAll(a, 0o700); err != nil {
		return false
	}
	return sameDev(a, b)
}

type mountInfo struct{ point, source, dev string }

// mountOf finds the mount holding abs in /proc/self/mountinfo.
func mountOf(p string) mountInfo { return mountsOf(p)[0] }

// mountsOf finds the mount holding each path, reading
// /proc/self/mountinfo once (a take used to read it eight times).
func mountsOf(paths ...string) []mountInfo {
	best := make([]mountInfo, len(paths))
	abs := make([]string, len(paths))
	for i, p := range paths {
		a, err := filepath.EvalSymlinks(p)
		if err != nil {
			a = "" // matches nothing: mountInfo{}
		}
		abs[i] = a
	}
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return best
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 10 {
			continue
		}
		mp := unescapeMount(f[4])
		sep := 6
		for sep < len(f) && f[sep] != "-" {
			sep++
		}
		if sep+2 >= len(f) {
			continue
		}
		for i, a := range abs {
			if a == "" || !(a == mp || mp == "/" || strings.HasPrefix(a, mp+"/")) || len(mp) < len(best[i].point) {
				continue
			}
			best[i] = mountInfo{point: mp, source: f[sep+2], dev: f[2]}
		}
	}
	return best
}

func unescapeMount(s string) string {
	if !strings.Contains(s, "\\") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// fsRoot is the mount point of the filesystem holding abs.
func fsRoot(abs string) (string, error) {
	m := mountOf(abs)
	if m.point == "" {
		return "", fmt.Errorf("no mount found for %s", abs)
	}
	return m.point, nil
}

func newID() string {
	var b [6]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func validID(id string) bool {
	if len(id) == 0 || len(id) > 64 {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// lock takes an exclusive flock on the directory's state; unlock releases it.
func (b base) lock(abs string) (unlock func(), err error) {
	md := b.metaDir(abs)
	if err := os.MkdirAll(md, 0o700); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(md, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("state lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("state lock: %w", err)
	}
	return func() { f.Close() }, nil
}

func (b base) saveSnapshot(s Snapshot) error {
	md := filepath.Join(b.metaDir(s.Dir), "snapshots")
	if err := os.MkdirAll(md, 0o700); err != nil {
		return err
	}
	if s.Manifest != nil {
		if err := writeManifest(manifestBase(md, s.ID), s.Manifest); err != nil {
			return err
		}
	}
	return writeJSON(filepath.Join(md, s.ID+".json"), s)
}

func (b base) loadSnapshot(abs, id string) (Snapshot, error) {
	var s Snapshot
	if !validID(id) {
		return s, lockstep.Errorf(lockstep.EINVALID, "bad snapshot id %q", id)
	}
	err := readJSON(filepath.Join(b.metaDir(abs), "snapshots", id+".json"), &s)
	if errors.Is(err, os.ErrNotExist) {
		return s, lockstep.Errorf(lockstep.ENOTFOUND, "snapshot %s of %s", id, abs)
	}
	return s, err
}

// SaveManifest stores m as the manifest of snapshot id of dir, so that a
// later process (a retry, the CLI after a crash) can verify against it.
func SaveManifest(opts Options, dir, id string, m *Manifest) error {
	b := base{opts: opts.withDefaults()}
	abs, err := absDir(dir)
	if err != nil {
		return err
	}
	if _, err := b.loadSnapshot(abs, id); err != nil {
		return err
	}
	return writeManifest(manifestBase(filepath.Join(b.metaDir(abs), "snapshots"), id), m)
}

// ManifestBytes is the size the stored manifest of snapshot id of dir
// takes on disk (compressed, or an older uncompressed one).
func ManifestBytes(opts Options, dir, id string) (int64, error) {
	b := base{opts: opts.withDefaults()}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return 0, err
	}
	if !validID(id) {
		return 0, lockstep.Errorf(lockstep.EINVALID, "bad snapshot id %q", id)
	}
	p := manifestBase(filepath.Join(b.metaDir(abs), "snapshots"), id)
	for _, suffix := range manifestSuffixes {
		if fi, err := os.Stat(p + suffix); err == nil {
			return fi.Size(), nil
		}
	}
	return 0, lockstep.Errorf(lockstep.ENOTFOUND, "manifest of snapshot %s of %s", id, abs)
}

// LoadManifest returns the stored manifest of snapshot id of dir.
// A lazily taken snapshot's manifest is built from the snapshot on the
// first call (lazyManifest).
func LoadManifest(opts Options, dir, id string) (*Manifest, error) {
	b := base{opts: opts.withDefaults()}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	return b.manifestOf(abs, id)
}

func (b base) loadManifest(abs, id string) (*Manifest, error) {
	if !validID(id) {
		return nil, lockstep.Errorf(lockstep.EINVALID, "bad snapshot id %q", id)
	}
	var m Manifest
	err := readManifest(manifestBase(filepath.Join(b.metaDir(abs), "snapshots"), id), &m)
	if errors.Is(err, os.ErrNotExist) {
		return nil, lockstep.Errorf(lockstep.ENOTFOUND, "manifest of snapshot %s of %s", id, abs)
	}
	if err != nil {
		return nil, err
	}
	return &m, nil
}

func (b base) list(dir, driver string) ([]Snapshot, error) {
	all, err := b.listAll(dir)
	if err != nil {
		return nil, err
	}
	var out []Snapshot
	for _, s := range all {
		if s.Driver == driver {
			out = append(out, s)
		}
	}
	return out, nil
}

// listAll returns dir's snapshots of every driver, oldest first.
func (b base) listAll(dir string) ([]Snapshot, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	md := filepath.Join(b.metaDir(abs), "snapshots")
	ents, err := os.ReadDir(md)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Snapshot
	for _, e := range ents {
		name := e.Name()
		if filepath.Ext(name) != ".json" || filepath.Ext(name[:len(name)-5]) == ".manifest" {
			continue
		}
		var s Snapshot
		if err := readJSON(filepath.Join(md, name), &s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out, nil
}

func (b base) dropMeta(abs, id string) error {
	md := filepath.Join(b.metaDir(abs), "snapshots")
	for _, suffix := range manifestSuffixes {
		os.Remove(manifestBase(md, id) + suffix)
	}
	if err := os.Remove(filepath.Join(md, id+".json")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

func writeJSON(p string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}

func readJSON(p string, v any) error {
	data, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, v)
}

func jsonUnmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }

// unavailable wraps a refusal by the filesystem or the kernel.
func unavailable(format string, args ...any) error {
	return lockstep.Errorf(lockstep.EUNAVAILABLE, format, args...)
}
