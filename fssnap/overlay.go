package fssnap

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/lockstep-hq/lockstep"
)

// Overlay snapshots a directory that is the merged mount of an overlay set
// up by Prepare. Layout under the data root: layers/<id> (read-only lower
// layers), upper, work. The current stack is recorded in overlay.json under
// the state root, each snapshot records its own stack. Layers are shared by
// snapshots and deleted when no snapshot and not the current stack use them.
type Overlay struct{ base }

var (
	_ Driver   = (*Overlay)(nil)
	_ Preparer = (*Overlay)(nil)
)

// Name is "overlay".
func (o *Overlay) Name() string { return NameOverlay }

type overlayState struct {
	Data  string   `json:"data"`  // holds layers/, upper/, work/
	Stack []string `json:"stack"` // current lower layers, top first
}

func (o *Overlay) statePath(abs string) string { return filepath.Join(o.metaDir(abs), "overlay.json") }

func (o *Overlay) state(abs string) (overlayState, error) {
	var st overlayState
	err := readJSON(o.statePath(abs), &st)
	if errors.Is(err, os.ErrNotExist) {
		return st, lockstep.Errorf(lockstep.EINVALID, "overlay: %s is not prepared", abs)
	}
	return st, err
}

func (o *Overlay) prepared(abs string) bool {
	var sfs unix.Statfs_t
	if unix.Statfs(abs, &sfs) != nil || sfs.Type != unix.OVERLAYFS_SUPER_MAGIC {
		return false
	}
	_, err := os.Stat(o.statePath(abs))
	return err == nil
}

func (st overlayState) layer(id string) string { return filepath.Join(st.Data, "layers", id) }
func (st overlayState) upper() string          { return filepath.Join(st.Data, "upper") }
func (st overlayState) work() string           { return filepath.Join(st.Data, "work") }

func (o *Overlay) mount(abs string, st overlayState, stack []string) error {
	lowers := make([]string, len(stack))
	for i, l := range stack {
		lowers[i] = st.layer(l)
	}
	opts := "lowerdir=" + strings.Join(lowers, ":") + ",upperdir=" + st.upper() + ",workdir=" + st.work() +
		",redirect_dir=off,metacopy=off,index=off"
	if len(opts) >= 4000 {
		return lockstep.Errorf(lockstep.EINVALID, "overlay: mount options for %d layers exceed a page; lower MaxLayers or shorten the data root", len(stack))
	}
	if err := unix.Mount("lockstep", abs, "overlay", 0, opts); err != nil {
		return unavailable("overlay: mount on %s: %v", abs, err)
	}
	return nil
}

func (o *Overlay) umount(abs string) error {
	err := unix.Unmount(abs, 0)
	if err == nil {
		return nil
	}
	if errors.Is(err, unix.EBUSY) {
		return unavailable("overlay: umount %s: busy, still used by %s; kill the run's processes first", abs, holders(abs))
	}
	return unavailable("overlay: umount %s: %v", abs, err)
}

// holders lists processes whose cwd, root or open files are under abs.
func holders(abs string) string {
	procs, _ := os.ReadDir("/proc")
	var out []string
	under := func(p string) bool { return p == abs || strings.HasPrefix(p, abs+"/") }
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		base := "/proc/" + p.Name()
		hit := false
		for _, l := range []string{"cwd", "root"} {
			if t, err := os.Readlink(base + "/" + l); err == nil && under(t) {
				hit = true
			}
		}
		if !hit {
			fds, _ := os.ReadDir(base + "/fd")
			for _, fd := range fds {
				if t, err := os.Readlink(base + "/fd/" + fd.Name()); err == nil && under(t) {
					hit = true
					break
				}
			}
		}
		if hit {
			comm, _ := os.ReadFile(base + "/comm")
			out = append(out, fmt.Sprintf("pid %d (%s)", pid, strings.TrimSpace(string(comm))))
		}
	}
	if len(out) == 0 {
		return "an unknown holder (open file, mount below, or a process in another mount namespace)"
	}
	return strings.Join(out, ", ")
}

// freshUpper empties upper and work; the new upper root gets the owner and
// mode of layer (the merged root takes its attributes from the upper root).
func (o *Overlay) freshUpper(st overlayState, layer string) error {
	for _, d := range []string{st.upper(), st.work()} {
		if err := forceRemoveAll(d); err != nil {
			return err
		}
	}
	if err := os.Mkdir(st.work(), 0o700); err != nil {
		return err
	}
	return mkdirLike(st.upper(), st.layer(layer))
}

func mkdirLike(dir, like string) error {
	var s unix.Stat_t
	if err := unix.Lstat(like, &s); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	if err := os.Lchown(dir, int(s.Uid), int(s.Gid)); err != nil && !errors.Is(err, unix.EPERM) {
		return err
	}
	return unix.Chmod(dir, s.Mode&07777)
}

