package worktree

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sync"

	"golang.org/x/sys/unix"
)

// dirBufs are getdents buffers, reused across directories and goroutines.
var dirBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

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
// fd, except "." and "..", and whether getdents said it is a directory
// (false also for DT_UNKNOWN: the caller's lstat decides). It reads the
// linux_dirent64 records itself: os.File.ReadDir would register the
// descriptor with the poller and allocate a DirEntry per name, a third of
// the walk's time on a tree of small directories.
func listDir(fd int, fn func(name string, isDir bool) error) error {
	bp := dirBufs.Get().(*[]byte)
	defer dirBufs.Put(bp)
	buf := *bp
	for {
		n, err := unix.Getdents(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n <= 0 {
			return nil
		}
		// linux_dirent64: u64 ino, s64 off, u16 reclen, u8 type, name NUL.
		for b := buf[:n]; len(b) > 0; {
			if len(b) < 19 {
				return fmt.Errorf("getdents: short record")
			}
			reclen := int(binary.NativeEndian.Uint16(b[16:18]))
			if reclen < 19 || reclen > len(b) {
				return fmt.Errorf("getdents: bad record length %d", reclen)
			}
			typ, name := b[18], b[19:reclen]
			b = b[reclen:]
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			if string(name) == "." || string(name) == ".." || len(name) == 0 {
				continue
			}
			if err := fn(string(name), typ == unix.DT_DIR); err != nil {
				return err
			}
		}
	}
}
