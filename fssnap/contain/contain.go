// Package contain runs a command in its own mount namespace in which every
// writable local filesystem it can reach is an overlayfs with a per-run
// upper directory: whatever the command writes outside the directories
// declared shared (the run's --dir, --share paths) lands in the upper
// directories and nowhere else. After the run the upper directories are
// read (the list of what the run wrote), applied to the real filesystems
// (whiteouts become deletions, opaque directories replace) or discarded.
//
// The namespace is made with clone(CLONE_NEWNS) by the process that starts
// the command (proc.Spec.Cloneflags); that process is the lockstep binary
// itself re-executed as a helper (HelperArg), which makes propagation
// private, builds the contained tree in a staging directory (an overlay per
// writable mount, bind mounts for read-only and pseudo filesystems, the
// shared paths bound over it), chroots into it and execs the command.
//
// The upper directories live on a tmpfs mounted (in the caller's namespace)
// under the state root, never inside an overlaid tree: overlayfs refuses
// overlapping layers, and the tmpfs survives the namespace so the caller can
// read it after the run.
//
// Two mechanisms make the namespace (Detect picks one). MechanismRoot needs
// root (CAP_SYS_ADMIN) and overlayfs. MechanismUserns needs neither: the
// helper is started in a new user namespace as well (the invoking user's
// uid and gid mapped to themselves, CAP_SYS_ADMIN and CAP_SYS_CHROOT as
// ambient capabilities dropped before the command's exec), its overlays
// use the userxattr option (kernel >= 5.11), the upper directories are
// ordinary directories under the state root (no tmpfs can be mounted in
// the caller's namespace), and a directory with another mount below it
// cannot be a lower layer (the kernel refuses locked submounts): it is
// split, its own entries shown read-only and each subdirectory overlaid
// on its own (see PlanUserns).
//
// Not contained: the network,
// other namespaces (IPC, UTS, pid), kernel state (sysctl, modules), /proc,
// /sys and /dev (bound through), remote filesystems (NFS, FUSE…), and the
// shared paths.
package contain

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/lockstep-hq/lockstep"
)

// HelperArg is the hidden first argument that makes the lockstep binary
// the namespace's helper (see Helper).
const HelperArg = "__contain"

// Mechanisms (Options.Mechanism, Detect).
const (
	MechanismAuto   = "auto"   // root when root, else userns
	MechanismRoot   = "root"   // a mount namespace made as root
	MechanismUserns = "userns" // an unprivileged user and mount namespace
)

// Mount modes.
const (
	ModeOverlay = "overlay" // copy-on-write: writes land in the upper directory
	ModeBind    = "bind"    // written through (read-only, pseudo or remote filesystem)
	ModeRBind   = "rbind"   // /proc, /sys, /dev with everything under them
	ModeShare   = "share"   // declared shared: the real path bound over the overlay
	// userns only: a directory with a mount below it (no lower layer
	// can have one); its entries are shown read-only, each subdirectory
	// is its own entry.
	ModeSplit    = "split"
	ModeSymlink  = "symlink"  // userns: a symbolic link of a split directory, recreated
	ModeReadOnly = "readonly" // userns: a file of a split directory, bound read-only
)

// Mount is one entry of the contained tree.
type Mount struct {
	Path   string `json:"path"`
	FSType string `json:"fstype,omitempty"`
	Mode   string `json:"mode"`
	Upper  string `json:"upper,omitempty"`
	Work   string `json:"work,omitempty"`
	// Reason says why a writable mount is written through.
	Reason string `json:"reason,omitempty"`
	// Target is a ModeSymlink's link; Perm the mode given to the top of
	// an overlay's upper directory (userns: the overlay's root takes its
	// attributes from it).
	Target string `json:"target,omitempty"`
}

