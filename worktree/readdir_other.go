//go:build !linux

package worktree

import (
	"os"

	"golang.org/x/sys/unix"
)

// openDir opens the directory abs for listDir and the *at calls.
func openDir(abs string) (int, error) {
	return openDirAt(unix.AT_FDCWD, abs)
}

// openDirAt opens the directory name in the directory pfd; a symlink is
// followed only when pfd is AT_FDCWD (the scanned root may be one).
func openDirAt(pfd int, name string) (int, error) {
	flags := unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC
	if pfd != unix.AT_FDCWD {
		flags |= unix.O_NOFOLLOW
	}
	for {
		fd, err := unix.Openat(pfd, name, flags, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

// listDir calls fn with the name of every entry of the directory open as
// fd and whether it is a directory, through os.File.ReadDir on a
// duplicate of fd (which ReadDir's File closes).
func listDir(fd int, fn func(name string, isDir bool) error) error {
	dup, err := unix.Dup(fd)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(dup), "")
	defer f.Close()
	des, err := f.ReadDir(-1)
	if err != nil {
		return err
	}
	for _, de := range des {
		if err := fn(de.Name(), de.IsDir()); err != nil {
			return err
		}
	}
	return nil
}
