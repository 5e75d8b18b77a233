//go:build !linux

package worktree

import (
	"os"

	"golang.org/x/sys/unix"
)

// openDir opens the directory abs for listDir and the *at calls.
func openDir(abs string) (int, error) {
	for {
		fd, err := unix.Open(abs, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
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