// Options configure one contained run.
type Options struct {
	// StateRoot holds the per-run directory <StateRoot>/contain/<id>
	// (a tmpfs with the upper directories).
	StateRoot string
	// Share are paths written through (the run's --dir first).
	Share []string
	// Exclude are paths left out of the contained tree entirely (the
	// service's own state): mounts under them are neither overlaid nor
	// bound; the command sees the underlying directory.
	Exclude []string
	// Cwd is the command's working directory.
	Cwd string
	// TmpfsSize bounds the tmpfs holding the upper directories (mount
	// option size=, e.g. "50%" or "4g"); "" is the kernel's default (half
	// of RAM). Not used by MechanismUserns (the layers are on the state
	// root's filesystem).
	TmpfsSize string
	// Mechanism is MechanismRoot (or "") or MechanismUserns; see Detect.
	Mechanism string
	// Writable are directories the command may write that get an
	// overlay of their own under MechanismUserns (see PlanUserns); nil:
	// WritableDirs(os.Getenv).
	Writable []string
	// LayerRoot holds MechanismUserns's layers (<LayerRoot>/contain/<id>);
	// "": UserLayerRoot (a tmpfs of the user's when there is one).
	LayerRoot string
}

// Session is one prepared containment.
type Session struct {
	ID     string  `json:"id"`
	Base   string  `json:"base"` // the tmpfs: spec.json, root/, u/<i>, w/<i>
	Root   string  `json:"root"`
	Cwd    string  `json:"cwd"`
	Mounts []Mount `json:"mounts"`
	Share  []string
	// Mechanism is MechanismRoot or MechanismUserns; UID and GID the
	// invoking user's (userns: mapped to themselves).
	Mechanism string `json:"mechanism"`
	UID       int    `json:"uid"`
	GID       int    `json:"gid"`
}

// Detect resolves mech (MechanismAuto or "", MechanismRoot,
// MechanismUserns) to the mechanism usable here, or says why none is:
// auto is root when the process is root, else userns.
func Detect(mech string) (string, error) {
	switch mech {
	case "", MechanismAuto:
		rerr := Available()
		if rerr == nil {
			return MechanismRoot, nil
		}
		uerr := AvailableUserns()
		if uerr == nil {
			return MechanismUserns, nil
		}
		return "", fmt.Errorf("%v; %v", rerr, uerr)
	case MechanismRoot:
		return mech, Available()
	case MechanismUserns:
		return mech, AvailableUserns()
	}
	return "", lockstep.Errorf(lockstep.EINVALID, "containment mechanism %q: auto, root or userns", mech)
}

// AvailableUserns reports why an unprivileged user namespace with
// overlays cannot be used here (nil: it can): the kernel must allow
// unprivileged user namespaces (kernel.unprivileged_userns_clone where
// it exists, user.max_user_namespaces, Ubuntu's
// kernel.apparmor_restrict_unprivileged_userns) and be 5.11 or later
// (overlayfs in a user namespace). A refusal these files do not show
// (a seccomp filter, an LSM) fails the run's helper and is said there.
func AvailableUserns() error {
	if b, err := os.ReadFile("/proc/sys/kernel/unprivileged_userns_clone"); err == nil && strings.TrimSpace(string(b)) == "0" && os.Geteuid() != 0 {
		return errors.New("no user namespaces (kernel.unprivileged_userns_clone = 0)")
	}
	if b, err := os.ReadFile("/proc/sys/user/max_user_namespaces"); err == nil && strings.TrimSpace(string(b)) == "0" {
		return errors.New("no user namespaces (user.max_user_namespaces = 0)")
	}
	if b, err := os.ReadFile("/proc/sys/kernel/apparmor_restrict_unprivileged_userns"); err == nil && strings.TrimSpace(string(b)) == "1" && os.Geteuid() != 0 {
		return errors.New("no user namespaces (kernel.apparmor_restrict_unprivileged_userns = 1)")
	}
	var u unix.Utsname
	if err := unix.Uname(&u); err == nil {
		var maj, min int
		fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &maj, &min)
		if maj < 5 || maj == 5 && min < 11 {
			return fmt.Errorf("kernel %d.%d: overlayfs in a user namespace needs 5.11", maj, min)
		}
	}
	if err := overlayInKernel(); err != nil {
		return err
	}
	probeOnce.Do(func() { probeErr = probeUserns() })
	return probeErr
}

