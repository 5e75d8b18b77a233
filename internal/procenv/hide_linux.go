package procenv

import "syscall"

// prSetDumpable is PR_SET_DUMPABLE of <linux/prctl.h>.
const prSetDumpable = 4

// Hide makes this process's /proc files (environ, cmdline's memory, mem,
// and ptrace) unreadable to other processes of the same user that are
// not root: the process is marked not dumpable, as ssh-agent does. A
// runner whose key is in its environment runs commands as its own user;
// without this, a command read the key from /proc/$PPID/environ. The
// processes it starts are dumpable again once they exec.
func Hide() error {
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetDumpable, 0, 0); errno != 0 {
		return errno
	}
	return nil
}
