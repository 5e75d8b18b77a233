package contain

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// MaybeHelper runs Helper and exits when os.Args asks for it (the lockstep
// binary and test binaries that start contained runs call it first thing).
func MaybeHelper() {
	if len(os.Args) > 1 && os.Args[1] == HelperArg {
		err := Helper(os.Args[2:])
		fmt.Fprintf(os.Stderr, "lockstep contain: %v\n", err)
		os.Exit(126)
	}
}

// Helper runs inside the new mount namespace: args are the spec file, "--"
// and the command. It builds the contained tree, chroots into it and execs
// the command; it returns only on failure.
func Helper(args []string) error {
	if len(args) < 3 || args[1] != "--" {
		return fmt.Errorf("usage: %s SPEC -- COMMAND", HelperArg)
	}
	data, err := os.ReadFile(args[0])
	if err != nil {
		return err
	}
	var s Session
	if err := json.Unmarshal(data, &s); err != nil {
		return err
	}
	// Nothing mounted here may propagate back to the caller's namespace.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make / private: %w", err)
	}
	userns := s.Mechanism == MechanismUserns
	splitRoot := userns && len(s.Mounts) > 0 && s.Mounts[0].Path == "/" && s.Mounts[0].Mode == ModeSplit
	if splitRoot {
		// The staging root: a tmpfs in this namespace, read-only once
		// every entry is in place.
		if err := unix.Mount("lockstep-run", s.Root, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755"); err != nil {
			return fmt.Errorf("staging tmpfs: %w", err)
		}
	}
	var readonly []string
	var fallback []Mount
	for _, m := range s.Mounts {
		target := s.Root + m.Path
		if m.Path == "/" {
			target = s.Root
		}
		fb, err := mountOne(m, target, userns)
		if errors.Is(err, errGone) {
			// Removed since the plan (another process's temporary file
			// or mount): nothing to show, nothing to make read-only.
			continue
		}
		if err == nil && m.Mode == ModeReadOnly {
			readonly = append(readonly, target)
		}
		switch {
		case err == nil:
			if fb != nil {
				fallback = append(fallback, *fb)
			}
		case m.Path == "/":
			return err
		default:
			// A mount that changed under us (another process's temporary
			// mount going away): not shown. Writes to its path stay in the
			// parent's layer, so it is still contained.
			m.Mode, m.Reason = "hidden", "not shown in the run: "+err.Error()
			fallback = append(fallback, m)
		}
	}
	if len(fallback) > 0 {
		data, _ := json.Marshal(fallback)
		os.WriteFile(filepath.Join(s.Base, "fallback.json"), data, 0o600)
	}
	for _, p := range s.Share {
		if _, err := os.Stat(p); err != nil {
			continue
		}
		target := s.Root + p
		if err := ensureTarget(p, target); err != nil {
			return fmt.Errorf("share %s: %w", p, err)
		}
		if err := unix.Mount(p, target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("share %s: %w", p, err)
		}
	}
	for _, t := range readonly {
		if err := unix.Mount("", t, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
			return fmt.Errorf("read-only %s: %w", t, err)
		}
	}
	if splitRoot {
		if err := unix.Mount("", s.Root, "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, "mode=0755"); err != nil {
			return fmt.Errorf("staging tmpfs read-only: %w", err)
		}
	}
	if err := unix.Chroot(s.Root); err != nil {
		return fmt.Errorf("chroot: %w", err)
	}
	cwd := s.Cwd
	if cwd == "" {
		cwd = "/"
	}
	if err := os.Chdir(cwd); err != nil {
		return fmt.Errorf("chdir %s: %w", cwd, err)
	}
	cmd := args[2:]
	path, err := exec.LookPath(cmd[0])
	if err != nil {
		return fmt.Errorf("command %q: %w", cmd[0], err)
	}
	if userns {
		// The command gets no capability: it cannot unmount its layers
		// or leave the chroot. Capabilities are per thread: the exec
		// happens on this one.
		runtime.LockOSThread()
		if err := dropCaps(); err != nil {
			return fmt.Errorf("drop capabilities: %w", err)
		}
	}
	return syscall.Exec(path, cmd, os.Environ())
}

// dropCaps clears this thread's ambient and inheritable capabilities: an
// exec as a uid other than 0 then keeps none.
func dropCaps() error {
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return err
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return err
	}
	data[0].Inheritable, data[1].Inheritable = 0, 0
	return unix.Capset(&hdr, &data[0])
}

// mountOne shows mount m at target; fb, when not nil, is m written
// through because the kernel refused the overlay.
func mountOne(m Mount, target string, userns bool) (fb *Mount, err error) {
	if _, err := os.Lstat(m.Path); errors.Is(err, os.ErrNotExist) {
		return nil, errGone // unmounted and removed since the plan: nothing to show
	}
	switch m.Mode {
	case ModeSymlink:
		os.MkdirAll(filepath.Dir(target), 0o755)
		return nil, os.Symlink(m.Target, target)
	case ModeSplit:
		if m.Path == "/" {
			return nil, nil // the staging tmpfs
		}
		return nil, os.MkdirAll(target, 0o755)
	}
	if err := ensureTarget(m.Path, target); err != nil {
		if gone(err) {
			return nil, errGone
		}
		return nil, fmt.Errorf("mount point %s: %w", target, err)
	}
	switch m.Mode {
	case ModeOverlay:
		opts := "lowerdir=" + m.Path + ",upperdir=" + m.Upper + ",workdir=" + m.Work
		if userns {
			opts += ",userxattr" // trusted.* cannot be set in a user namespace
		}
		if err := unix.Mount("lockstep-run", target, "overlay", 0, opts); err != nil {
			// Refused (a lower overlayfs cannot stack, an odd
			// filesystem): written through, and said so.
			if berr := unix.Mount(m.Path, target, "", unix.MS_BIND, ""); berr != nil {
				if gone(berr) {
					return nil, errGone
				}
				return nil, fmt.Errorf("overlay %s: %v; bind: %w", m.Path, err, berr)
			}
			m.Mode, m.Reason = ModeBind, "overlay refused: "+err.Error()
			return &m, nil
		}
	case ModeBind, ModeReadOnly:
		err := unix.Mount(m.Path, target, "", unix.MS_BIND, "")
		if userns && errors.Is(err, unix.EINVAL) {
			// A mount with mounts below it, locked in a user namespace:
			// only a recursive bind may show it (e.g. /dev with
			// /dev/shm, then overlaid by its own entry).
			err = unix.Mount(m.Path, target, "", unix.MS_BIND|unix.MS_REC, "")
		}
		if err != nil && gone(err) {
			return nil, errGone
		}
		if err != nil {
			return nil, fmt.Errorf("bind %s: %w", m.Path, err)
		}
	case ModeRBind:
		if err := unix.Mount(m.Path, target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			if gone(err) {
				return nil, errGone
			}
			return nil, fmt.Errorf("rbind %s: %w", m.Path, err)
		}
	}
	return nil, nil
}

// errGone is mountOne's answer for an entry removed since the plan:
// nothing was mounted at its target (so nothing is to be made read-only).
var errGone = errors.New("removed since the plan")

// gone reports an error of a mount removed since the plan (another
// process's temporary mount): it is skipped, not fatal.
func gone(err error) bool { return errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ENOENT) }

// ensureTarget makes the mount point exist in the staging tree with the
// source's kind (a directory, or a file for a file mount).
func ensureTarget(src, target string) error {
	if _, err := os.Lstat(target); err == nil {
		return nil
	}
	fi, err := os.Stat(src)
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return os.MkdirAll(target, 0o755)
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}