var (
	probeOnce sync.Once
	probeErr  error
)

// probeUserns starts true(1) in a new user and mount namespace: a
// refusal the sysctls do not show (a container's seccomp filter, an
// LSM) is found here, once per process, not by a failed run.
func probeUserns() error {
	path, err := exec.LookPath("true")
	if err != nil {
		return nil // nothing to probe with: the run's helper will say
	}
	cmd := exec.Command(path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWUSER | unix.CLONE_NEWNS,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: os.Getuid(), HostID: os.Getuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: os.Getgid(), HostID: os.Getgid(), Size: 1}}}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("a user namespace is refused here (%v)", err)
	}
	return nil
}

func overlayInKernel() error {
	data, err := os.ReadFile("/proc/filesystems")
	if err != nil {
		return fmt.Errorf("read /proc/filesystems: %w", err)
	}
	if !strings.Contains(string(data), "\toverlay\n") {
		return errors.New("the kernel has no overlayfs")
	}
	return nil
}

// WritableDirs are the directories a user's command commonly writes
// that get their own overlay under MechanismUserns: $HOME, $TMPDIR,
// $XDG_RUNTIME_DIR, /tmp, /var/tmp (those that exist).
func WritableDirs(getenv func(string) string) []string {
	var out []string
	for _, p := range []string{getenv("HOME"), getenv("TMPDIR"), getenv("XDG_RUNTIME_DIR"), "/tmp", "/var/tmp"} {
		if p != "" && filepath.IsAbs(p) {
			out = append(out, filepath.Clean(p))
		}
	}
	return out
}

// Available reports why containment as root cannot be used here (nil: it
// can).
func Available() error {
	if os.Geteuid() != 0 {
		return errors.New("not root (a mount namespace with overlays needs CAP_SYS_ADMIN)")
	}
	data, err := os.ReadFile("/proc/filesystems")
	if err != nil {
		return fmt.Errorf("read /proc/filesystems: %w", err)
	}
	if !strings.Contains(string(data), "\toverlay\n") {
		if err := exec.Command("modprobe", "overlay").Run(); err != nil {
			return errors.New("the kernel has no overlayfs")
		}
	}
	return nil
}

// pseudo filesystems are bound through (their content is kernel state).
var pseudo = map[string]bool{
	"proc": true, "sysfs": true, "devtmpfs": true, "devpts": true, "mqueue": true, "cgroup": true, "cgroup2": true,
	"securityfs": true, "debugfs": true, "tracefs": true, "bpf": true, "pstore": true, "configfs": true,
	"fusectl": true, "hugetlbfs": true, "autofs": true, "binfmt_misc": true, "efivarfs": true, "nsfs": true,
	"rpc_pipefs": true, "nfsd": true, "selinuxfs": true,
}

// remote filesystems are written through: an overlay over them would
// not stop other machines from seeing the writes anyway.
func remote(fstype string) bool {
	switch fstype {
	case "nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "ceph", "glusterfs", "lustre", "afs", "virtiofs":
		return true
	}
	return strings.HasPrefix(fstype, "fuse")
}

// MountInfo is one line of /proc/self/mountinfo.
type MountInfo struct {
	Path   string
	FSType string
	Source string
	RO     bool
}

// tmpfsSource names the tmpfs of every contained run: another run's
// layers are never part of this run's tree.
const tmpfsSource = "lockstep-contain"

// ReadMounts parses /proc/self/mountinfo.
func ReadMounts() ([]MountInfo, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []MountInfo
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fl := strings.Fields(sc.Text())
		sep := 6
		for sep < len(fl) && fl[sep] != "-" {
			sep++
		}
		if sep+1 >= len(fl) || len(fl) < 6 {
			continue
		}
		opts := strings.Split(fl[5], ",")
		mi := MountInfo{Path: unescape(fl[4]), FSType: fl[sep+1], RO: len(opts) > 0 && opts[0] == "ro"}
		if sep+2 < len(fl) {
			mi.Source = unescape(fl[sep+2])
		}
		out = append(out, mi)
	}
	return out, sc.Err()
}