// upperClean reports whether the upper layer holds no change.
func (o *Overlay) upperClean(st overlayState) bool {
	f, err := os.Open(st.upper())
	if err != nil {
		return false
	}
	names, _ := f.Readdirnames(1)
	f.Close()
	if len(names) > 0 {
		return false
	}
	var u, l unix.Stat_t
	if unix.Lstat(st.upper(), &u) != nil || unix.Lstat(st.layer(st.Stack[0]), &l) != nil {
		return false
	}
	return u.Mode == l.Mode && u.Uid == l.Uid && u.Gid == l.Gid
}

// Prepare moves dir's content into a base layer and mounts the overlay on
// dir. It is idempotent.
func (o *Overlay) Prepare(ctx context.Context, dir string) error {
	abs, err := absDir(dir)
	if err != nil {
		return err
	}
	unlock, err := o.lock(abs)
	if err != nil {
		return err
	}
	defer unlock()
	if o.prepared(abs) {
		return nil
	}
	root, err := o.dataRoot(abs)
	if err != nil {
		return err
	}
	st := overlayState{Data: filepath.Join(root, "overlay"), Stack: []string{newID()}}
	if strings.ContainsAny(st.Data, ":,") {
		return lockstep.Errorf(lockstep.EINVALID, "overlay: data root %s contains ':' or ','", st.Data)
	}
	forceRemoveAll(st.Data)
	if err := os.MkdirAll(filepath.Join(st.Data, "layers"), 0o700); err != nil {
		return err
	}
	base := st.layer(st.Stack[0])
	if err := mkdirLike(base, abs); err != nil {
		return err
	}
	names, err := readNames(abs)
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := os.Rename(filepath.Join(abs, n), filepath.Join(base, n)); err != nil {
			if !errors.Is(err, unix.EXDEV) {
				return fmt.Errorf("overlay prepare %s: %w", abs, err)
			}
			// Different filesystems: copy, then remove.
			m, err := BuildManifest(abs, nil)
			if err != nil {
				return err
			}
			if err := copyEntries(ctx, abs, base, m.Entries[1:], false, nil); err != nil {
				return err
			}
			rest, _ := readNames(abs)
			for _, r := range rest {
				if err := forceRemoveAll(filepath.Join(abs, r)); err != nil {
					return err
				}
			}
			break
		}
	}
	if err := o.freshUpper(st, st.Stack[0]); err != nil {
		return err
	}
	if err := writeJSON(o.statePath(abs), st); err != nil {
		return err
	}
	return o.mount(abs, st, st.Stack)
}

// openPrepared locks a prepared overlay directory and reads its state;
// the caller must call unlock.
func (o *Overlay) openPrepared(dir string) (abs string, st overlayState, unlock func(), err error) {
	abs, err = absDir(dir)
	if err != nil {
		return "", st, nil, err
	}
	unlock, err = o.lock(abs)
	if err != nil {
		return "", st, nil, err
	}
	if !o.prepared(abs) {
		unlock()
		return "", st, nil, lockstep.Errorf(lockstep.EINVALID, "overlay: %s is not prepared (call Prepare first)", abs)
	}
	if st, err = o.state(abs); err != nil {
		unlock()
		return "", st, nil, err
	}
	return abs, st, unlock, nil
}

// Unprepare copies the merged view back into dir as plain files, unmounts
// the overlay and drops every snapshot and layer.
func (o *Overlay) Unprepare(ctx context.Context, dir string) error {
	abs, st, unlock, err := o.openPrepared(dir)
	if err != nil {
		return err
	}
	defer unlock()
	m, err := BuildManifest(abs, nil)
	if err != nil {
		return err
	}
	stage := filepath.Join(st.Data, "unprepare")
	forceRemoveAll(stage)
	if err := copyEntries(ctx, abs, stage, m.Entries, probeReflink(st.Data), nil); err != nil {
		return err
	}
	if err := o.umount(abs); err != nil {
		return err
	}
	names, _ := readNames(stage)
	for _, n := range names {
		if err := os.Rename(filepath.Join(stage, n), filepath.Join(abs, n)); err != nil {
			return fmt.Errorf("overlay unprepare %s: %w", abs, err)
		}
	}
	setAttrs(abs, m.Entries[0])
	snaps, _ := o.List(abs)
	for _, s := range snaps {
		o.dropMeta(abs, s.ID)
	}
	os.Remove(o.statePath(abs))
	dropStaleMounts(st)
	return forceRemoveAll(st.Data)
}

func readNames(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(-1)
}

// Take freezes the merged view: the upper layer becomes a new read-only
// lower layer. Without changes since the last Take, the stack is reused and
// nothing is remounted.
func (o *Overlay) Take(ctx context.Context, dir string) (Snapshot, error) {
	return o.take(ctx, dir, false)
}

