package contain

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"

	"golang.org/x/sys/unix"
)

// PlanUserns is Plan for MechanismUserns. The kernel refuses, in a user
// namespace, a lower layer with a mount below it (the caller's mounts
// are locked there), and refuses a copy-up of a file or directory whose
// owner is not mapped (only the user is). So:
//
//   - each writable directory in writable ($HOME, /tmp…) under an
//     overlaid mount gets its own overlay, nested in its mount's: writing
//     in it needs no copy-up of the directories above it (root's);
//   - an overlay entry with a mount below it is split (ModeSplit): its
//     own entries are shown read-only (subdirectories without a mount
//     below are overlaid on their own, directories with one are split in
//     turn, symbolic links recreated, other files bound read-only), so
//     creating or removing an entry directly in it fails with EROFS;
//     a subdirectory the user cannot enter is bound read-only.
//
// mounts is the whole of mountinfo (every mount counts as a lock).
func PlanUserns(mounts []MountInfo, share, exclude, writable []string) []Mount {
	plan := Plan(mounts, share, exclude)
	isEntry := map[string]bool{}
	for _, m := range plan {
		isEntry[m.Path] = true
	}
	shared := func(p string) bool {
		for _, d := range append(append([]string(nil), share...), exclude...) {
			if under(p, d) {
				return true
			}
		}
		return false
	}
	for _, w := range writable {
		w = filepath.Clean(w)
		if isEntry[w] || shared(w) {
			continue
		}
		if fi, err := os.Stat(w); err != nil || !fi.IsDir() {
			continue
		}
		// The deepest entry holding w decides: only under an overlay.
		enc := -1
		for i, m := range plan {
			if under(w, m.Path) && (enc < 0 || depth(m.Path) > depth(plan[enc].Path)) {
				enc = i
			}
		}
		if enc < 0 || plan[enc].Mode != ModeOverlay {
			continue
		}
		plan = append(plan, Mount{Path: w, FSType: plan[enc].FSType, Mode: ModeOverlay})
		isEntry[w] = true
	}
	isMount := map[string]bool{}
	for _, m := range mounts {
		isMount[m.Path] = true
	}
	below := func(p string) bool { // a mount strictly below p
		for q := range isMount {
			if q != p && under(q, p) {
				return true
			}
		}
		return false
	}
	var out []Mount
	var split func(m Mount)
	split = func(m Mount) {
		m.Mode = ModeSplit
		out = append(out, m)
		ents, err := os.ReadDir(m.Path)
		if err != nil {
			return // shown empty
		}
		for _, e := range ents {
			p := filepath.Join(m.Path, e.Name())
			if isEntry[p] {
				continue // its own entry
			}
			c := Mount{Path: p, FSType: m.FSType}
			switch t := e.Type(); {
			case t&fs.ModeSymlink != 0:
				c.Mode = ModeSymlink
				if c.Target, err = os.Readlink(p); err != nil {
					continue
				}
			case t.IsDir() && isMount[p]:
				// A mount the plan leaves out (excluded, another run's
				// layers): an empty read-only directory.
				c.Mode = ModeSplit
			case t.IsDir() && below(p):
				split(c)
				continue
			case t.IsDir() && unix.Access(p, unix.X_OK) != nil:
				// The user cannot enter it (e.g. /root): nothing in it
				// to write; bound read-only rather than overlaid.
				c.Mode = ModeReadOnly
			case t.IsDir():
				c.Mode = ModeOverlay
			default:
				c.Mode = ModeReadOnly
			}
			out = append(out, c)
		}
	}
	for _, m := range plan {
		if m.Mode == ModeOverlay && below(m.Path) {
			split(m)
			continue
		}
		out = append(out, m)
	}
	sort.SliceStable(out, func(i, j int) bool { return depth(out[i].Path) < depth(out[j].Path) })
	return out
}

// upperPerm gives the top of an upper directory the lower's mode (the
// overlay's root shows the upper's attributes), without the write bits
// when the user may not write the lower: what the user may do there is
// what it may do outside. The owner shown is the user's.
func upperPerm(upper, lower string) error {
	fi, err := os.Stat(lower)
	if err != nil {
		return err
	}
	perm := fi.Mode() & (fs.ModePerm | fs.ModeSticky | fs.ModeSetgid)
	if unix.Access(lower, unix.W_OK) != nil {
		perm &^= 0o222
	}
	return os.Chmod(upper, perm)
}

// removeAll is os.RemoveAll that first makes every directory of the
// tree its owner's to enter and empty (overlayfs leaves its work
// directory mode 000).
func removeAll(p string) error {
	err := os.RemoveAll(p)
	if err == nil || !errors.Is(err, fs.ErrPermission) {
		return err
	}
	filepath.WalkDir(p, func(q string, d fs.DirEntry, err error) error {
		if d != nil && d.IsDir() {
			os.Chmod(q, 0o700)
			if err != nil { // unreadable until now: walk it again
				removeAll(q)
				return fs.SkipDir
			}
		}
		return nil
	})
	return os.RemoveAll(p)
}

// UserLayerRoot is where MechanismUserns keeps a run's layers: like the
// root mechanism's, on a tmpfs when the user has one, since no tmpfs
// can be mounted for it ($XDG_RUNTIME_DIR/lockstep, else
// /dev/shm/lockstep-<uid>, a directory of the user's, mode 0700);
// else the state root (creating and removing the layers' directories
// then costs what that filesystem makes it cost).
func UserLayerRoot(stateRoot string) string {
	uid := os.Getuid()
	var cands []string
	if x := os.Getenv("XDG_RUNTIME_DIR"); filepath.IsAbs(x) {
		cands = append(cands, filepath.Join(x, "lockstep"))
	}
	cands = append(cands, filepath.Join("/dev/shm", "lockstep-"+strconv.Itoa(uid)))
	for _, d := range cands {
		var sfs unix.Statfs_t
		if unix.Statfs(filepath.Dir(d), &sfs) != nil || sfs.Type != unix.TMPFS_MAGIC {
			continue
		}
		if err := os.Mkdir(d, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			continue
		}
		// Ours, a directory, not a link another user planted.
		var st unix.Stat_t
		if unix.Lstat(d, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != uid || st.Mode&0o077 != 0 {
			continue
		}
		return d
	}
	return stateRoot
}