// unescape decodes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
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

func under(p, dir string) bool {
	if dir == "/" {
		return true
	}
	return p == dir || strings.HasPrefix(p, dir+"/")
}

func depth(p string) int {
	if p == "/" {
		return 0
	}
	return strings.Count(p, "/")
}

// Plan decides, for each mount, how the contained tree shows it.
func Plan(mounts []MountInfo, share, exclude []string) []Mount {
	// Of mounts stacked on one path only the last (the visible one) counts.
	last := map[string]int{}
	for i, m := range mounts {
		last[m.Path] = i
	}
	var sorted []MountInfo
	for i, m := range mounts {
		if last[m.Path] == i {
			sorted = append(sorted, m)
		}
	}
	sort.SliceStable(sorted, func(i, j int) bool { return depth(sorted[i].Path) < depth(sorted[j].Path) })
	var out []Mount
	skip := func(p string) bool {
		for _, d := range []string{"/proc", "/sys"} {
			if under(p, d) && p != d {
				return true
			}
		}
		for _, d := range exclude {
			if under(p, d) {
				return true
			}
		}
		for _, d := range share {
			if under(p, d) {
				return true
			}
		}
		return false
	}
	for _, m := range sorted {
		if skip(m.Path) || m.Source == tmpfsSource {
			continue
		}
		e := Mount{Path: m.Path, FSType: m.FSType}
		switch {
		case m.Path == "/proc" || m.Path == "/sys":
			e.Mode = ModeRBind // kernel state, with everything under it
		case m.RO:
			e.Mode = ModeBind
		case pseudo[m.FSType]:
			e.Mode, e.Reason = ModeBind, "pseudo filesystem "+m.FSType
		case remote(m.FSType):
			e.Mode, e.Reason = ModeBind, "remote filesystem "+m.FSType
		case strings.ContainsAny(m.Path, ",:\\"):
			e.Mode, e.Reason = ModeBind, "path not expressible as an overlay layer"
		default:
			if fi, err := os.Stat(m.Path); err != nil || !fi.IsDir() {
				e.Mode, e.Reason = ModeBind, "a file mount"
			} else {
				e.Mode = ModeOverlay
			}
		}
		out = append(out, e)
	}
	return out
}