// takeLazy is Take for a snapshot whose manifest is built from its
// read-only layers when it is first needed (lazyManifest).
func (o *Overlay) takeLazy(ctx context.Context, dir string) (Snapshot, error) {
	return o.take(ctx, dir, true)
}

// take snapshots dir; CreatedAt is read before the layers are frozen, so
// that it is a safe racy reference for a manifest built from them later.
func (o *Overlay) take(ctx context.Context, dir string, lazy bool) (Snapshot, error) {
	abs, st, unlock, err := o.openPrepared(dir)
	if err != nil {
		return Snapshot{}, err
	}
	defer unlock()
	at := o.opts.Now()
	flattened := false
	if !o.upperClean(st) {
		if len(st.Stack)+1 > o.opts.MaxLayers {
			err, flattened = o.flatten(ctx, abs, &st), true
		} else {
			err = o.freeze(abs, &st)
		}
		if err != nil {
			return Snapshot{}, err
		}
		if err := writeJSON(o.statePath(abs), st); err != nil {
			return Snapshot{}, err
		}
	}
	s := Snapshot{ID: newID(), Driver: NameOverlay, Dir: abs, CreatedAt: at, Layers: st.Stack, LazyManifest: lazy}
	if err := o.saveSnapshot(s); err != nil {
		return Snapshot{}, err
	}
	if flattened {
		// A freeze only adds a layer; a flatten replaces the stack, whose
		// layers no snapshot may name any more. (gc reads every record.)
		o.gc(abs, st)
	}
	return s, nil
}

func (o *Overlay) freeze(abs string, st *overlayState) error {
	if err := o.umount(abs); err != nil {
		return err
	}
	id := newID()
	if err := os.Rename(st.upper(), st.layer(id)); err != nil {
		return errors.Join(err, o.mount(abs, *st, st.Stack))
	}
	st.Stack = append([]string{id}, st.Stack...)
	if err := o.freshUpper(*st, id); err != nil {
		return err
	}
	return o.mount(abs, *st, st.Stack)
}

// flatten copies the merged view into one new layer that replaces the stack.
func (o *Overlay) flatten(ctx context.Context, abs string, st *overlayState) error {
	m, err := BuildManifest(abs, nil)
	if err != nil {
		return err
	}
	id := newID()
	if err := copyEntries(ctx, abs, st.layer(id), m.Entries, probeReflink(st.Data), nil); err != nil {
		forceRemoveAll(st.layer(id))
		return fmt.Errorf("overlay flatten %s: %w", abs, err)
	}
	if err := o.umount(abs); err != nil {
		return err
	}
	st.Stack = []string{id}
	if err := o.freshUpper(*st, id); err != nil {
		return err
	}
	return o.mount(abs, *st, st.Stack)
}

// Restore discards the upper layer and mounts snapshot id's stack.
func (o *Overlay) Restore(ctx context.Context, dir, id string) error {
	abs, st, unlock, err := o.openPrepared(dir)
	if err != nil {
		return err
	}
	defer unlock()
	s, err := o.loadSnapshot(abs, id)
	if err != nil {
		return err
	}
	if slicesEqual(st.Stack, s.Layers) && o.upperClean(st) {
		return nil
	}
	if err := o.umount(abs); err != nil {
		return err
	}
	st.Stack = s.Layers
	if err := o.freshUpper(st, st.Stack[0]); err != nil {
		return err
	}
	if err := writeJSON(o.statePath(abs), st); err != nil {
		return err
	}
	if err := o.mount(abs, st, st.Stack); err != nil {
		return err
	}
	o.gc(abs, st)
	return nil
}

// List returns dir's snapshots, oldest first.
func (o *Overlay) List(dir string) ([]Snapshot, error) { return o.list(dir, NameOverlay) }

// Drop forgets snapshot id and deletes layers nothing uses any more.
func (o *Overlay) Drop(dir, id string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	unlock, err := o.lock(abs)
	if err != nil {
		return err
	}
	defer unlock()
	if _, err := o.loadSnapshot(abs, id); err != nil {
		return err
	}
	if err := o.dropMeta(abs, id); err != nil {
		return err
	}
	if st, err := o.state(abs); err == nil {
		o.gc(abs, st)
	}
	return nil
}

// gc deletes layers used neither by the current stack nor by a snapshot.
func (o *Overlay) gc(abs string, st overlayState) {
	used := map[string]bool{}
	for _, l := range st.Stack {
		used[l] = true
	}
	snaps, err := o.List(abs)
	if err != nil {
		return
	}
	for _, s := range snaps {
		for _, l := range s.Layers {
			used[l] = true
		}
	}
	names, _ := readNames(filepath.Join(st.Data, "layers"))
	sort.Strings(names)
	for _, n := range names {
		if !used[n] {
			forceRemoveAll(st.layer(n))
		}
	}
}

func slicesEqual(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
