package contain

import "syscall"

func sysProcAttr(s *Session) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Cloneflags: s.Cloneflags()}
}