// Prepare mounts the run's tmpfs under opts.StateRoot and plans the
// contained tree. The caller runs the command with Wrap and Cloneflags,
// then reads Changes, calls Apply or Keep, and always Discard.
func Prepare(opts Options) (*Session, error) {
	if opts.StateRoot == "" {
		return nil, lockstep.Errorf(lockstep.EINVALID, "containment needs a state root")
	}
	mounts, err := ReadMounts()
	if err != nil {
		return nil, fmt.Errorf("read mounts: %w", err)
	}
	var b [8]byte
	rand.Read(b[:])
	s := &Session{ID: hex.EncodeToString(b[:]), Cwd: opts.Cwd, Mechanism: MechanismRoot, UID: os.Getuid(), GID: os.Getgid()}
	switch opts.Mechanism {
	case "", MechanismRoot:
	case MechanismUserns:
		s.Mechanism = MechanismUserns
	default:
		return nil, lockstep.Errorf(lockstep.EINVALID, "containment mechanism %q: root or userns", opts.Mechanism)
	}
	layers := opts.StateRoot
	if s.Mechanism == MechanismUserns {
		if layers = opts.LayerRoot; layers == "" {
			layers = UserLayerRoot(opts.StateRoot)
		}
	}
	s.Base = filepath.Join(layers, "contain", s.ID)
	s.Root = filepath.Join(s.Base, "root")
	for _, p := range opts.Share {
		if p = filepath.Clean(p); filepath.IsAbs(p) && p != "/" {
			s.Share = append(s.Share, p)
		}
	}
	exclude := append([]string{filepath.Join(opts.StateRoot, "contain"), filepath.Join(layers, "contain")}, opts.Exclude...)
	if s.Mechanism == MechanismUserns {
		writable := opts.Writable
		if writable == nil {
			writable = WritableDirs(os.Getenv)
		}
		s.Mounts = PlanUserns(mounts, s.Share, exclude, writable)
	} else {
		s.Mounts = Plan(mounts, s.Share, exclude)
	}
	if err := os.MkdirAll(s.Base, 0o700); err != nil {
		return nil, err
	}
	if s.Mechanism == MechanismRoot {
		data := "mode=0700"
		if opts.TmpfsSize != "" {
			data += ",size=" + opts.TmpfsSize
		}
		if err := unix.Mount(tmpfsSource, s.Base, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, data); err != nil {
			os.Remove(s.Base)
			return nil, fmt.Errorf("mount the run's tmpfs at %s: %w", s.Base, err)
		}
	}
	for i := range s.Mounts {
		m := &s.Mounts[i]
		if m.Mode != ModeOverlay {
			continue
		}
		m.Upper = filepath.Join(s.Base, "u", strconv.Itoa(i))
		m.Work = filepath.Join(s.Base, "w", strconv.Itoa(i))
		for _, d := range []string{m.Upper, m.Work} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				s.Discard()
				return nil, err
			}
		}
		if s.Mechanism == MechanismUserns {
			if err := upperPerm(m.Upper, m.Path); err != nil {
				s.Discard()
				return nil, err
			}
		}
	}
	if err := os.MkdirAll(s.Root, 0o755); err != nil {
		s.Discard()
		return nil, err
	}
	spec, _ := json.Marshal(s)
	if err := os.WriteFile(filepath.Join(s.Base, "spec.json"), spec, 0o600); err != nil {
		s.Discard()
		return nil, err
	}
	return s, nil
}

// Cloneflags is what the helper must be started with.
func (s *Session) Cloneflags() uintptr {
	if s.Mechanism == MechanismUserns {
		return unix.CLONE_NEWUSER | unix.CLONE_NEWNS
	}
	return unix.CLONE_NEWNS
}

// IDMaps are the helper's user namespace maps (MechanismUserns: the
// user's uid and gid mapped to themselves; nil otherwise) and its
// ambient capabilities (mounting, chroot, overlayfs's own needs),
// dropped before the command's exec.
func (s *Session) IDMaps() (uids, gids []syscall.SysProcIDMap, ambient []uintptr) {
	if s.Mechanism != MechanismUserns {
		return nil, nil, nil
	}
	return []syscall.SysProcIDMap{{ContainerID: s.UID, HostID: s.UID, Size: 1}},
		[]syscall.SysProcIDMap{{ContainerID: s.GID, HostID: s.GID, Size: 1}},
		// DAC_OVERRIDE: overlayfs refuses to mount without it (its work
		// directory); FOWNER and CHOWN for copy-ups. In the namespace
		// they bear only on inodes of mapped ids: the user's.
		[]uintptr{unix.CAP_SYS_ADMIN, unix.CAP_SYS_CHROOT, unix.CAP_DAC_OVERRIDE, unix.CAP_FOWNER, unix.CAP_CHOWN}
}

// Wrap turns a command into the helper's command line.
func (s *Session) Wrap(helper string, args []string) []string {
	return append([]string{helper, HelperArg, filepath.Join(s.Base, "spec.json"), "--"}, args...)
}

// Uncontained lists the writable mounts written through (not overlaid),
// with the reason, and the shared paths.
func (s *Session) Uncontained() []Mount {
	var out []Mount
	for _, m := range s.Mounts {
		if m.Reason != "" {
			out = append(out, m)
		}
	}
	if data, err := os.ReadFile(filepath.Join(s.Base, "fallback.json")); err == nil {
		var fb []Mount
		if json.Unmarshal(data, &fb) == nil {
			out = append(out, fb...)
		}
	}
	for _, p := range s.Share {
		out = append(out, Mount{Path: p, Mode: ModeShare, Reason: "declared shared"})
	}
	return out
}

// Discard unmounts the run's tmpfs (every upper directory with it) and
// removes its directory.
func (s *Session) Discard() error {
	if s.Mechanism == MechanismUserns {
		// Nothing is mounted in this namespace: the layers are
		// directories. overlayfs leaves <work>/work mode 000.
		for _, m := range s.Mounts {
			if m.Work != "" {
				os.Chmod(filepath.Join(m.Work, "work"), 0o700)
			}
		}
		return removeAll(s.Base)
	}
	err := unix.Unmount(s.Base, unix.MNT_DETACH)
	if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount %s: %w", s.Base, err)
	}
	if err := os.RemoveAll(s.Base); err != nil {
		return err
	}
	return nil
}

// Discarded proves the upper directories are gone: the tmpfs is not
// mounted and its directory does not exist.
func (s *Session) Discarded() error {
	if _, err := os.Lstat(s.Base); err == nil {
		return fmt.Errorf("%s still exists", s.Base)
	}
	mounts, err := ReadMounts()
	if err != nil {
		return err
	}
	for _, m := range mounts {
		if under(m.Path, s.Base) {
			return fmt.Errorf("%s still mounted", m.Path)
		}
	}
	return nil
}

// Change is one path the run wrote.
type Change struct {
	Path string `json:"path"`
	Kind string `json:"kind"` // created, modified, deleted
	Type string `json:"type"` // file, dir, symlink, other
	Size int64  `json:"size"`
}

// Changes lists what the run wrote in the overlaid filesystems, read
// from the upper directories (a whiteout is a deletion).
func (s *Session) Changes() ([]Change, error) {
	var out []Change
	err := s.walk(func(real, upper string, fi fs.FileInfo, whiteout, opaque bool) error {
		c := Change{Path: real, Type: typeOf(fi)}
		rfi, rerr := os.Lstat(real)
		switch {
		case whiteout:
			c.Kind, c.Type = "deleted", "other"
			if rerr != nil {
				return nil // nothing there to delete (created and removed again)
			}
			c.Type, c.Size = typeOf(rfi), sizeOf(rfi)
		case rerr != nil:
			c.Kind, c.Size = "created", sizeOf(fi)
		case fi.IsDir() && rfi.IsDir() && !opaque:
			return nil // a directory copied up for its content: its entries say what changed
		default:
			c.Kind, c.Size = "modified", sizeOf(fi)
		}
		out = append(out, c)
		return nil
	})
	return out, err
}

func typeOf(fi fs.FileInfo) string {
	switch {
	case fi.Mode().IsRegular():
		return "file"
	case fi.IsDir():
		return "dir"
	case fi.Mode()&fs.ModeSymlink != 0:
		return "symlink"
	}
	return "other"
}

func sizeOf(fi fs.FileInfo) int64 {
	if fi.Mode().IsRegular() {
		return fi.Size()
	}
	return 0
}

func isWhiteout(fi fs.FileInfo) bool {
	if fi.Mode()&fs.ModeCharDevice == 0 {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && st.Rdev == 0
}

func isOpaque(path string) bool {
	buf := make([]byte, 4)
	for _, name := range []string{"trusted.overlay.opaque", "user.overlay.opaque"} { // root, userns (userxattr)
		n, err := unix.Lgetxattr(path, name, buf)
		if err == nil && n > 0 && buf[0] == 'y' {
			return true
		}
	}
	return false
}

// walk visits every entry of every upper directory, parents first.
func (s *Session) walk(fn func(real, upper string, fi fs.FileInfo, whiteout, opaque bool) error) error {
	for _, m := range s.Mounts {
		if m.Mode != ModeOverlay {
			continue
		}
		err := filepath.Walk(m.Upper, func(p string, fi fs.FileInfo, err error) error {
			if errors.Is(err, fs.ErrNotExist) && p != m.Upper {
				// Gone since its directory was read (a process of the run
				// still dying, overlayfs finishing a copy-up): it is not
				// there to list, and the rest of the layer still is.
				return nil
			}
			if err != nil {
				return err
			}
			if p == m.Upper {
				return nil
			}
			rel, _ := filepath.Rel(m.Upper, p)
			real := filepath.Join(m.Path, rel)
			wo := isWhiteout(fi)
			op := fi.IsDir() && isOpaque(p)
			return fn(real, p, fi, wo, op)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// Apply writes the run's changes to the real filesystems (a whiteout
// deletes, an opaque directory replaces the real one) and returns them.
func (s *Session) Apply() ([]Change, error) {
	changes, err := s.Changes()
	if err != nil {
		return nil, err
	}
	// A path that cannot be applied (the user may not write it: a
	// userns run wrote it in a directory shown as the user's) is said in
	// the error; the others are still applied.
	var errs []error
	werr := s.walk(func(real, upper string, fi fs.FileInfo, whiteout, opaque bool) error {
		if err := applyOne(real, upper, fi, whiteout, opaque); err != nil {
			if len(errs) < 20 {
				errs = append(errs, fmt.Errorf("apply %s: %w", real, err))
			} else if len(errs) == 20 {
				errs = append(errs, errors.New("more paths not applied"))
			}
		}
		return nil
	})
	return changes, errors.Join(append(errs, werr)...)
}

func applyOne(real, upper string, fi fs.FileInfo, whiteout, opaque bool) error {
	switch {
	case whiteout:
		return os.RemoveAll(real)
	case fi.IsDir():
		if rfi, err := os.Lstat(real); err == nil && (!rfi.IsDir() || opaque) {
			if err := os.RemoveAll(real); err != nil {
				return err
			}
		}
		if err := os.MkdirAll(real, fi.Mode().Perm()); err != nil {
			return err
		}
		return chmodOwn(real, fi)
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(upper)
		if err != nil {
			return err
		}
		os.RemoveAll(real)
		return os.Symlink(target, real)
	case fi.Mode().IsRegular():
		return copyFile(upper, real, fi)
	}
	return nil // devices, fifos, sockets: not applied
}

func chmodOwn(p string, fi fs.FileInfo) error {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		os.Lchown(p, int(st.Uid), int(st.Gid))
	}
	return os.Chmod(p, fi.Mode()&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky))
}

// copyFile replaces dst with src's content atomically (a temporary file
// in dst's directory renamed over it).
func copyFile(src, dst string, fi fs.FileInfo) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	if rfi, err := os.Lstat(dst); err == nil && rfi.IsDir() {
		if err := os.RemoveAll(dst); err != nil {
			return err
		}
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".lockstep-apply-*")
	if err != nil {
		return err
	}
	if _, err := io.Copy(tmp, in); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	chmodOwn(tmp.Name(), fi)
	if err := os.Rename(tmp.Name(), dst); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return nil
}

// Keep copies the upper directories to dst (forensics of a failed run):
// dst/<i> for mount i, with mounts.json naming each.
func (s *Session) Keep(dst string) error {
	if err := os.MkdirAll(dst, 0o700); err != nil {
		return err
	}
	var kept []Mount
	for i, m := range s.Mounts {
		if m.Mode != ModeOverlay {
			continue
		}
		ents, _ := os.ReadDir(m.Upper)
		if len(ents) == 0 {
			continue
		}
		to := filepath.Join(dst, strconv.Itoa(i))
		if out, err := exec.Command("cp", "-a", m.Upper, to).CombinedOutput(); err != nil {
			return fmt.Errorf("keep %s: %v: %s", m.Upper, err, out)
		}
		kept = append(kept, Mount{Path: m.Path, Mode: m.Mode, Upper: to})
	}
	data, _ := json.MarshalIndent(kept, "", "  ")
	return os.WriteFile(filepath.Join(dst, "mounts.json"), data, 0o600)
}
